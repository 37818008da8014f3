// The payment panel: Copy buttons, the time left ticking, and while a payment is awaited or
// on its way, a quiet refresh of the panel alone, in place (fragment.js morphs it: the
// focused control keeps the focus, the status line is announced when its words change).
// order.js asks for one more when the order's status changes.
//
// Without JavaScript the page is complete on its own: the amount and the address are plain
// selectable text, the Copy buttons stay hidden (this script reveals them), the time left is
// the server's as of the page's loading next to the deadline itself, and reloading the page
// shows what is new.
(function () {
  "use strict";
  var lang = document.documentElement.lang || undefined;
  var LAST_MINUTES = 600; // under ten minutes left, the seconds are shown too
  var started = new WeakMap();
  var expiredOnce = false;

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    // Plain http on a network address: the old way, through a selection.
    var field = document.createElement("textarea");
    field.value = text;
    field.setAttribute("readonly", "");
    field.className = "visually-hidden";
    document.body.appendChild(field);
    field.select();
    try { document.execCommand("copy"); } finally { field.remove(); }
    return Promise.resolve();
  }

  var copied = new WeakMap();

  function reveal(panel) {
    panel.querySelectorAll("button.copy").forEach(function (button) {
      button.hidden = false;
      // A tick says what was copied: once the value changed (less is due), it is gone.
      var source = document.getElementById(button.getAttribute("data-copy"));
      if (button.hasAttribute("data-copied") &&
          (!source || copied.get(button) !== source.textContent.trim())) {
        button.removeAttribute("data-copied");
      }
    });
  }

  function unit(value, name) {
    try {
      return new Intl.NumberFormat(lang, { style: "unit", unit: name, unitDisplay: "long" })
        .format(value);
    } catch (error) {
      return value + " " + name + (value === 1 ? "" : "s");
    }
  }

  // Like Django's timeuntil (the server's words): the two largest units that count; in the
  // last minutes, minutes and seconds.
  function words(seconds) {
    var days = Math.floor(seconds / 86400);
    var hours = Math.floor((seconds % 86400) / 3600);
    var minutes = Math.floor((seconds % 3600) / 60);
    var rest = seconds % 60;
    if (seconds < LAST_MINUTES) {
      return minutes ? unit(minutes, "minute") + (rest ? ", " + unit(rest, "second") : "")
        : unit(rest, "second");
    }
    if (days) return unit(days, "day") + (hours ? ", " + unit(hours, "hour") : "");
    if (hours) return unit(hours, "hour") + (minutes ? ", " + unit(minutes, "minute") : "");
    return unit(minutes, "minute");
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time[data-countdown]").forEach(function (time) {
      // Counted from the server's own figure (seconds left when it rendered), not from the
      // deadline against this device's clock, which may be off.
      var given = time.getAttribute("data-seconds-left");
      var start = started.get(time);
      if (!start || start.given !== given) {
        start = { given: given, at: now };
        started.set(time, start);
      }
      var left = Math.max(0, parseInt(given, 10) - Math.floor((now - start.at) / 1000));
      var text = left > 0 ? words(left) : time.getAttribute("data-expired");
      if (time.textContent !== text) time.textContent = text;
      if (left === 0 && !expiredOnce) {
        expiredOnce = true;
        refresh(true); // the server says what the deadline did
      }
    });
  }

  function refresh(force) {
    var panel = document.getElementById("payment-panel");
    if (!panel) return;
    var state = panel.getAttribute("data-state");
    var done = state === "none" || state.indexOf("settled") === 0 || state.indexOf("expired") === 0;
    if (done && force !== true) return;
    // Typing a transaction hash: the field is left alone until it loses the focus.
    if (panel.contains(document.activeElement) && document.activeElement.tagName === "INPUT") return;
    window.gpulotsRefresh(panel, function (fresh) {
      reveal(fresh);
      tick();
    }, { morph: true });
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("#payment-panel button.copy");
    if (!button) return;
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) return;
    var text = source.textContent.trim();
    copyText(text).then(function () {
      copied.set(button, text);
      button.setAttribute("data-copied", "true");
      var status = document.querySelector("#payment-panel [data-copy-status]");
      if (status) {
        status.textContent = "";
        // A fresh text node, so that the same words are announced again.
        window.setTimeout(function () { status.textContent = status.getAttribute("data-copied-text"); }, 50);
      }
    }).catch(function () {});
  });

  var first = document.getElementById("payment-panel");
  if (first) reveal(first);
  tick();
  window.setInterval(tick, 1000);
  window.setInterval(refresh, 4000);
  // The order's status moved on (order.js): the panel's words follow it.
  window.gpulotsRefreshPanel = function () { refresh(true); };
})();
