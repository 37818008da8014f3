"""Every API error is JSON with a stable ``code`` and a human ``detail`` — the same codes
the booking pages' messages come from (reservations.errors)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions, status

from infra.outages import Dependency, unavailable_body


class DependencyUnavailable(exceptions.APIException):
    """Something this request needs is down: nothing was changed, retry shortly (a 503 with
    Retry-After). ``code``: ``database_unavailable`` or ``redis_unavailable``."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "A service this request needs is unavailable; nothing was changed."
    default_code = "service_unavailable"


def dependency_unavailable(which: Dependency) -> DependencyUnavailable:
    body = unavailable_body(which)
    return DependencyUnavailable(body["detail"], code=body["code"])


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
