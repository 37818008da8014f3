"""The API's exception handler (REST_FRAMEWORK's EXCEPTION_HANDLER): every error is JSON
with a stable ``code`` and a human ``detail`` (api.errors). A module of its own because it
needs ``rest_framework.views``, whose APIView imports the classes the settings name
(parsers, throttles): api.errors, which those import, must not import it back."""

from __future__ import annotations

import logging
import math
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404
from django.utils import timezone
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from api.errors import DependencyUnavailable, dependency_unavailable, refusal_body
from api.parsers import RequestTooLarge
from infra.outages import RETRY_AFTER_SECONDS, dependency_down
from provisioning.split_tests import SplitTestRefused
from reservations.errors import (
    BookingRefused,
    InvalidTransition,
    LotUnavailable,
    RateLimited,
    UnpaidLimitReached,
)

log = logging.getLogger(__name__)


def _codes(detail: Any) -> Any:
    if isinstance(detail, dict):
        return {key: _codes(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return [_codes(item) for item in detail]
    return {"code": getattr(detail, "code", "invalid"), "detail": str(detail)}


def handle(exc: Exception, context: dict[str, Any]) -> Response | None:
    which = dependency_down(exc)
    if which is not None:
        log.error("service unavailable: %s is down", which, exc_info=exc)
        exc = dependency_unavailable(which)
    if isinstance(exc, RateLimited):
        limited = Response(refusal_body(exc), status=status.HTTP_429_TOO_MANY_REQUESTS)
        limited["Retry-After"] = str(exc.retry_after)
        return limited
    if isinstance(exc, BookingRefused):
        return Response(refusal_body(exc), status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, LotUnavailable):
        body = {"code": exc.code, "detail": str(exc), "next_start": exc.next_start}
        return Response(body, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, UnpaidLimitReached):
        body = {"code": exc.code, "detail": str(exc), "retry_at": exc.retry_at}
        limited = Response(body, status=status.HTTP_429_TOO_MANY_REQUESTS)
        if exc.retry_at is not None:
            wait = max(1, math.ceil((exc.retry_at - timezone.now()).total_seconds()))
            limited["Retry-After"] = str(wait)
        return limited
    if isinstance(exc, InvalidTransition):
        return Response({"code": exc.code, "detail": str(exc)}, status=status.HTTP_409_CONFLICT)
    if isinstance(exc, SplitTestRefused):
        return Response({"code": exc.code, "detail": str(exc)}, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, RequestDataTooBig):  # over DATA_UPLOAD_MAX_MEMORY_SIZE: JSON, not HTML
        exc = RequestTooLarge()
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        fields = _codes(exc.detail)
        if isinstance(fields, dict):
            first = next(iter(fields.values()))
            headline = first[0] if isinstance(first, list) else first
            response.data = {
                "code": headline.get("code", "invalid"),
                "detail": headline.get("detail", ""),
                "fields": fields,
            }
        else:
            response.data = {"code": "invalid", "detail": str(exc.detail), "fields": {}}
    elif isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        response.data = {
            "code": codes if isinstance(codes, str) else "error",
            "detail": str(exc.detail),
        }
    if isinstance(exc, DependencyUnavailable):
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)  # nothing changed: retry soon
    return response
