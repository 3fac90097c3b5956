// Choosing a preset fills in its kind, address, API path and health check, and its
// example models when none are typed yet (the server fills what is left empty too).
(function () {
  var data = JSON.parse(document.getElementById("preset-data").textContent);
  var form = document.getElementById("node-form");
  var select = form.elements["preset"];
  var quirks = document.getElementById("preset-quirks");
  select.addEventListener("change", function () {
    var preset = data[select.value];
    if (!preset) { quirks.hidden = true; return; }
    ["kind", "base_url", "api_path", "health_check", "models"].forEach(function (name) {
      var field = form.elements[name];
      if (!field || preset[name] === undefined) { return; }
      if (name !== "models" || !field.value.trim()) { field.value = preset[name]; }
    });
    // The separator comes from the page, in its language ("：" in Chinese).
    var separator = quirks.dataset.separator || ": ";
    quirks.textContent = select.options[select.selectedIndex].text + separator + preset.quirks;
    quirks.hidden = false;
  });
})();
