// Times are written in UTC on the pages; beside a window this adds it in the reader's own
// time zone (the browser's), e.g. "Your time: 3 Dec 2026, 13:00 to … (Europe/Berlin)": the
// zone by its name, as the order page's other local times (order.js) give it. Nothing is
// added when the reader's zone is UTC or the browser cannot format dates.
(function () {
  "use strict";
  if (!window.Intl || !Intl.DateTimeFormat) return;
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
  if (zone === "UTC" || zone === "Etc/UTC") return;
  var format = new Intl.DateTimeFormat(document.documentElement.lang || undefined, {
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "2-digit",
    minute: "2-digit",
  });

  function fill(root) {
    root.querySelectorAll(".local-window[hidden][data-local-start]").forEach(function (element) {
      var start = new Date(element.getAttribute("data-local-start"));
      var end = new Date(element.getAttribute("data-local-end"));
      if (isNaN(start.getTime()) || isNaN(end.getTime())) return;
      element.textContent = element
        .getAttribute("data-label")
        .replace("{start}", format.format(start))
        .replace("{end}", format.format(end)) + (zone ? " (" + zone + ")" : "");
      element.hidden = false;
    });
  }

  document.addEventListener("DOMContentLoaded", function () { fill(document); });
})();
