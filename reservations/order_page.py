"""The order page, rendered once per exact state and second (issue 15).

Sixteen people (or browser tabs, or a lab's script) opening one order page at once made the
server render the same ~20 ms of templates sixteen times. The page is now kept in the cache
under a key that holds:

- the **state of every row the page reads** (:func:`state_of`): one statement lists each
  such row's id and ``xmin``, the id of the transaction that wrote its current version,
  which PostgreSQL changes on every INSERT and UPDATE, whoever makes it (a service, a
  queryset ``update()``, the scanner's bulk writes, the admin, raw SQL); a DELETE drops the
  row from the list. A payment seen, a status changed, a key added: a new key, at once;
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

``tests/reservations/test_order_page_cache.py`` checks that every table the page's
templates read is one :data:`SOURCES` lists, in every state of an order.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

from django.contrib.messages import get_messages
from django.core.cache import cache
from django.http import Http404, HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.template import Context
from django.template.loader import get_template
from django.utils import timezone
from django.utils.crypto import salted_hmac
from django.utils.translation import get_language
from redis.exceptions import RedisError

from config.context_processors import languages
from config.prepared import columns, execute_prepared, instance
from reservations.models import Order

PAGE_TEMPLATE = "reservations/order_detail.html"
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

_INVOICES = "SELECT id FROM payments_invoice WHERE order_id = {order}"
_LOTS = "SELECT lot_id FROM provisioning_provisioningjob WHERE order_id = {order}"

SOURCES: dict[str, str] = {
    # table: which of its rows the order page (and the API's order) may read
    "reservations_order": "id = {order}",
    "reservations_ordersshkey": "order_id = {order}",
    "reservations_checkpoint": "order_id = {order}",
    "reservations_earlyendrequest": "order_id = {order}",
    "reservations_hold": "order_id = {order}",
    "reservations_hardwarekind": "TRUE",
    "reservations_environment": "TRUE",
    "reservations_lot": "id IN (" + _LOTS + ")",
    "reservations_host": (
        "id IN (SELECT host_id FROM reservations_lot WHERE id IN ("  # noqa: S608
        + _LOTS
        + "))"
    ),
    "payments_invoice": "order_id = {order}",
    "payments_coinchoice": "order_id = {order}",
    "payments_transfer": "invoice_id IN (" + _INVOICES + ")",
    "payments_refund": "invoice_id IN (" + _INVOICES + ")",
    "payments_billingdetails": "order_id = {order}",
    "payments_receipt": "order_id = {order}",
    "payments_depositaddress": (
        "id IN (SELECT deposit_address_id FROM payments_invoice WHERE order_id = {order})"
    ),
    "payments_asset": "TRUE",
    "payments_chain": "TRUE",
    "provisioning_provisioningjob": "order_id = {order}",
    "provisioning_accessgrant": "order_id = {order}",
    "provisioning_splittest": "order_id = {order}",
}


def _state_sql(order: str) -> str:
    """The digest of the rows :data:`SOURCES` names, for the order whose id is ``order``
    (a parameter, or a column of an outer query). Built from the constants above only."""
    return "md5(concat_ws('/', {}))".format(
        ", ".join(
            # coalesce: an empty table keeps its place (concat_ws drops NULLs).
            "coalesce((SELECT string_agg(id::text || '.' || xmin::text, ',' ORDER BY id) "  # noqa: S608
            f"FROM {table} WHERE {rows.format(order=order)}), '')"
            for table, rows in SOURCES.items()
        )
    )


STATE_SQL = "SELECT " + _state_sql("%(order)s")
ORDER_SQL = (
    f"SELECT {_state_sql('o.id')}, {columns(Order, 'o')} "  # noqa: S608
    "FROM reservations_order o WHERE o.reference = %(reference)s"
)
OWNED_SQL = (
    f"SELECT o.id, {_state_sql('o.id')} FROM reservations_order o "  # noqa: S608
    "WHERE o.reference = %(reference)s AND o.user_id = %(user)s"
)


def state_of(order_id: int) -> str:
    """A digest of every row the order's page reads, as it is now (one statement).

    The content read after it is never older than it (each statement sees what is committed
    when it starts), so what is stored under it is never older than its key says."""
    # Prepared once per connection: planning its 21 subqueries took as long as running them.
    row = execute_prepared(STATE_SQL, {"order": order_id})
    assert row is not None
    return str(row[0])


def owned(reference: str, user_id: int) -> tuple[int, str] | None:
    """The id and state of ``user_id``'s order ``reference`` (None: no such order of
    theirs), in one prepared statement: the API's answer is kept under them."""
    row = execute_prepared(OWNED_SQL, {"reference": reference, "user": user_id})
    return None if row is None else (int(row[0]), str(row[1]))


def order_and_state_by_link(reference: str, secret: str) -> tuple[Order, str]:
    """The order this link opens and its state, in one prepared statement; or 404 (as
    reservations.views.order_by_link, for the views that need no state)."""
    row = execute_prepared(ORDER_SQL, {"reference": reference})
    if row is None:
        raise Http404
    # Its columns need no conversion (tests/reservations/test_order_page_cache.py checks
    # the instance against the ORM's, field by field).
    order = instance(Order, row[1:])
    if not order.opened_by(secret):
        raise Http404
    return order, str(row[0])


def _second() -> int:
    return int(time.time())


def _own_to_request(request: HttpRequest) -> bool:
    """Whether the page would carry something of this request's own."""
    from reservations.campaign_views import REFUSAL

    return bool(
        request.method != "GET"
        or request.GET
        or len(get_messages(request))
        or REFUSAL in request.session
    )


def page_key(request: HttpRequest, order: Order, state: str) -> str:
    from payments.services import offered_assets

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
