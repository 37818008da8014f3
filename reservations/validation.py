"""What a booking asks for, and every check it must pass before anything is written.

The checks here need no database, with one exception kept off the hot path: when a
request is refused, the catalogue is consulted too, so that the researcher learns about
every problem at once (an unknown kind as well as a missing name). On the happy path the
catalogue is checked inside the placing statement itself (see ``placement``), where the
price is also read, atomically with the insert.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import connection
from django.utils import timezone

from infra.identity import NotAnAddress, canonical_email
from reservations.errors import BookingRefused, refusal
from reservations.models import (
    CHECK_LIMIT,
    MAX_CHECKPOINTS,
    MAX_MICRO_BATCH,
    MAX_SEQ_LEN,
    Hypothesis,
    Precision,
    UsageMode,
    Window,
    Workload,
)
from reservations.ssh_keys import PublicKey, SshKeyError, parse_public_keys

TEXT_LIMITS = {
    "contact_name": 120,
    "contact_email": 254,
    "organisation": 160,
    "contact_phone": 64,
    "hypothesis_text": 4000,
    "abort_criteria": 4000,
}

FREE_TEXT = tuple(name for name in TEXT_LIMITS if name != "contact_email")
"""Text typed by the researcher and shown to others (operator desk, mails, pages); the
address has rules of its own (infra.identity)."""
MAX_LOT_COUNT = 64
"""The most lots one order may ask for (the form, the API and placing the order agree)."""

BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Invisible controls that reorder how text is shown (U+202E shows "exe.txt" as "txt.exe"):
the embeddings, overrides and isolates, the marks, and the Arabic letter mark. Text in
right-to-left scripts needs none of them; the browser orders it by itself."""

Errors = dict[str, list[ValidationError]]


def has_bidi_controls(text: str | None) -> bool:
    return bool(text) and BIDI_CONTROLS.search(text or "") is not None


def refuse_bidi_controls(text: str | None) -> None:
    """A field validator (forms and API serializers alike) for free text."""
    if has_bidi_controls(text):
        raise refusal("bidi_control")


def start_refusal(starts_at: datetime, now: datetime) -> ValidationError | None:
    """Why a window may not start at ``starts_at`` (None: it may): one rule for the form,
    the live quote, the API's availability and placing the order."""
    if starts_at < now:
        return refusal("start_in_past")
    if starts_at > now + settings.RESERVATION_HORIZON:
        return refusal("start_beyond_horizon", days=settings.RESERVATION_HORIZON.days)
    return None


@dataclass
class OrderRequest:
    """What a researcher asks for; the same fields in the booking form and the API."""

    kind: str
    lot_count: int
    window_days: int
    starts_at: datetime
    environment: str
    usage_mode: str
    hypothesis: str
    contact_name: str
    contact_email: str
    ssh_public_keys: str
    hypothesis_text: str = ""
    organisation: str = ""
    contact_phone: str = ""
    model_params_billion: Decimal | str | None = None
    model_precision: str = ""
    model_workload: str = ""
    model_seq_len: int | None = None
    model_micro_batch: int | None = None
    checkpoints: Sequence[Any] = field(default_factory=list)
    """For 30 days: one to MAX_CHECKPOINTS entries ``{"date": "YYYY-MM-DD", "check": "…"}``."""
    abort_criteria: str = ""
    language: str = "en"


@dataclass(frozen=True)
class PlannedCheckpoint:
    due_on: date
    what: str


@dataclass(frozen=True)
class ValidRequest:
    keys: list[PublicKey]
    model_params_billion: Decimal | None
    checkpoints: list[PlannedCheckpoint] = field(default_factory=list)


def validate(request: OrderRequest, now: datetime) -> ValidRequest:
    """Raise BookingRefused naming every problem of ``request``; else its parsed parts."""
    errors, params = plan_errors(request, now)
    contact, keys = contact_errors(request)
    for name, found in contact.items():
        errors.setdefault(name, []).extend(found)
    if errors:
        for name, found in catalogue_refusals(request).items():
            errors.setdefault(name, []).extend(found)
        raise BookingRefused(errors)
    campaign = request.window_days == Window.THIRTY_DAYS
    return ValidRequest(
        keys=keys,
        model_params_billion=params,
        checkpoints=planned_checkpoints(request)[0] if campaign else [],
    )


def plan_errors(request: OrderRequest, now: datetime) -> tuple[Errors, Decimal | None]:
    """Problems with what is booked (kind aside: see ``catalogue_refusals``), and the
    parsed parameter count."""
    errors: Errors = {}

    def refuse(name: str, code: str, **params: Any) -> None:
        errors.setdefault(name, []).append(refusal(code, **params))

    if len(request.hypothesis_text or "") > TEXT_LIMITS["hypothesis_text"]:
        refuse("hypothesis_text", "too_long", limit=TEXT_LIMITS["hypothesis_text"])
    if has_bidi_controls(request.hypothesis_text):
        refuse("hypothesis_text", "bidi_control")
    if request.usage_mode not in UsageMode.values:
        refuse("usage_mode", "invalid_choice")
    if request.hypothesis not in Hypothesis.values:
        refuse("hypothesis", "invalid_choice")
    if not (_is_int(request.window_days) and request.window_days in Window.values):
        refuse("window_days", "invalid_window")
    if not (_is_int(request.lot_count) and request.lot_count >= 1):
        refuse("lot_count", "invalid_lot_count")
    elif request.lot_count > MAX_LOT_COUNT:
        refuse("lot_count", "lot_count_above_limit", limit=MAX_LOT_COUNT)
    starts_at = request.starts_at
    if not isinstance(starts_at, datetime) or timezone.is_naive(starts_at):
        refuse("starts_at", "start_not_aware")
    elif (refused := start_refusal(starts_at, now)) is not None:
        errors.setdefault("starts_at", []).append(refused)
    return errors, _model_params(request, refuse)


def contact_errors(request: OrderRequest) -> tuple[Errors, list[PublicKey]]:
    """Problems with who books and how they log in (and, for 30 days, the campaign plan),
    and the parsed SSH keys."""
    errors: Errors = {}

    def refuse(name: str, code: str, **params: Any) -> None:
        errors.setdefault(name, []).append(refusal(code, **params))

    for name, limit in TEXT_LIMITS.items():
        if name != "hypothesis_text" and len(getattr(request, name) or "") > limit:
            refuse(name, "too_long", limit=limit)
    for name in FREE_TEXT:
        if name != "hypothesis_text" and has_bidi_controls(getattr(request, name)):
            refuse(name, "bidi_control")
    if not (request.contact_name or "").strip():
        refuse("contact_name", "required")
    try:
        validate_email(request.contact_email)
        canonical_email(request.contact_email)  # one address, one identity
    except (ValidationError, NotAnAddress):
        refuse("contact_email", "invalid_email")
    if request.window_days == Window.THIRTY_DAYS:
        for code, params in planned_checkpoints(request)[1]:
            refuse("checkpoints", code, **params)
        if not (request.abort_criteria or "").strip():
            refuse("abort_criteria", "abort_criteria_required")
    keys: list[PublicKey] = []
    try:
        keys = parse_public_keys(request.ssh_public_keys or "")
    except SshKeyError as exc:
        refuse("ssh_public_keys", exc.code, line=exc.line_number, detail=exc.detail)
    return errors, keys


def checkpoint_days(starts_at: datetime) -> tuple[date, date]:
    """The first and last day (UTC) a checkpoint of a 30-day window starting then may fall on."""
    start = starts_at.astimezone(UTC).date()
    return start, (starts_at + timedelta(days=Window.THIRTY_DAYS)).astimezone(UTC).date()


def planned_checkpoints(
    request: OrderRequest,
) -> tuple[list[PlannedCheckpoint], list[tuple[str, dict[str, Any]]]]:
    """A campaign's checkpoints in date order, and the refusals (code, parameters) of the
    entries: each needs a day within the window and what is checked; one to eight of them."""
    entries = request.checkpoints if isinstance(request.checkpoints, list | tuple) else None
    if not entries:
        return [], [("checkpoints_required", {})]
    if len(entries) > MAX_CHECKPOINTS:
        return [], [("too_many_checkpoints", {"limit": MAX_CHECKPOINTS})]
    starts_at = request.starts_at if isinstance(request.starts_at, datetime) else None
    first, last = checkpoint_days(starts_at) if starts_at and starts_at.tzinfo else (None, None)
    planned: list[PlannedCheckpoint] = []
    refusals: list[tuple[str, dict[str, Any]]] = []
    for number, entry in enumerate(entries, start=1):
        raw_day = entry.get("date") if isinstance(entry, dict) else None
        what = entry.get("check") if isinstance(entry, dict) else None
        try:
            day = raw_day if isinstance(raw_day, date) else date.fromisoformat(str(raw_day))
        except ValueError:
            day = None
        if day is None or not isinstance(what, str) or not what.strip():
            refusals.append(("checkpoint_invalid", {"number": number}))
        elif len(what) > CHECK_LIMIT:
            refusals.append(("checkpoint_too_long", {"number": number, "limit": CHECK_LIMIT}))
        elif has_bidi_controls(what):
            refusals.append(("bidi_control", {}))
        elif first is not None and last is not None and not first <= day <= last:
            refusals.append(
                ("checkpoint_outside_window", {"number": number, "first": first, "last": last})
            )
        else:
            planned.append(PlannedCheckpoint(due_on=day, what=what.strip()))
    return sorted(planned, key=lambda c: c.due_on), refusals


_CATALOGUE_SQL = """
    SELECT kind.name, price.amount_usd IS NOT NULL, env.id IS NOT NULL,
           EXISTS (SELECT 1 FROM reservations_environment_compatible_kinds AS compat
                    WHERE compat.environment_id = env.id AND compat.hardwarekind_id = kind.id)
      FROM (VALUES (1)) AS one (x)
      LEFT JOIN reservations_hardwarekind AS kind ON kind.slug = %s AND kind.is_offered
      LEFT JOIN reservations_price AS price
             ON price.kind_id = kind.id AND price.window_days = %s
      LEFT JOIN reservations_environment AS env ON env.slug = %s AND env.is_offered
"""


def catalogue_refusals(request: OrderRequest) -> Errors:
    """Why the catalogue refuses this kind, window and environment (empty: it does not)."""
    window = request.window_days if _is_int(request.window_days) else 0
    with connection.cursor() as cursor:
        cursor.execute(_CATALOGUE_SQL, [str(request.kind), window, str(request.environment)])
        kind_name, priced, environment_exists, compatible = cursor.fetchone()
    errors: Errors = {}
    if kind_name is None:
        errors["kind"] = [refusal("unknown_kind")]
    elif not priced and window in Window.values:
        errors["window_days"] = [refusal("no_price")]
    if not environment_exists:
        errors["environment"] = [refusal("unknown_environment")]
    elif kind_name is not None and not compatible:
        errors["environment"] = [refusal("incompatible_environment", kind=kind_name)]
    return errors


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _model_params(request: OrderRequest, refuse: Any) -> Decimal | None:
    params: Decimal | None = None
    if request.model_params_billion not in (None, ""):
        try:
            params = Decimal(str(request.model_params_billion))
        except InvalidOperation:
            params = None
        if params is None or not params.is_finite() or not 0 < params <= 100_000:
            refuse("model_params_billion", "invalid_params")
            params = None
    if request.model_precision and request.model_precision not in Precision.values:
        refuse("model_precision", "invalid_choice")
    if request.model_workload and request.model_workload not in Workload.values:
        refuse("model_workload", "invalid_choice")
    for name, top in (("model_seq_len", MAX_SEQ_LEN), ("model_micro_batch", MAX_MICRO_BATCH)):
        value = getattr(request, name)
        if value is not None and not (_is_int(value) and 1 <= value <= top):
            refuse(name, "invalid_shape", top=top)
    return params
