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
