// A language switch in the middle of a booking step keeps what was typed: the entries are
// kept in this tab's sessionStorage when a language link is followed, and put back into the
// same step's form in the new language (then forgotten). Without JavaScript the link simply
// opens the step in the other language.
(function () {
  "use strict";
  var form = document.querySelector("form.booking");
  if (!form || !window.sessionStorage || !window.CSS) return;
  var key = "gpulots:entries:" + (form.id || form.className);

  var saved = null;
  try {
    saved = JSON.parse(window.sessionStorage.getItem(key) || "null");
  } catch (error) {
    saved = null;
  }
  if (saved) {
    window.sessionStorage.removeItem(key);
    Object.keys(saved).forEach(function (name) {
      var values = saved[name];
      form.querySelectorAll('[name="' + CSS.escape(name) + '"]').forEach(function (field) {
        if (field.type === "radio" || field.type === "checkbox") {
          field.checked = values.indexOf(field.value) !== -1;
          if (field.checked) field.dispatchEvent(new Event("change", { bubbles: true }));
        } else if (field.type !== "hidden" && field.type !== "submit") {
          field.value = values[0];
          field.dispatchEvent(new Event("change", { bubbles: true }));
        }
      });
    });
  }

  document.querySelectorAll("nav.languages a").forEach(function (link) {
    link.addEventListener("click", function () {
      var entries = {};
      new FormData(form).forEach(function (value, name) {
        if (name === "csrfmiddlewaretoken" || typeof value !== "string") return;
        (entries[name] = entries[name] || []).push(value);
      });
      window.sessionStorage.setItem(key, JSON.stringify(entries));
    });
  });
})();
