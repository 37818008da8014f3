"""The state of everything an order's page and its API answer show: one digest of the rows.

One statement lists the id and ``xmin`` of each row the order page and the API's order read
(:data:`SOURCES`): the id of the transaction that wrote the row's current version, which
PostgreSQL changes on every INSERT and UPDATE, whoever makes it (a service, a queryset
``update()``, the scanner's bulk writes, the admin, raw SQL); a DELETE drops the row from
the list. A payment seen, a status changed, a key added: a new digest, at once. The order
page (pages.order_page) and the API's order (api.views) are kept in the cache under it.

The rows are the order's own in every app (payments' invoices, provisioning's jobs…): they
are named here by table, in SQL, without importing those apps, which sit above this one;
``tests/reservations/test_order_page_cache.py`` checks that every table the page's
templates read is one :data:`SOURCES` lists, in every state of an order.
"""

from __future__ import annotations

from django.http import Http404

from infra.prepared import columns, execute_prepared, instance
from reservations.models import Order

_INVOICES = "SELECT id FROM payments_invoice WHERE order_id = {order}"
_LOTS = "SELECT lot_id FROM provisioning_provisioningjob WHERE order_id = {order}"

SOURCES: dict[str, str] = {
    # table: which of its rows the order page (and the API's order) may read
    # The order, its extensions (listed on its page) and, for an extension, its order.
    "reservations_order": (
        "id = {order} OR extends_id = {order} OR id = "
        "(SELECT extends_id FROM reservations_order WHERE id = {order})"
    ),
    "reservations_ordersshkey": "order_id = {order}",
    "reservations_checkpoint": "order_id = {order}",
    "reservations_earlyendrequest": "order_id = {order}",
    "reservations_hold": "order_id = {order}",
    "reservations_incident": "order_id = {order}",
    "reservations_credit": "order_id = {order}",
    "reservations_hardwarekind": "TRUE",
    "reservations_environment": "TRUE",
    # The prices of the order's kind: what an extension would cost today.
    "reservations_price": "kind_id = (SELECT kind_id FROM reservations_order WHERE id = {order})",
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
    # Prepared once per connection: planning its 23 subqueries took as long as running them.
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
    reservations.links.order_by_link, for the views that need no state)."""
    row = execute_prepared(ORDER_SQL, {"reference": reference})
    if row is None:
        raise Http404
    # Its columns need no conversion (tests/reservations/test_order_page_cache.py checks
    # the instance against the ORM's, field by field).
    order = instance(Order, row[1:])
    if not order.opened_by(secret):
        raise Http404
    return order, str(row[0])
