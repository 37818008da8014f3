"""The cache's Redis clients (issue 15): one per connection pool, not one per operation."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.core.cache import cache


def test_cache_operations_share_one_redis_client(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Any] = []
    real = redis.Redis.__init__

    def counting(self: Any, *args: Any, **kwargs: Any) -> None:
        made.append(self)
        real(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counting)
    cache.set("cache-clients:a", 1, 30)
    for _ in range(5):
        assert cache.get("cache-clients:a") == 1
    cache.set_many({"cache-clients:b": 2, "cache-clients:c": 3}, 30)
    assert cache.get_many(["cache-clients:b", "cache-clients:c"]) == {
        "cache-clients:b": 2,
        "cache-clients:c": 3,
    }
    assert len(made) <= 1, len(made)  # made once (or earlier in this thread), then reused


def test_a_shared_client_reconnects_after_its_connections_drop() -> None:
    cache.set("cache-clients:d", "before", 30)
    client = cache._cache.get_client(write=True)  # type: ignore[attr-defined]
    client.connection_pool.disconnect()  # as a Redis restart leaves them
    assert cache.get("cache-clients:d") == "before"
    cache.set("cache-clients:d", "after", 30)
    assert cache.get("cache-clients:d") == "after"
