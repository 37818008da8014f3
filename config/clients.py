"""Who a request comes from, one way for every limit."""

from __future__ import annotations

from django.http import HttpRequest


def client_of(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR", ""))
