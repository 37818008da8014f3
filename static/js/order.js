// The order page's status and access part: refreshed in place until the order is active
// (the payment settling, the approval, the window's start), and each time shown in the
// reader's own time zone next to UTC. Without JavaScript, reloading the page shows the same.
(function () {
  "use strict";
  var SETTLED = ["active", "completed", "expired", "cancelled"];
  var lang = document.documentElement.lang || undefined;
  function localTimes(root) {
    var note = root.querySelector(".local-time");
    var times = root.querySelectorAll("time[data-local]");
    if (!note || !times.length || !window.Intl) return;
    var format = new Intl.DateTimeFormat(lang, { dateStyle: "full", timeStyle: "short" });
    var parts = [];
    times.forEach(function (time) {
      var when = new Date(time.getAttribute("datetime"));
      if (!isNaN(when)) parts.push(format.format(when));
    });
    var zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    note.textContent = "(" + note.getAttribute("data-label") + " " + parts.join(", ") +
      (zone ? " " + zone : "") + ")";
    note.hidden = false;
  }
  function refresh() {
    var live = document.getElementById("order-live");
    if (!live || SETTLED.indexOf(live.getAttribute("data-state")) !== -1) return;
    window.gpulotsRefresh(live, function (fresh, old) {
      localTimes(fresh);
      // A change the payment panel does not show (paid, approved): bring it up to date.
      var changed = fresh.getAttribute("data-state") !== old.getAttribute("data-state");
      if (changed && window.gpulotsRefreshPanel) window.gpulotsRefreshPanel();
    });
  }
  var first = document.getElementById("order-live");
  if (first) localTimes(first);
  window.setInterval(refresh, 4000);
})();
