"""Every API error is JSON with a stable ``code`` and a human ``detail`` — the same codes
the booking pages' messages come from (reservations.errors)."""

from __future__ import annotations

import logging
import math
from typing import Any

from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from django.utils import timezone
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from infra.outages import RETRY_AFTER_SECONDS, Dependency, dependency_down, unavailable_body
from provisioning.split_tests import SplitTestRefused
from reservations.errors import (
    BookingRefused,
    InvalidTransition,
    LotUnavailable,
    RateLimited,
    UnpaidLimitReached,
)

log = logging.getLogger(__name__)


class DependencyUnavailable(exceptions.APIException):
    """Something this request needs is down: nothing was changed, retry shortly (a 503 with
    Retry-After). ``code``: ``database_unavailable`` or ``redis_unavailable``."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "A service this request needs is unavailable; nothing was changed."
    default_code = "service_unavailable"


def dependency_unavailable(which: Dependency) -> DependencyUnavailable:
    body = unavailable_body(which)
    return DependencyUnavailable(body["detail"], code=body["code"])


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


MAX_JSON_DEPTH = 16
"""The deepest nesting of arrays and objects a body may have (the API's own are 2 deep)."""


class JsonTooDeep(exceptions.ParseError):
    default_detail = (
        f"The JSON body nests arrays or objects too deeply (at most {MAX_JSON_DEPTH} levels)."
    )
    default_code = "json_too_deep"


class IdempotencyConflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "A request with this Idempotency-Key is being processed; retry shortly."
    default_code = "request_in_progress"


class IdempotencyKeyReused(exceptions.APIException):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    default_detail = "This Idempotency-Key was used with a different request."
    default_code = "idempotency_key_reused"


class ReportNotReady(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = (
        "No lot has a validation report yet: a lot's report is stored when its validation "
        "benchmark has run, after approval. Follow the progress at "
        "/api/v1/orders/<reference>/provisioning/."
    )
    default_code = "report_not_ready"


def refusal_body(error: DjangoValidationError) -> dict[str, Any]:
    """A service's field refusals: the first one as the headline, all of them by field."""
    fields = {
        name: [{"code": e.code, "detail": " ".join(e.messages)} for e in found]
        for name, found in error.error_dict.items()
    }
    first = next(iter(fields.values()))[0]
    return {"code": first["code"], "detail": first["detail"], "fields": fields}


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
