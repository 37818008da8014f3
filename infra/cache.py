"""The cache: Django's RedisCache, degraded rather than failing while Redis is down.

What the cache holds here is a shortcut (a quote, the coins on offer, /healthz's check of
the nodes): without Redis a read misses and the page computes it again, a write is dropped.
Neither turns a page into an error. A warning says so, at most once per ``LOG_EVERY``
seconds per process, so an outage does not flood the logs.

``add`` and ``incr`` still raise: callers use them for locks and counters (the scanner's
per-chain lock, the access tick's), where pretending would run work twice or never.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

LOG_EVERY = 10.0
"""Seconds between two warnings about the same outage, per process."""

_last_warning = 0.0


def _degraded(operation: str, exc: Exception) -> None:
    global _last_warning
    now = time.monotonic()
    if now - _last_warning >= LOG_EVERY:
        _last_warning = now
        log.warning("cache unavailable: %s skipped", operation, extra={"error": type(exc).__name__})


class ReusedClients(RedisCacheClient):
    """Django's Redis cache client with one ``redis.Redis`` per connection pool.

    Django makes a new ``redis.Redis`` for every operation, and each sets up its ~170
    response callbacks (~0.1 ms; a page asks the cache several times). A client keeps no
    state of its own beyond its pool and is safe to share between threads, so one per pool
    serves as well."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._clients: dict[int, Any] = {}

    def get_client(self, key: Any = None, *, write: bool = False) -> Any:
        pool = self._get_connection_pool(write)  # type: ignore[attr-defined]
        client = self._clients.get(id(pool))
        if client is None:
            client = self._clients[id(pool)] = self._client(connection_pool=pool)  # type: ignore[attr-defined]
        return client


class ResilientRedisCache(RedisCache):
    def __init__(self, server: Any, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = ReusedClients

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        try:
            return super().get(key, default, version)
        except (RedisError, OSError) as exc:
            _degraded("get", exc)
            return default

    def get_many(self, keys: Any, version: int | None = None) -> dict[Any, Any]:
        try:
            return super().get_many(keys, version)
        except (RedisError, OSError) as exc:
            _degraded("get_many", exc)
            return {}

    def has_key(self, key: Any, version: int | None = None) -> bool:
        try:
            return super().has_key(key, version)
        except (RedisError, OSError) as exc:
            _degraded("has_key", exc)
            return False

    def set(
        self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> None:
        try:
            super().set(key, value, timeout, version)
        except (RedisError, OSError) as exc:
            _degraded("set", exc)

    def set_many(
        self, data: dict[Any, Any], timeout: Any = DEFAULT_TIMEOUT, version: int | None = None
    ) -> list[Any]:
        try:
            return super().set_many(data, timeout, version)
        except (RedisError, OSError) as exc:
            _degraded("set_many", exc)
            return list(data)

    def delete(self, key: Any, version: int | None = None) -> bool:
        """A lock's release that cannot reach Redis is dropped: the lock expires."""
        try:
            return super().delete(key, version)
        except (RedisError, OSError) as exc:
            _degraded("delete", exc)
            return False
