"""Rate limits counted atomically in Redis: one primitive for every throttle.

DRF's ``SimpleRateThrottle`` read the request history from the cache, appended to it and
wrote it back: concurrent requests all read the same history, and 551 of 600 simultaneous
requests passed a 300/minute limit. Here each attempt is one ``INCR`` in a Lua script that
also sets the window's expiry when it opens, so Redis counts every attempt exactly once,
whatever the concurrency, across every web process and worker.

A fixed window that opens at the first attempt: at most ``limit`` attempts pass from then
until the window expires, and the next attempt opens a new one (so a burst straddling two
windows can pass at most twice the limit within one window's length). Refused attempts are
counted too, which does not prolong the window.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass

import redis
from django.conf import settings
from redis.commands.core import Script

from infra.env import parse_rate

KEY_PREFIX = "gpulots:limit:"

_HIT = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {count, ttl}
"""

_lock = threading.Lock()
_scripts: dict[str, Script] = {}


def _script() -> Script:
    """The hit script on a client of ``settings.REDIS_URL`` (one pool per URL and process;
    redis-py starts a fresh pool in a forked child)."""
    url = settings.REDIS_URL
    with _lock:
        if url not in _scripts:
            # A thread waits for a free connection rather than failing when all are busy.
            # Redis down: a clear error within REDIS_TIMEOUT_SECONDS, never a hang.
            pool = redis.BlockingConnectionPool.from_url(
                url,
                max_connections=50,
                timeout=10,
                socket_connect_timeout=settings.REDIS_TIMEOUT_SECONDS,
                socket_timeout=settings.REDIS_TIMEOUT_SECONDS,
            )
            _scripts[url] = redis.Redis(connection_pool=pool).register_script(_HIT)
        return _scripts[url]


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    count: int
    """Attempts counted in this window, this one included."""
    retry_after: float
    """Seconds until the window ends and attempts pass again."""


def hit(name: str, limit: int, seconds: int) -> Verdict:
    """Count one attempt against ``name``: allowed while at most ``limit`` attempts fell in
    the current window of ``seconds``. ``name`` may be anything (it is hashed for the key:
    no e-mail address or client address is kept in Redis in clear).

    Raises ``redis.RedisError`` when Redis cannot be reached: the caller decides whether to
    fail open or closed (api.throttles: reads pass, writes answer 503)."""
    digest = hashlib.sha256(name.encode()).hexdigest()[:40]
    count, ttl_ms = _script()(keys=[f"{KEY_PREFIX}{digest}"], args=[seconds * 1000])
    return Verdict(
        allowed=int(count) <= limit, count=int(count), retry_after=max(int(ttl_ms), 0) / 1000
    )


def hit_rate(name: str, rate: str) -> Verdict:
    """``hit`` with a rate written ``N/period`` (``5/hour``), as the settings give them."""
    limit, seconds = parse_rate(rate)
    return hit(name, limit, seconds)
