// One way for a page to refresh a part of itself in place: fetch the element's
// data-refresh-url (the same server-rendered fragment, never from a cache) and put it where
// the element was. Used by the payment panel (payment.js) and the order's status and access
// (order.js).
//
// With { morph: true } the fresh fragment is not swapped in: the element's own nodes are
// brought up to it (changed text and attributes only, new nodes inserted, gone ones
// removed), so that the control with the keyboard focus, a selection or a screen reader's
// place stays where it was, and a role="status" line is announced only when its words change.
// Attributes a script owns on an element (say a Copy button it revealed) are named in that
// element's data-js-attrs and left alone.
(function () {
  "use strict";
  function key(node) {
    if (node.nodeType !== 1) return "#" + node.nodeType;
    return [node.tagName, node.id, node.getAttribute("class") || "",
      node.getAttribute("data-testid") || ""].join("|");
  }
  function syncAttributes(old, fresh) {
    var owned = (old.getAttribute("data-js-attrs") || "").split(/\s+/);
    Array.prototype.slice.call(old.attributes).forEach(function (attribute) {
      if (owned.indexOf(attribute.name) === -1 && !fresh.hasAttribute(attribute.name)) {
        old.removeAttribute(attribute.name);
      }
    });
    Array.prototype.slice.call(fresh.attributes).forEach(function (attribute) {
      if (owned.indexOf(attribute.name) !== -1) return;
      if (old.getAttribute(attribute.name) !== attribute.value) {
        old.setAttribute(attribute.name, attribute.value);
      }
    });
  }
  function morph(old, fresh) {
    if (old.nodeType !== 1) {
      if (old.nodeValue !== fresh.nodeValue) old.nodeValue = fresh.nodeValue;
      return;
    }
    syncAttributes(old, fresh);
    var cursor = old.firstChild;
    Array.prototype.slice.call(fresh.childNodes).forEach(function (node) {
      var wanted = key(node);
      var match = null;
      if (cursor && key(cursor) === wanted) {
        match = cursor;
      } else if (node.nodeType === 1) {
        // Siblings that are gone from the fresh fragment are skipped (and dropped below).
        for (var look = cursor; look; look = look.nextSibling) {
          if (key(look) === wanted) { match = look; break; }
        }
      }
      if (!match) {
        old.insertBefore(node, cursor);
        return;
      }
      while (cursor !== match) {
        var gone = cursor;
        cursor = cursor.nextSibling;
        old.removeChild(gone);
      }
      morph(match, node);
      cursor = match.nextSibling;
    });
    while (cursor) {
      var rest = cursor;
      cursor = cursor.nextSibling;
      old.removeChild(rest);
    }
  }
  window.gpulotsMorph = morph;
  window.gpulotsRefresh = function (node, after, options) {
    var inPlace = options && options.morph;
    fetch(node.getAttribute("data-refresh-url"), {
      headers: { "X-Requested-With": "fetch" },
      cache: "no-store",
      credentials: "same-origin"
    })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) {
        if (html === null || !node.isConnected) return;
        var holder = document.createElement("div");
        holder.innerHTML = html;
        var fresh = holder.firstElementChild;
        if (!fresh) return;
        if (inPlace) {
          var before = node.cloneNode(false);
          morph(node, fresh);
          if (after) after(node, before);
          return;
        }
        node.replaceWith(fresh);
        if (after) after(fresh, node);
      })
      .catch(function () {});
  };
})();
