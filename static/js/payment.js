// The payment panel: copy buttons, and while a payment is awaited or on its way, a quiet
// refresh of the panel alone (the page never reloads); order.js asks for one more when the
// order's status changes. Without JavaScript, reloading the
// page shows the same.
(function () {
  "use strict";
  function bind(panel) {
    panel.querySelectorAll("button.copy").forEach(function (button) {
      button.addEventListener("click", function () {
        var text = document.getElementById(button.getAttribute("data-copy")).textContent.trim();
        if (navigator.clipboard) navigator.clipboard.writeText(text);
        button.setAttribute("data-copied", "true");
      });
    });
  }
  function refresh(force) {
    var panel = document.getElementById("payment-panel");
    if (!panel) return;
    var state = panel.getAttribute("data-state");
    var done = state === "none" || state.indexOf("settled") === 0 || state.indexOf("expired") === 0;
    if (done && force !== true) return;
    if (panel.contains(document.activeElement) && document.activeElement.tagName === "INPUT") return;
    window.gpulotsRefresh(panel, bind);
  }
  var first = document.getElementById("payment-panel");
  if (first) bind(first);
  window.setInterval(refresh, 4000);
  // The order's status moved on (order.js): the panel's words follow it.
  window.gpulotsRefreshPanel = function () { refresh(true); };
})();
