// The card on file, with Stripe.js (loaded from STRIPE_JS_URL only on the
// pages that need it): saving a card with a SetupIntent, and finishing a
// card payment the bank wants the cardholder to confirm (3-D Secure). The
// server never takes this script's word: it asks Stripe. Also guards forms
// marked data-once against a double submit (the server charges once anyway).
(function () {
  "use strict";

  // The texts come from the page (data-* on #stripe-texts, rendered in the
  // page's language by invoicing/_stripe_js.html); English when absent.
  function text(key, fallback) {
    var holder = document.getElementById("stripe-texts");
    return (holder && holder.dataset[key]) || fallback;
  }

  function say(node, text) {
    if (!node) return;
    node.textContent = text;
    node.hidden = !text;
  }

  function stripeFor(box, errors) {
    if (typeof window.Stripe !== "function") {
      say(
        errors,
        text("noStripe", "Stripe's card form did not load. Check the connection and reload the page.")
      );
      return null;
    }
    return window.Stripe(box.dataset.publishableKey);
  }

  function errorText(error, fallback) {
    return (error && error.message) || fallback;
  }

  // Saving a card: mount the card Element, confirm the SetupIntent on submit,
  // then post its id back to the server, which checks it with Stripe.
  function setupCard(box) {
    var form = box.querySelector("form");
    var errors = box.querySelector("#card-errors");
    var progress = box.querySelector("#card-progress");
    var button = form.querySelector("button[type=submit]");
    var stripe = stripeFor(box, errors);
    if (!stripe) {
      button.disabled = true;
      return;
    }
    var card = stripe.elements().create("card");
    card.mount(box.querySelector("[data-card-element]"));
    card.on("change", function (event) {
      if (event && event.error) say(errors, event.error.message);
      else say(errors, "");
    });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      if (button.disabled) return;
      button.disabled = true;
      say(errors, "");
      say(progress, text("saving", "Saving the card with Stripe…"));
      var done = function (result) {
        if (!result || result.error || !result.setupIntent) {
          say(progress, "");
          say(errors, errorText(result && result.error, text("notSaved", "The card could not be saved.")));
          button.disabled = false;
          return;
        }
        form.elements.setup_intent.value = result.setupIntent.id;
        say(progress, text("cardConfirmed", "Card confirmed; saving it as the card on file…"));
        form.submit();
      };
      stripe.confirmCardSetup(box.dataset.clientSecret, { payment_method: { card: card } }).then(
        done,
        function (error) {
          done({ error: { message: errorText(error, text("unreachableRetry", "Stripe could not be reached. Try again.")) } });
        }
      );
    });
  }

  // A card payment waiting for its cardholder: Stripe.js shows the bank's
  // check. The balance or the invoice follows Stripe's webhook, not this.
  function confirmPayment(box) {
    var errors = box.querySelector("[data-confirm-errors]");
    var progress = box.querySelector("[data-confirm-progress]");
    var stripe = stripeFor(box, errors);
    if (!stripe) return;
    var finish = function (result) {
      if (!result || result.error) {
        say(progress, "");
        say(errors, errorText(result && result.error, text("notConfirmed", "The payment was not confirmed.")));
        return;
      }
      say(progress, text("confirmed", "Confirmed. The payment completes as soon as Stripe tells us."));
      if (box.dataset.reload) window.location.assign(box.dataset.reload);
    };
    stripe.confirmCardPayment(box.dataset.clientSecret).then(finish, function (error) {
      finish({ error: { message: errorText(error, text("unreachable", "Stripe could not be reached.")) } });
    });
  }

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (event.defaultPrevented || !form.hasAttribute || !form.hasAttribute("data-once")) return;
    if (form.dataset.sent) {
      event.preventDefault();
      return;
    }
    form.dataset.sent = "1";
    var button = form.querySelector("button[type=submit]");
    if (button) window.setTimeout(function () { button.disabled = true; }, 0);
  });

  document.querySelectorAll("[data-card-setup]").forEach(setupCard);
  document.querySelectorAll("[data-confirm-payment]").forEach(confirmPayment);
})();
