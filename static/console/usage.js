// Live tail of the call logs: each poll asks only for calls newer than the
// newest row on the page. Without script the page is a plain, paged list.
// The detail panel closes with its ✕ button or Esc, and gives the focus back
// to the call that opened it.
(function () {
  var opener = null;

  function closePanel() {
    var panel = document.getElementById("call-panel");
    if (!panel || !panel.innerHTML.trim()) return false;
    panel.innerHTML = "";
    if (opener && document.body.contains(opener)) opener.focus();
    opener = null;
    return true;
  }

  document.addEventListener("htmx:configRequest", function (event) {
    var body = event.detail.elt;
    if (!body || !body.hasAttribute || !body.hasAttribute("data-live-tail")) return;
    var newest = body.querySelector("tr[data-cursor]");
    if (newest) event.detail.parameters.after = newest.dataset.cursor;
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    if (!event.detail.target || event.detail.target.id !== "call-panel") return;
    opener = event.detail.requestConfig && event.detail.requestConfig.elt;
    var close = event.detail.target.querySelector("[data-close-panel]");
    if (close) close.focus();
  });
  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-close-panel]")) closePanel();
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && closePanel()) event.preventDefault();
  });
})();
