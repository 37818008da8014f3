"""The order page, rendered once per exact state and second.

Sixteen people (or browser tabs, or a lab's script) opening one order page at once made the
server render the same ~20 ms of templates sixteen times. The page is now kept in the cache
under a key that holds:

- the **state of every row the page reads** (reservations.order_state): one statement lists
  each such row's id and ``xmin``, which PostgreSQL changes on every INSERT and UPDATE,
  whoever makes it; a DELETE drops the row from the list. A payment seen, a status
  changed, a key added: a new key, at once;
- the language, the signed-in user (the site's menu) and the coins on offer (they follow
  price feeds kept in Redis).

What the page derives from the clock (the countdown, "access opens in …", whether keys may
still change) is why a stored page is served only in the **second** it was rendered in.
The first request of the next second renders it anew; while it does, the others get the
previous second's (one renderer per page and second: sixteen at once render it once).

So a reused page is never older in its status or payment state than a fresh one, and at
most two seconds older in its countdown (the second is each web host's clock: hosts that
share one Redis keep their clocks in step, as NTP does). What is personal to a request is
not in the stored page: the CSRF token goes in per request (a placeholder is stored), and
a page carrying anything of the request's own (a flash message, a refused form with its
errors, a "done" notice, a campaign refusal) is rendered anew and never stored.

"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from django.contrib.messages import get_messages
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.template import Context
from django.template.loader import get_template
from django.utils import timezone
from django.utils.crypto import salted_hmac
from django.utils.translation import get_language
from redis.exceptions import RedisError

from infra.context_processors import languages
from pages.campaign import REFUSAL
from payments.invoicing import offered_assets
from reservations.models import Order
from reservations.order_state import order_and_state_by_link, state_of

PAGE_TEMPLATE = "pages/order_detail.html"
STALE_SECONDS = 1
"""How much older than this second a body may be served while it is rendered anew."""
WAIT_SECONDS = 0.25
"""How long a request waits for the page another request is rendering (~20 ms usually)."""
KEEP_SECONDS = 10
"""How long a stored body is kept (it is served within ``STALE_SECONDS`` at most)."""

CSRF_PLACEHOLDER = "csrf-" + salted_hmac("order-page", "csrf placeholder").hexdigest()
"""Stands in the stored page where each request's own CSRF token goes: derived from the
secret key (the same in every process, never shown), so no text a researcher writes into
the page can contain it and be replaced by the next viewer's token."""


def _second() -> int:
    return int(time.time())


def _own_to_request(request: HttpRequest) -> bool:
    """Whether the page would carry something of this request's own."""
    return bool(
        request.method != "GET"
        or request.GET
        or len(get_messages(request))
        or REFUSAL in request.session
    )


def page_key(request: HttpRequest, order: Order, state: str) -> str:
    offered = ",".join(str(asset.pk) for asset in offered_assets())
    user = request.user.pk if request.user.is_authenticated else 0  # the frame's menu
    raw = f"{order.pk}|{state}|{get_language()}|{user}|{offered}"
    return "orderpage:v3:" + hashlib.sha256(raw.encode()).hexdigest()


def _kept(key: str, now: int) -> str | None:
    """The page stored under ``key`` if it was rendered this second; else None, and this
    request renders it — unless another request of this second already does (one renderer
    per key and second): then the previous second's page, or, with none that recent, the
    one the other request renders, waited for (sixteen at once render a page once)."""
    kept = cache.get(key)
    if kept is not None and kept[0] == now:
        return str(kept[1])
    try:
        mine = cache.add(f"{key}:{now}", 1, STALE_SECONDS + 1)
    except (RedisError, OSError):  # Redis down: render, as without the cache
        return None
    if mine:
        return None
    if kept is not None and now - kept[0] <= STALE_SECONDS:
        return str(kept[1])
    return _rendered_elsewhere(key, now)


def _rendered_elsewhere(key: str, now: int) -> str | None:
    """The page another request is rendering for this second, once stored; None if it
    takes longer than ``WAIT_SECONDS`` (this request then renders it too)."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.005)
        kept = cache.get(key)
        if kept is not None and kept[0] >= now:
            return str(kept[1])
    return None


def render_page(request: HttpRequest, order: Order, extra: dict[str, Any]) -> str:
    """The whole page for ``order``, with the CSRF placeholder where the token goes.

    A plain Context with what the templates use from the context processors: Django puts
    their output above a view's own, so the CSRF token could not be replaced there."""
    context = {
        "order": order,
        "ssh_keys": order.ssh_keys.all(),  # read only when the summary is rendered anew
        "now": timezone.now(),
        "request": request,
        "user": request.user,
        "messages": get_messages(request),
        "csrf_token": CSRF_PLACEHOLDER,
        "LANGUAGE_CODE": get_language(),
        **languages(request),
        **extra,
    }
    return str(get_template(PAGE_TEMPLATE).template.render(Context(context)))  # type: ignore[attr-defined]


def for_link(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """The order page for whoever holds its link."""
    order, state = order_and_state_by_link(reference, secret)
    return order_page(request, order, state=state)


def order_page(
    request: HttpRequest,
    order: Order,
    *,
    state: str = "",
    status: int = 200,
    fresh: bool = False,
    **extra: Any,
) -> HttpResponse:
    """The order page: from the cache where the same state was rendered in this second
    (or the last, see :func:`_kept`), else rendered and stored, unless it carries something
    of the request's own: ``fresh``, ``extra`` context such as a refused form, or what
    :func:`_own_to_request` finds."""
    cacheable = not (fresh or extra or _own_to_request(request))
    key = page_key(request, order, state or state_of(order.pk)) if cacheable else None
    now = _second()
    page = _kept(key, now) if key else None
    if page is None:
        page = render_page(request, order, extra)
        if key:
            cache.set(key, (now, page), KEEP_SECONDS)
    return HttpResponse(page.replace(CSRF_PLACEHOLDER, get_token(request)), status=status)
