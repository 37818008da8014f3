"""Outages of the database or Redis answer a clear 503, never a stack trace.

``dependency_down`` says whether an exception means a dependency is unreachable (not a bug
and not a refusal): the API answers it with a JSON 503 and a stable code (api.errors), the
pages with a short page in the visitor's language; both say Retry-After. A page is rendered
without the request's context processors, which would reach for the database again.

Exceptions raised inside a view reach ``OutageMiddleware``; those raised in another
middleware (a session saved on the way out) reach Django's 500 handler, ``server_error``,
which answers the same 503.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Literal

from django.db import InterfaceError
from django.db import OperationalError as DatabaseOperationalError
from django.http import HttpRequest, HttpResponse, HttpResponseServerError, JsonResponse
from django.template.loader import render_to_string
from kombu.exceptions import OperationalError as BrokerOperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 10

Dependency = Literal["database", "redis"]

_UNREACHABLE_STATES = ("57P01", "57P02", "57P03")
"""PostgreSQL shutting down or starting (admin_shutdown, crash_shutdown, cannot_connect_now);
class 08 (connection exceptions) is matched by its prefix."""


def dependency_down(exc: BaseException) -> Dependency | None:
    """``database`` or ``redis`` when ``exc`` says that one cannot be reached, else None."""
    if isinstance(exc, InterfaceError):  # a connection that is already closed
        return "database"
    if isinstance(exc, DatabaseOperationalError):
        # A deadlock or a cancelled statement is an OperationalError too, with a SQLSTATE of
        # its own; a lost or refused connection has none (or class 08).
        state = getattr(exc.__cause__, "sqlstate", None)
        if state is None or state.startswith("08") or state in _UNREACHABLE_STATES:
            return "database"
        return None
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | BrokerOperationalError):
        return "redis"
    return None


UNAVAILABLE = {
    "database": "The database is unavailable right now; nothing was changed. Retry shortly.",
    "redis": (
        "Redis (rate limits and the task queue) is unavailable right now; nothing was "
        "changed. Retry shortly."
    ),
}


def unavailable_body(which: Dependency) -> dict[str, str]:
    """The API's JSON body for ``which`` being down (the pages show 503.html)."""
    return {"code": f"{which}_unavailable", "detail": UNAVAILABLE[which]}


def is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/") or request.path == "/healthz"


def unavailable_response(request: HttpRequest, which: Dependency) -> HttpResponse:
    """The 503 for ``which`` being down: JSON for the API, a short page elsewhere."""
    log.error(
        "service unavailable: %s is down", which, extra={"path": request.path, "dependency": which}
    )
    response: HttpResponse
    if is_api(request):
        response = JsonResponse(unavailable_body(which), status=503)
    else:
        html = render_to_string("503.html", {"which": which})
        response = HttpResponse(html, status=503)
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class OutageMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        which = dependency_down(exception)
        return None if which is None else unavailable_response(request, which)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: a dependency that is down is a 503 here too; anything else Django's 500."""
    exc = sys.exc_info()[1]
    which = dependency_down(exc) if exc is not None else None
    if which is not None:
        return unavailable_response(request, which)
    from django.views.defaults import server_error as default

    response: HttpResponse = default(request)
    return response if response is not None else HttpResponseServerError()
