// Step 1's live quote: as the form changes, ask the server for price, availability and the
// advisor's answer, and swap them in. Without JavaScript the page still works: its
// "Update price and availability" button posts the form and the page comes back with them.
(function () {
  "use strict";
  var form = document.getElementById("plan-form");
  if (!form || !window.fetch) return;
  document.documentElement.classList.add("js");
  var target = document.getElementById("quote");
  var url = form.getAttribute("data-quote-url");
  var timer = null;
  var latest = 0;

  function refresh() {
    var data = new FormData(form);
    data.delete("csrfmiddlewaretoken");
    var query = new URLSearchParams(data).toString();
    var ticket = ++latest;
    fetch(url + "?" + query, { headers: { "X-Requested-With": "fetch" } })
      // 400: this start or lot count cannot be booked; the fragment says why.
      .then(function (response) {
        return response.ok || response.status === 400 ? response.text() : null;
      })
      .then(function (html) {
        if (html !== null && ticket === latest) target.innerHTML = html;
      })
      .catch(function () { /* the last quote stays; the form still submits */ });
  }

  function soon() {
    window.clearTimeout(timer);
    timer = window.setTimeout(refresh, 150);
  }

  form.addEventListener("input", soon);
  form.addEventListener("change", soon);

  // Only the environments that run on the chosen kind (each option's data-kinds says which).
  function filterEnvironments() {
    var checked = form.querySelector('input[name="kind"]:checked');
    var select = form.elements.environment;
    if (!checked || !select) return;
    var first = null;
    Array.prototype.forEach.call(select.options, function (option) {
      var kinds = (option.getAttribute("data-kinds") || "").split(" ");
      var runs = !option.value || kinds.indexOf(checked.value) !== -1;
      option.disabled = !runs;
      option.hidden = !runs;
      if (runs && option.value && first === null) first = option;
    });
    var current = select.options[select.selectedIndex];
    if ((!current || current.disabled) && first !== null) first.selected = true;
  }
  form.addEventListener("change", function (event) {
    if (event.target.name === "kind") filterEnvironments();
  });
  filterEnvironments();

  // The quote's buttons: with JavaScript they change the form in place (without, they post).
  target.addEventListener("click", function (event) {
    var button = event.target.closest("[data-use-start], [data-switch-kind]");
    if (!button) return;
    event.preventDefault();
    var day = button.getAttribute("data-use-start");
    var kind = button.getAttribute("data-switch-kind");
    var field = null;
    if (day) {
      field = form.elements.start_date;
      field.value = day;
    } else {
      field = form.querySelector('input[name="kind"][value="' + CSS.escape(kind) + '"]');
      if (field) field.checked = true;
    }
    if (!field) return;
    field.focus();
    field.dispatchEvent(new Event("change", { bubbles: true }));
  });
})();
