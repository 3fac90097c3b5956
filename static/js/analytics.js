// Analytics charts: each chart partial carries its Plotly figure as JSON
// (built in Python); this draws every figure htmx swaps in. Without script
// the pages still show the filters and each chart's CSV link.
(function () {
  var CONFIG = {
    displaylogo: false,
    responsive: true,
    modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d"],
  };

  function draw(root) {
    if (!root || !root.querySelectorAll || !window.Plotly) return;
    var scripts = root.matches && root.matches("script.js-figure")
      ? [root] : root.querySelectorAll("script.js-figure");
    Array.prototype.forEach.call(scripts, function (script) {
      if (script.dataset.drawn) return;
      var target = document.getElementById(script.dataset.target);
      if (!target) return;
      script.dataset.drawn = "1";
      var figure = JSON.parse(script.textContent);
      var config = Object.assign({}, CONFIG);
      if (script.dataset.static === "1") config.staticPlot = true;
      window.Plotly.newPlot(target, figure.data, figure.layout, config);
    });
  }

  document.addEventListener("htmx:load", function (event) { draw(event.detail.elt); });
  document.addEventListener("DOMContentLoaded", function () { draw(document); });

  // Typing a date means a custom range.
  document.addEventListener("change", function (event) {
    var input = event.target;
    if (!input.matches || !input.matches("#analytics-filters input[type=datetime-local]")) return;
    var range = document.getElementById("id_range");
    if (range) range.value = "custom";
  }, true);

  // A chart that failed to load says so instead of "Loading".
  document.addEventListener("htmx:responseError", function (event) {
    var elt = event.detail.elt;
    if (elt && elt.classList && elt.classList.contains("chart-card")) {
      elt.removeAttribute("aria-busy");
      // The text comes translated from the page (data-chart-error, "%(status)s" for the code).
      var holder = elt.closest("[data-chart-error]");
      var text = holder ? holder.dataset.chartError
        : "This chart could not be loaded (%(status)s). Check the filters and try again.";
      var p = document.createElement("p");
      p.className = "errors";
      p.setAttribute("role", "alert");
      p.textContent = text.replace("%(status)s", String(event.detail.xhr.status));
      elt.replaceChildren(p);
    }
  });
})();
