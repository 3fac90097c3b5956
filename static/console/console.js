// Console behaviour that needs a few lines of script: the Menu button of
// narrow screens, copy buttons, confirmations, selects that submit their form,
// inputs that select their text on focus. Everything works without it, just with fewer comforts. No inline
// handlers anywhere (the Content-Security-Policy forbids them): pages mark
// elements with data- attributes and this file reacts.
(function () {
  function copy(button) {
    var target = document.getElementById(button.dataset.copyTarget);
    if (!target) return;
    var label = button.dataset.copyLabel || button.textContent;
    button.dataset.copyLabel = label;
    var done = function () {
      // Translated by the page: data-copied-label on the button or on <body>.
      button.textContent = button.dataset.copiedLabel || document.body.dataset.copiedLabel || "Copied";
      button.classList.add("copied");
      setTimeout(function () { button.textContent = label; button.classList.remove("copied"); }, 2000);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(target.value).then(done, function () { target.select(); document.execCommand("copy"); done(); });
    } else {
      target.select();
      document.execCommand("copy");
      done();
    }
  }
  // The Menu button (shown on narrow screens only) opens and closes the menu
  // it controls; Esc closes it and gives the focus back to the button.
  function setMenu(toggle, open) {
    var menu = document.getElementById(toggle.getAttribute("aria-controls"));
    if (!menu) return;
    menu.classList.toggle("open", open);
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
  }
  document.addEventListener("click", function (event) {
    var toggle = event.target.closest("[data-menu-toggle]");
    if (toggle) {
      setMenu(toggle, toggle.getAttribute("aria-expanded") !== "true");
      return;
    }
    var button = event.target.closest("[data-copy-target]");
    if (button) { event.preventDefault(); copy(button); }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    var toggle = document.querySelector("[data-menu-toggle][aria-expanded='true']");
    if (toggle && toggle.offsetParent !== null) { setMenu(toggle, false); toggle.focus(); }
  });
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (form.dataset && form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
    }
  }, true);
  document.addEventListener("change", function (event) {
    var el = event.target;
    if (el.matches && el.matches("select[data-auto-submit]") && el.form) el.form.submit();
  });
  document.addEventListener("focusin", function (event) {
    var el = event.target;
    if (el.matches && el.matches("input[data-select-on-focus]")) el.select();
  });
})();
