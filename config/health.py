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


def _chains() -> dict[str, str]:
    """Each active payment chain's node: reachable and serving the configured chain id."""
    from payments.models import Chain
    from payments.rpc import RpcClient, RpcError, RpcUnavailable

    found: dict[str, str] = {}
    for chain in Chain.objects.filter(is_active=True):
        try:
            served = RpcClient(chain.rpc_url, timeout=2).chain_id()
        except (RpcUnavailable, RpcError) as exc:
            found[f"chain {chain.chain_id}"] = f"error: {type(exc).__name__}"
            continue
        ok = served == chain.chain_id
        found[f"chain {chain.chain_id}"] = "ok" if ok else f"error: serves chain {served}"
    return found


def health(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database(), "broker": _broker(), **_chains()}
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "error", **checks}, status=200 if healthy else 503
    )
