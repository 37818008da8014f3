"""Per token and per address, in Redis; refusals say when to retry (Retry-After)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

if TYPE_CHECKING:  # rest_framework.views imports the throttles: no cycle at run time
    from rest_framework.views import APIView


class TokenRateThrottle(SimpleRateThrottle):
    scope = "token"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        if request.auth is None:
            return None
        return self.cache_format % {"scope": self.scope, "ident": request.auth.pk}


class AddressRateThrottle(SimpleRateThrottle):
    scope = "address"

    def get_cache_key(self, request: Request, view: APIView) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}
