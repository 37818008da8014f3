"""/healthz reports the database and the broker."""

from __future__ import annotations

import pytest
from django.test import Client


@pytest.mark.django_db
def test_it_is_healthy_when_database_and_broker_answer(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "database": "ok", "broker": "ok"}


@pytest.mark.django_db
def test_it_says_which_part_is_down(client: Client, settings: object) -> None:
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"  # type: ignore[attr-defined]
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "error"
    assert body["database"] == "ok"
    assert body["broker"].startswith("error")


DATABASE_DOWN = """
import json
import django
from django.test import Client

django.setup()
client = Client(raise_request_exception=False)
found = {}
for path in ("/healthz", "/api/v1/kinds/", "/en/"):
    response = client.get(path)
    found[path] = {
        "status": response.status_code,
        "type": response["Content-Type"],
        "retry_after": response.get("Retry-After"),
        "body": response.content.decode(),
    }
print(json.dumps(found))
"""


def test_with_the_database_down_health_says_so_and_nothing_answers_a_500() -> None:
    """A real connection attempt to a closed port, in a process of its own."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from payments.devchain import free_port

    environ = {
        **os.environ,
        "DJANGO_DEBUG": "1",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_ALLOWED_HOSTS": "testserver",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:{free_port()}/gpulots",
    }
    result = subprocess.run(
        [sys.executable, "-c", DATABASE_DOWN],
        cwd=Path(__file__).resolve().parent.parent,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])

    health = found["/healthz"]
    assert (health["status"], health["type"]) == (503, "application/json")
    body = json.loads(health["body"])
    assert (body["status"], body["database"], body["down"]) == ("error", "down", ["database"])
    assert body["broker"] == "ok"

    api = found["/api/v1/kinds/"]  # the API: JSON with a code, never a 500 page
    assert (api["status"], api["type"]) == (503, "application/json")
    assert json.loads(api["body"])["code"] == "database_unavailable"
    assert int(api["retry_after"]) > 0

    page = found["/en/"]  # a page: a short 503 page, not a stack trace
    assert page["status"] == 503
    assert page["type"].startswith("text/html")
    assert "Temporarily unavailable" in page["body"]
    assert "Traceback" not in page["body"]
    assert int(page["retry_after"]) > 0


def test_only_an_unreachable_database_counts_as_down() -> None:
    """Fast: what counts as "the database is down" (the SQLSTATE says it)."""
    import psycopg
    from django.db import OperationalError

    from infra.outages import dependency_down

    def wrapped(cause: Exception) -> OperationalError:
        error = OperationalError(str(cause))
        error.__cause__ = cause
        return error

    refused = psycopg.OperationalError("connection refused")
    assert dependency_down(wrapped(refused)) == "database"
    deadlock = psycopg.errors.DeadlockDetected("deadlock detected")
    assert dependency_down(wrapped(deadlock)) is None
    assert dependency_down(ValueError("a bug")) is None
