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
from django.core.cache.backends.redis import RedisCache
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


class ResilientRedisCache(RedisCache):
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
