// Live tail of the call logs: each poll asks only for calls newer than the
// newest row on the page. Without script the page is a plain, paged list.
(function () {
  document.addEventListener("htmx:configRequest", function (event) {
    var body = event.detail.elt;
    if (!body || !body.hasAttribute || !body.hasAttribute("data-live-tail")) return;
    var newest = body.querySelector("tr[data-cursor]");
    if (newest) event.detail.parameters.after = newest.dataset.cursor;
  });
  document.addEventListener("click", function (event) {
    if (!event.target.closest("[data-close-panel]")) return;
    var panel = document.getElementById("call-panel");
    if (panel) panel.innerHTML = "";
  });
})();
