"""Statements prepared on the server, for the hottest reads and writes (issue 15).

Django binds parameters on the client and never prepares, so each statement is planned
anew; for the order-placing INSERT (reservations.placement), the order page's state
(reservations.order_page) and the API's token (api.authentication) planning cost as much
as running. These take a psycopg cursor on Django's own connection (same session, same
transaction), prepared once per connection (psycopg keeps them, keyed by their text).

They go through Django's execute wrappers and query log as its own statements do, so
``django_assert_num_queries`` counts them.
"""

from __future__ import annotations

import functools
import time
from typing import Any, TypeVar

import psycopg
from django.db import connection
from django.db.models import Model

M = TypeVar("M", bound=Model)


def execute_prepared(sql: str, params: Any) -> tuple[Any, ...] | None:
    """Run ``sql`` as a server-side prepared statement on Django's connection; its first
    row (or None), with errors translated as Django translates them. Like Django's own, it
    goes through the connection's execute wrappers and, while queries are logged (DEBUG,
    ``django_assert_num_queries``), into its query log."""
    connection.validate_no_broken_transaction()
    # As Django's own cursor() does: a connection a database restart killed is dropped
    # here (CONN_HEALTH_CHECKS, once per request) and a new one made, not used and failed.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    started = time.monotonic()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:

        def run(sql: str, params: Any, many: bool, context: dict[str, Any]) -> None:
            cursor.execute(sql, params, prepare=True)

        executor: Any = run
        for wrapper in reversed(connection.execute_wrappers):
            executor = functools.partial(wrapper, executor)
        executor(sql, params, False, {"connection": connection, "cursor": cursor})
        row = cursor.fetchone()
    if connection.queries_logged:
        seconds = time.monotonic() - started
        connection.queries_log.append({"sql": f"/* prepared */ {sql}", "time": f"{seconds:.3f}"})
    return row


def columns(model: type[Model], alias: str) -> str:
    """The model's concrete columns as ``alias."column"``, in its fields' order."""
    return ", ".join(f'{alias}."{field.column}"' for field in model._meta.concrete_fields)


def instance(model: type[M], values: tuple[Any, ...] | list[Any]) -> M:
    """A model instance from its concrete columns' values as PostgreSQL gave them (read
    with :func:`columns`). Only for models whose fields need no conversion from the
    database (no JSONField and the like): the tests compare such instances with the ORM's."""
    fields = model._meta.concrete_fields
    assert len(values) == len(fields)
    return model.from_db(connection.alias, [field.attname for field in fields], list(values))
