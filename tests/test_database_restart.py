"""A database restart (or a failover) costs no request once the database answers again:
every path that reads it — the server-side prepared statements of the API's token check and
the order page included — finds a connection the restart killed, drops it and connects
anew, as Django's CONN_HEALTH_CHECKS does for the ORM."""

from __future__ import annotations

import psycopg
import pytest
from django.db import close_old_connections, connection
from django.test import Client

from accounts.models import User


def kill_this_connection() -> None:
    """What a PostgreSQL restart does to a pooled connection: its backend ends."""
    pid = connection.connection.info.backend_pid
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"] or "127.0.0.1",
        port=settings["PORT"] or 5432,
        user=settings["USER"] or "postgres",
        dbname=settings["NAME"],
        autocommit=True,
    ) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone() == (True,)


@pytest.mark.django_db(transaction=True)
def test_the_apis_token_check_survives_a_killed_connection(
    client: Client, ada: tuple[User, str], settings: object
) -> None:
    settings.DATABASES["default"]["CONN_MAX_AGE"] = 60  # type: ignore[attr-defined]
    connection.settings_dict["CONN_MAX_AGE"] = 60
    _user, token = ada
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}

    def request() -> int:
        # What the server does at each request's start (Django's test client leaves it out):
        # a connection past its age is closed, and the next use checks its health.
        close_old_connections()
        return client.get("/api/v1/orders/", **auth).status_code  # type: ignore[arg-type]

    for _restart in range(3):
        assert request() == 200
        assert connection.connection is not None  # kept between requests, as in production
        kill_this_connection()
        assert request() == 200  # the first request after the restart, not a 503
