"""What every response tells the browser: a Content-Security-Policy that allows only this
site, and no-store on the pages that show a secret.

Django 5.2 has no CSP of its own; this small middleware sets one policy for every response
(the pages load nothing from elsewhere and have no inline scripts, styles or handlers:
tests/test_security_headers.py checks the templates). The admin is Django's own and keeps
inline styles in a few templates, so /admin/ alone also allows inline *styles*; its
scripts stay 'self' only.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils.cache import patch_cache_control

POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "object-src": "'none'",
    "frame-ancestors": "'none'",
    "form-action": "'self'",
    "base-uri": "'none'",
}
ADMIN_POLICY = {**POLICY, "style-src": "'self' 'unsafe-inline'"}
SECRET_URL_PARTS = frozenset({"secret", "token"})
"""URL parameters that make a page a secret: whoever holds the link holds the order (or
the sign-in)."""


def _header(policy: dict[str, str]) -> str:
    return "; ".join(f"{name} {value}" for name, value in policy.items())


_HEADER = _header(POLICY)
_ADMIN_HEADER = _header(ADMIN_POLICY)


def mark_no_store(response: HttpResponse) -> HttpResponse:
    """Neither the browser (back button, disk cache) nor a proxy may keep this response."""
    patch_cache_control(response, no_store=True, private=True, no_cache=True, max_age=0)
    return response


def no_store(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """For a view whose page shows a secret (a new API token)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return mark_no_store(view(request, *args, **kwargs))

    return wrapper


class SecurityHeadersMiddleware:
    """The policy on every response; no-store on every page reached by an order's secret
    link (the order page and each of its fragments: payment panel, live status, reports)
    and on API answers to a token, whichever view renders them."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            admin = request.path_info.startswith("/admin/")
            response["Content-Security-Policy"] = _ADMIN_HEADER if admin else _HEADER
        match = getattr(request, "resolver_match", None)
        secret_link = match is not None and not SECRET_URL_PARTS.isdisjoint(match.kwargs)
        if secret_link or "HTTP_AUTHORIZATION" in request.META:
            mark_no_store(response)
        return response
