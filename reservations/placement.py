"""Placing an order in one SQL statement: the hot path of a booking rush.

One INSERT with data-modifying CTEs reads the kind, environment and price from the
catalogue, picks the free lots, inserts the order only if the catalogue accepts the
request and enough lots are free, then its holds, SSH keys and first audit event. One
round trip instead of eight, the price read atomically with the insert, and the shortest
possible window in which two bookings can meet.

Rows are built from model instances through their fields' own ``get_db_prep_save`` (as
Django's INSERT compiler does), so the column lists follow the models. The catalogue and
free-lot rules are written here in SQL; tests check that they agree with
``validation.catalogue_refusals`` and ``availability.free_lots``.

Overlap is still refused by the exclusion constraint on holds: when a concurrent booking
takes a lot between the scan and the insert, the whole statement fails and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import Any

from django.db import connection
from django.db.models import Field, Model

from infra.prepared import execute_prepared
from reservations.models import Hold, Lot, Order, OrderEvent, OrderSshKey

CATALOGUE_SQL = """
    SELECT kind.id AS kind_id, env.id AS environment_id, price.amount_usd
      FROM reservations_hardwarekind AS kind
      JOIN reservations_price AS price ON price.kind_id = kind.id AND price.window_days = %s
      JOIN reservations_environment_compatible_kinds AS compat ON compat.hardwarekind_id = kind.id
      JOIN reservations_environment AS env ON env.id = compat.environment_id
     WHERE kind.slug = %s AND kind.is_offered AND env.slug = %s AND env.is_offered
"""
"""An offered kind with a price for the window and an offered environment that runs on it."""

FREE_LOTS_SQL = """
    SELECT lot.id FROM reservations_lot AS lot
      JOIN reservations_host AS host ON host.id = lot.host_id
     WHERE host.kind_id = (SELECT kind_id FROM catalogue) AND lot.status = %s
       AND lot.id NOT IN (
           SELECT hold.lot_id FROM reservations_hold AS hold
            WHERE hold.status = ANY(%s) AND hold.period && %s)
     ORDER BY lot.id
     LIMIT %s
     {locking}
"""
"""The rule of ``availability.free_lots``: active lots of the kind, no counting hold
overlapping the blocked period, lowest id first. ``NOT IN`` makes PostgreSQL scan the
holds' GiST index once (a hashed subplan), whatever its statistics say. With
``SKIP_LOCKED``, lots another placement is taking this instant are passed over, so a rush
of bookings spreads over the free lots instead of queueing for the first one.

The lots are always locked, in id order (the sort runs below the row locks), before their
holds are inserted. So two placements never insert holds on one lot at the same time:
without the lock, each would wait in the exclusion check for the other's uncommitted hold
and PostgreSQL would abort one as a deadlock. With it, the second waits for the lot's row
and then meets the first's committed hold as a plain exclusion violation."""
SKIP_LOCKED = "FOR UPDATE OF lot SKIP LOCKED"
WAIT_LOCKED = "FOR UPDATE OF lot"

NEW_ORDER = "(SELECT id FROM new_order)"
ONLY_WITH_ORDER = "WHERE EXISTS (SELECT 1 FROM new_order)"


@dataclass(frozen=True)
class Placed:
    id: int
    kind_id: int
    environment_id: int
    unit_price_usd: Decimal
    total_usd: Decimal


@cache
def _fields(model: type[Model]) -> tuple[tuple[Field[Any, Any], str], ...]:
    """Each concrete field but the primary key, with its quoted column name."""
    quote = connection.ops.quote_name
    return tuple(
        (field, quote(field.column))
        for field in model._meta.concrete_fields
        if not field.primary_key
    )


def _row(instance: Model, computed: dict[str, str]) -> tuple[str, str, list[Any]]:
    """Column list, SQL expressions and parameters to insert ``instance``.

    ``computed`` gives an SQL expression for columns whose value comes from the statement
    itself (the new order's id, a free lot's id, the catalogue's price).
    """
    columns: list[str] = []
    expressions: list[str] = []
    params: list[Any] = []
    for field, column in _fields(type(instance)):
        columns.append(column)
        if field.attname in computed:
            expressions.append(computed[field.attname])
            continue
        value = field.get_db_prep_save(getattr(instance, field.attname), connection)
        if value is None:
            # A bare NULL in a SELECT list would be typed text; say what it is.
            expressions.append(f"NULL::{field.db_type(connection)}")
        else:
            expressions.append("%s")
            params.append(value)
    return ", ".join(columns), ", ".join(expressions), params


def insert_order(
    order: Order,
    hold: Hold,
    keys: list[OrderSshKey],
    event: OrderEvent,
    *,
    kind: str,
    environment: str,
    skip_locked: bool = True,
) -> Placed | None:
    """Insert ``order`` (its kind, environment and prices taken from the catalogue by slug)
    with ``order.lot_count`` holds like ``hold``, one per free lot, and ``keys`` and
    ``event``. None when the catalogue refused or too few lots were free: then nothing
    was written. Raises IntegrityError when a concurrent booking won a lot (nothing
    written either)."""
    locking = SKIP_LOCKED if skip_locked else WAIT_LOCKED
    ctes: list[tuple[str, list[Any]]] = [
        (f"catalogue AS ({CATALOGUE_SQL})", [order.window_days, kind, environment]),
        (
            f"free AS ({FREE_LOTS_SQL.format(locking=locking)})",
            [str(Lot.Status.ACTIVE), [str(s) for s in Hold.COUNTING], hold.period, order.lot_count],
        ),
    ]
    columns, exprs, params = _row(
        order,
        {
            "kind_id": "catalogue.kind_id",
            "environment_id": "catalogue.environment_id",
            "unit_price_usd": "catalogue.amount_usd",
            "total_usd": "catalogue.amount_usd * (SELECT count(*) FROM free)",
        },
    )
    ctes.append(
        (
            f"new_order AS (INSERT INTO {Order._meta.db_table} ({columns}) "
            f"SELECT {exprs} FROM catalogue WHERE (SELECT count(*) FROM free) = %s "
            "RETURNING id, kind_id, environment_id, unit_price_usd, total_usd)",
            [*params, order.lot_count],
        )
    )
    columns, exprs, params = _row(hold, {"order_id": NEW_ORDER, "lot_id": "free.id"})
    ctes.append(
        (
            f"holds AS (INSERT INTO {Hold._meta.db_table} ({columns}) "
            f"SELECT {exprs} FROM free {ONLY_WITH_ORDER})",
            params,
        )
    )
    if keys:
        rows = [_row(key, {"order_id": NEW_ORDER}) for key in keys]
        values = ", ".join(f"({exprs})" for _columns, exprs, _params in rows)
        ctes.append(
            (
                f"keys AS (INSERT INTO {OrderSshKey._meta.db_table} ({rows[0][0]}) "
                f"SELECT * FROM (VALUES {values}) AS k {ONLY_WITH_ORDER})",
                [param for _columns, _exprs, params in rows for param in params],
            )
        )
    columns, exprs, params = _row(event, {"order_id": NEW_ORDER})
    ctes.append(
        (
            f"event AS (INSERT INTO {OrderEvent._meta.db_table} ({columns}) "
            f"SELECT {exprs} FROM new_order)",
            params,
        )
    )
    sql = "WITH " + ",\n".join(cte for cte, _params in ctes) + "\nSELECT * FROM new_order"
    row = execute_prepared(sql, [param for _cte, cte_params in ctes for param in cte_params])
    return None if row is None else Placed(*row)
