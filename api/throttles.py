"""Per token and per client, counted atomically in Redis (infra.limits); refusals say when
to retry (Retry-After).

DRF's rate syntax and hooks (``scope``, ``THROTTLE_RATES``, ``get_cache_key``) stay; its
read-modify-write history does not: each request is one atomic increment, so concurrent
requests never pass more than the rate. The client is ``infra.clients.client_key``: the
connecting peer, ``X-Forwarded-For`` only from a trusted proxy, IPv6 per /64.

While Redis is down the counting cannot happen: a read-only request (GET, HEAD, OPTIONS)
passes uncounted — fail open, with a warning in the log — since reading costs little and
needs no Redis otherwise; a write is refused with a JSON 503 ``redis_unavailable`` — fail
closed — since writes are what the limits protect (and most of them queue work on Redis).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from redis.exceptions import RedisError
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from api.errors import dependency_unavailable
from infra import limits
from infra.clients import client_key

if TYPE_CHECKING:  # rest_framework.views imports the throttles: no cycle at run time
    from rest_framework.views import APIView

log = logging.getLogger(__name__)


class AtomicRateThrottle(SimpleRateThrottle):
    """A ``SimpleRateThrottle`` whose counting is one atomic Redis increment."""

    retry_after: float | None = None

    def allow_request(self, request: Request, view: APIView) -> bool:
        if self.rate is None:
            return True
        self.key = self.get_cache_key(request, view)
        if self.key is None:
            return True
        limit, seconds = self.parse_rate(self.rate)
        if limit is None or seconds is None:
            return True
        try:
            verdict = limits.hit(self.key, limit, seconds)
        except (RedisError, OSError) as exc:
            if request.method in SAFE_METHODS:
                log.warning(
                    "rate limit not counted: Redis is unavailable (read passes)",
                    extra={"scope": self.scope, "error": type(exc).__name__},
                )
                return True
            raise dependency_unavailable("redis") from exc
        self.retry_after = None if verdict.allowed else verdict.retry_after
        return verdict.allowed

    def wait(self) -> float | None:
        return self.retry_after

    def get_ident(self, request: Request) -> str:
        return client_key(request)


class TokenRateThrottle(AtomicRateThrottle):
    scope = "token"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        if request.auth is None:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class AddressRateThrottle(AtomicRateThrottle):
    scope = "address"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
