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
})();
