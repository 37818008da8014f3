"""``/healthz``: is the database reachable, is the broker? JSON, 200 or 503."""

from __future__ import annotations

from functools import lru_cache

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


@lru_cache(maxsize=4)
def _redis(url: str) -> Redis:
    """One client (and its connection pool) per broker URL, not one per request."""
    return Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)


def _broker() -> str:
    try:
        _redis(str(settings.CELERY_BROKER_URL)).ping()
    except (RedisError, OSError) as exc:
        return f"error: {type(exc).__name__}"
    return "ok"


def health(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database(), "broker": _broker()}
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "error", **checks}, status=200 if healthy else 503
    )
