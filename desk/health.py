"""``/healthz``: is the database reachable, is the broker, are the chain nodes? JSON, 200
or 503; a 503 names what is down (``"database": "down"``, and ``"down": [...]`` lists every
failing check), whatever failed — this view never answers a 500.

It is public (load balancers and monitors ask it without credentials), so nothing a
stranger can make it do costs more than a look-up: the chain nodes, which are slow and may
be a metered provider, are asked at most once per HEALTH_CHAIN_CHECK_SECONDS across all
web processes (the answer is kept in the cache, one process at a time refreshes it).
"""

from __future__ import annotations

import hashlib
import json
import time
from functools import lru_cache

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, InterfaceError, connection
from django.http import HttpRequest, JsonResponse
from redis import Redis
from redis.exceptions import RedisError

from infra.outages import dependency_down
from payments.models import Chain
from payments.rpc import RpcClient, RpcError, RpcUnavailable


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # any failure means "not ok"; its name is the report
        return "down" if dependency_down(exc) == "database" else f"error: {type(exc).__name__}"
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


def _active_chains() -> list[tuple[int, int, list[str]]]:
    """The active payment chains as configured: (chain id, quorum, node URLs: the chain's
    ``rpc_url`` and its active extra endpoints)."""
    rows = Chain.objects.filter(is_active=True).order_by("chain_id").prefetch_related("endpoints")
    return [
        (
            chain.chain_id,
            chain.quorum,
            [chain.rpc_url, *(e.url for e in chain.endpoints.all() if e.is_active)],
        )
        for chain in rows
    ]


def _chains(chains: list[tuple[int, int, list[str]]]) -> dict[str, str]:
    """Each chain: "ok" when its endpoints are reachable and serve the configured chain id;
    with some of them down, how many answer ("ok" while at least the quorum does)."""
    found: dict[str, str] = {}
    for chain_id, quorum, urls in chains:
        problems = []
        for url in urls:
            try:
                served = RpcClient(url, timeout=2).chain_id()
            except (RpcUnavailable, RpcError) as exc:
                problems.append(f"error: {type(exc).__name__}")
                continue
            if served != chain_id:
                problems.append(f"error: serves chain {served}")
        answering = len(urls) - len(problems)
        if not problems:
            found[f"chain {chain_id}"] = "ok"
        elif len(urls) == 1:
            found[f"chain {chain_id}"] = problems[0]
        else:
            state = "ok" if answering >= max(1, quorum) else "error"
            found[f"chain {chain_id}"] = f"{state}: {answering} of {len(urls)} endpoints answer"
    return found


CHAINS_KEY = "health:chains:"


def _chains_cached() -> dict[str, str]:
    """The last check of the chain nodes, refreshed when older than the interval or when
    the operator changed the chains (the key is their configuration). While one process
    refreshes it, the others answer with the previous check (without the chains while the
    very first one runs); none of them waits."""
    try:
        chains = _active_chains()
    except (DatabaseError, InterfaceError):
        return {}  # the database check says so
    if not chains:
        return {}
    key = CHAINS_KEY + hashlib.sha256(json.dumps(chains).encode()).hexdigest()[:24]
    try:
        found = cache.get(key)
        if found is not None and found["at"] > _now() - settings.HEALTH_CHAIN_CHECK_SECONDS:
            return dict(found["chains"])
        if not cache.add(key + ":refreshing", 1, timeout=30):
            return dict(found["chains"]) if found is not None else {}
        try:
            checked = _chains(chains)
            cache.set(key, {"at": _now(), "chains": checked}, timeout=86_400)
        finally:
            cache.delete(key + ":refreshing")
    except (RedisError, OSError) as exc:
        return {"chains": f"error: cache unavailable ({type(exc).__name__})"}
    return checked


def _now() -> float:
    return time.time()


def _chains_checked() -> dict[str, str]:
    try:
        return _chains_cached()
    except Exception as exc:  # the report, not a 500
        return {"chains": f"error: {type(exc).__name__}"}


def health(request: HttpRequest) -> JsonResponse:
    checks = {"database": _database(), "broker": _broker(), **_chains_checked()}
    down = [name for name, value in checks.items() if not value.startswith("ok")]
    if not down:
        return JsonResponse({"status": "ok", **checks})
    response = JsonResponse({"status": "error", **checks, "down": down}, status=503)
    response["Retry-After"] = "10"
    return response
