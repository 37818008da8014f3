// One way for a page to refresh a part of itself in place: fetch the element's
// data-refresh-url (the same server-rendered fragment) and put it where the element was.
// Used by the payment panel (payment.js) and the order's status and access (order.js).
window.gpulotsRefresh = function (node, after) {
  "use strict";
  fetch(node.getAttribute("data-refresh-url"), { headers: { "X-Requested-With": "fetch" } })
    .then(function (response) { return response.ok ? response.text() : null; })
    .then(function (html) {
      if (html === null || !node.isConnected) return;
      var holder = document.createElement("div");
      holder.innerHTML = html;
      var fresh = holder.firstElementChild;
      if (!fresh) return;
      node.replaceWith(fresh);
      if (after) after(fresh, node);
    })
    .catch(function () {});
};
