// Times are written in UTC on the pages; beside a window this adds it in the reader's own
// time zone (the browser's), e.g. "Your time: 3 Dec 2026, 13:00 CET to …". Nothing is added
// when the reader's zone is UTC or the browser cannot format dates.
(function () {
  "use strict";
  if (!window.Intl || !Intl.DateTimeFormat) return;
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
  if (zone === "UTC" || zone === "Etc/UTC") return;
  // dateStyle/timeStyle cannot be combined with timeZoneName: the parts are named instead.
  var format = new Intl.DateTimeFormat(document.documentElement.lang || undefined, {
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "numeric",
    minute: "2-digit",
    timeZoneName: "short",
  });

  function fill(root) {
    root.querySelectorAll(".local-window[hidden][data-local-start]").forEach(function (element) {
      var start = new Date(element.getAttribute("data-local-start"));
      var end = new Date(element.getAttribute("data-local-end"));
      if (isNaN(start.getTime()) || isNaN(end.getTime())) return;
      element.textContent = element
        .getAttribute("data-label")
        .replace("{start}", format.format(start))
        .replace("{end}", format.format(end));
      element.hidden = false;
    });
  }

  document.addEventListener("DOMContentLoaded", function () { fill(document); });
})();
