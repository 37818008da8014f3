"""``/healthz``: is the database reachable, is the broker? JSON, 200 or 503."""

from __future__ import annotations

from django.conf import settings
from django.db import connection
from django.http import HttpRequest, JsonResponse
from redis import Redis
from redis.exceptions import RedisError


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any failure means "not ok"; its name is the report
        return f"error: {type(exc).__name__}"
    return "ok"


def _broker() -> str:
    try:
        Redis.from_url(str(settings.CELERY_BROKER_URL), socket_timeout=1).ping()
    except (RedisError, OSError) as exc:
        return f"error: {type(exc).__name__}"
    return "ok"


def health(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database(), "broker": _broker()}
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "error", **checks}, status=200 if healthy else 503
    )
