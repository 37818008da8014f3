"""Booking services: every order state change happens here, and only here.

Views, serializers, admin actions and tasks parse their input, call one function below and
render the result. Each function documents what it guarantees.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from accounts.models import User
from reservations import availability
from reservations.errors import (
    BookingRefused,
    InvalidTransition,
    LotUnavailable,
    refusal,
)
from reservations.models import (
    Environment,
    HardwareKind,
    Hold,
    Hypothesis,
    Order,
    OrderEvent,
    OrderSshKey,
    Precision,
    Price,
    UsageMode,
    Window,
    Workload,
)
from reservations.ssh_keys import SshKeyError, parse_public_keys

log = logging.getLogger(__name__)

REFERENCE_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32
REFERENCE_LENGTH = 16  # 80 bits: unguessable, so the reference can be the order link's key
_EXCLUSION_VIOLATION = "23P01"
_HOLD_ATTEMPTS = 8

TEXT_LIMITS = {
    "contact_name": 120,
    "contact_email": 254,
    "organisation": 160,
    "contact_phone": 64,
    "hypothesis_text": 4000,
    "checkpoints": 4000,
    "abort_criteria": 4000,
}


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
    model_params_billion: Decimal | None = None
    model_precision: str = ""
    model_workload: str = ""
    checkpoints: str = ""
    abort_criteria: str = ""
    language: str = "en"
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Actor:
    """Who causes a state change, for the audit trail."""

    label: str
    user: User | None = None

    @classmethod
    def of(cls, user: User) -> Actor:
        return cls(label=user.email, user=user)


RESEARCHER = Actor("researcher")


def system(task: str) -> Actor:
    return Actor(f"system: {task}")


def new_reference() -> str:
    body = "".join(secrets.choice(REFERENCE_ALPHABET) for _ in range(REFERENCE_LENGTH))
    return "GL-" + "-".join(body[i : i + 4] for i in range(0, REFERENCE_LENGTH, 4))


# --------------------------------------------------------------------------- validation


@dataclass
class _Validated:
    kind: HardwareKind
    environment: Environment
    price: Price
    keys: list[Any]
    params: Decimal | None


def _validate(request: OrderRequest, now: datetime) -> _Validated:
    """All checks that need no lock; raises BookingRefused with every field's problem."""
    errors: dict[str, list[ValidationError]] = {}

    def refuse(name: str, code: str, **params: Any) -> None:
        errors.setdefault(name, []).append(refusal(code, **params))

    for name, limit in TEXT_LIMITS.items():
        if len(getattr(request, name) or "") > limit:
            refuse(name, "too_long", limit=limit)
    if not (request.contact_name or "").strip():
        refuse("contact_name", "required")
    try:
        validate_email(request.contact_email)
    except ValidationError:
        refuse("contact_email", "invalid_email")
    if request.usage_mode not in UsageMode.values:
        refuse("usage_mode", "invalid_choice")
    if request.hypothesis not in Hypothesis.values:
        refuse("hypothesis", "invalid_choice")

    window_ok = _is_int(request.window_days) and request.window_days in Window.values
    if not window_ok:
        refuse("window_days", "invalid_window")
    lots_ok = _is_int(request.lot_count) and request.lot_count >= 1
    if not lots_ok:
        refuse("lot_count", "invalid_lot_count")

    starts_at = request.starts_at
    if not isinstance(starts_at, datetime) or timezone.is_naive(starts_at):
        refuse("starts_at", "start_not_aware")
    elif starts_at < now:
        refuse("starts_at", "start_in_past")
    elif starts_at > now + settings.RESERVATION_HORIZON:
        refuse("starts_at", "start_beyond_horizon", days=settings.RESERVATION_HORIZON.days)

    if request.window_days == Window.THIRTY_DAYS:
        if not request.checkpoints.strip():
            refuse("checkpoints", "checkpoints_required")
        if not request.abort_criteria.strip():
            refuse("abort_criteria", "abort_criteria_required")

    params = _validate_model_facts(request, refuse)

    keys: list[Any] = []
    try:
        keys = parse_public_keys(request.ssh_public_keys or "")
    except SshKeyError as exc:
        refuse("ssh_public_keys", exc.code, line=exc.line_number, detail=exc.detail)

    # Catalogue look-ups: one query for kind and price, one for the environment and its
    # compatibility; the cold paths below only run to explain a refusal.
    kind: HardwareKind | None = None
    price = (
        Price.objects.select_related("kind")
        .filter(kind__slug=request.kind, kind__is_offered=True, window_days=request.window_days)
        .first()
        if window_ok
        else None
    )
    if price is not None:
        kind = price.kind
    else:
        kind = HardwareKind.objects.filter(slug=request.kind, is_offered=True).first()
        if kind is None:
            refuse("kind", "unknown_kind")
        elif window_ok:
            refuse("window_days", "no_price")
    environment = (
        Environment.objects.filter(slug=request.environment, is_offered=True)
        .annotate(
            runs_on_kind=Exists(
                Environment.compatible_kinds.through.objects.filter(
                    environment=OuterRef("pk"), hardwarekind__slug=request.kind
                )
            )
        )
        .first()
    )
    if environment is None:
        refuse("environment", "unknown_environment")
    elif kind is not None and not environment.runs_on_kind:
        refuse("environment", "incompatible_environment", kind=kind.name)

    if errors:
        raise BookingRefused(errors)
    assert kind is not None
    assert environment is not None
    assert price is not None
    return _Validated(kind, environment, price, keys, params)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _validate_model_facts(request: OrderRequest, refuse: Any) -> Decimal | None:
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
    return params


# --------------------------------------------------------------------------- placing


def place_order(
    request: OrderRequest, *, user: User | None = None, now: datetime | None = None
) -> Order:
    """Create an order and hold its lots, all or nothing.

    Guarantees: on return the order exists with exactly ``lot_count`` holds, the price is
    frozen into it, and an audit event records its creation. On ``BookingRefused`` (bad
    input) or ``LotUnavailable`` (capacity gone, with the next possible start) nothing at
    all was written. Overlap is refused by the database's exclusion constraint; losing a
    race for a lot makes this function try the next free one.
    """
    now = now or timezone.now()
    valid = _validate(request, now)
    for _attempt in range(_HOLD_ATTEMPTS):
        try:
            order = _create_order_and_holds(request, valid, user, now)
        except LotUnavailable:
            bookable = availability.bookable_lots(valid.kind).count()
            if request.lot_count > bookable:
                raise BookingRefused(
                    {"lot_count": [refusal("too_many_lots", available=bookable)]}
                ) from None
            raise LotUnavailable(
                availability.earliest_start(valid.kind, request.window_days, request.lot_count, now)
            ) from None
        except IntegrityError as exc:
            # Another transaction took one of our lots between our look and our insert.
            # PostgreSQL made us wait for it and then refused ours: look again, afresh.
            if getattr(exc.__cause__, "sqlstate", None) != _EXCLUSION_VIOLATION:
                raise
            continue
        log.info("order placed", extra={"order": order.reference, "lots": order.lot_count})
        return order
    raise LotUnavailable(
        availability.earliest_start(valid.kind, request.window_days, request.lot_count, now)
    )


def _create_order_and_holds(
    request: OrderRequest, valid: _Validated, user: User | None, now: datetime
) -> Order:
    """One transaction: the order, its holds, its keys, its first audit event."""
    starts_at = request.starts_at
    period = availability.blocked_period(starts_at, request.window_days)
    with transaction.atomic():
        lots = list(
            availability.free_lots(valid.kind, starts_at, request.window_days)[: request.lot_count]
        )
        if len(lots) < request.lot_count:
            raise LotUnavailable(None)
        order = Order.objects.create(
            reference=new_reference(),
            user=user,
            language=request.language[:8],
            contact_name=request.contact_name.strip(),
            contact_email=request.contact_email.strip(),
            organisation=request.organisation.strip(),
            contact_phone=request.contact_phone.strip(),
            kind=valid.kind,
            environment=valid.environment,
            lot_count=request.lot_count,
            window_days=request.window_days,
            starts_at=starts_at,
            ends_at=starts_at + timedelta(days=request.window_days),
            usage_mode=request.usage_mode,
            hypothesis=request.hypothesis,
            hypothesis_text=request.hypothesis_text.strip(),
            model_params_billion=valid.params,
            model_precision=request.model_precision,
            model_workload=request.model_workload,
            checkpoints=request.checkpoints.strip(),
            abort_criteria=request.abort_criteria.strip(),
            unit_price_usd=valid.price.amount_usd,
            total_usd=valid.price.amount_usd * request.lot_count,
            hold_expires_at=now + settings.RESERVATION_HOLD_DURATION,
        )
        # The exclusion constraint is the arbiter: a concurrent hold on one of these lots
        # makes this INSERT fail, and the whole transaction with it.
        Hold.objects.bulk_create(Hold(order=order, lot=lot, period=period) for lot in lots)
        OrderSshKey.objects.bulk_create(
            OrderSshKey(
                order=order, algorithm=k.algorithm, public_key=k.line, fingerprint=k.fingerprint
            )
            for k in valid.keys
        )
        _record(order, "", Order.STATUS_AWAITING_PAYMENT, Actor.of(user) if user else RESEARCHER)
    return order


# --------------------------------------------------------------------------- transitions


def _record(order: Order, from_status: str, to_status: str, actor: Actor, reason: str = "") -> None:
    OrderEvent.objects.create(
        order=order,
        actor=actor.user,
        actor_label=actor.label[:120],
        from_status=from_status,
        to_status=to_status,
        reason=reason,
    )


def transition(
    order: Order,
    to_status: str,
    *,
    allowed_from: Iterable[str],
    actor: Actor,
    reason: str = "",
    extra_filter: dict[str, Any] | None = None,
) -> bool:
    """Move ``order`` to ``to_status`` if, in the database, it is in one of ``allowed_from``.

    The order's row is locked (SELECT ... FOR UPDATE) and its status read under the lock:
    of two workers acting on the same order, the second waits, then sees the first one's
    result and gets False. Must run inside a transaction, so that the audit event and the
    caller's follow-up work commit with the change.
    """
    allowed = tuple(allowed_from)
    # Locks: this order's row only.
    current = (
        Order.objects.select_for_update()
        .filter(pk=order.pk, **(extra_filter or {}))
        .values_list("status", flat=True)
        .first()
    )
    if current not in allowed:
        return False
    Order.objects.filter(pk=order.pk).update(status=to_status, updated_at=timezone.now())
    _record(order, current, to_status, actor, reason)
    order.status = to_status
    return True


def _release_holds(order: Order, now: datetime) -> int:
    return Hold.objects.filter(order=order, status__in=Hold.COUNTING).update(
        status=Hold.Status.RELEASED, released_at=now
    )


def expire_order(order: Order, *, now: datetime | None = None) -> bool:
    """Expire one unpaid order whose hold time has passed and release its lots.

    Idempotent and race-safe: only the caller whose conditional update changes the row
    releases the holds; everyone else gets False.
    """
    now = now or timezone.now()
    with transaction.atomic():
        expired = transition(
            order,
            Order.STATUS_EXPIRED,
            allowed_from=[Order.STATUS_AWAITING_PAYMENT],
            actor=system("expire_unpaid_holds"),
            reason="payment not received before the hold expired",
            extra_filter={"hold_expires_at__lte": now},
        )
        if expired:
            _release_holds(order, now)
    return expired


def expire_unpaid_holds(*, now: datetime | None = None, limit: int = 500) -> int:
    """Expire every unpaid order past its hold time; returns how many this call expired."""
    now = now or timezone.now()
    due = Order.objects.filter(
        status=Order.STATUS_AWAITING_PAYMENT, hold_expires_at__lte=now
    ).order_by("hold_expires_at")[:limit]
    return sum(1 for order in due if expire_order(order, now=now))


CANCELLABLE = (Order.STATUS_AWAITING_PAYMENT, Order.STATUS_PAID)


def cancel_order(order: Order, *, actor: Actor, reason: str) -> None:
    """Cancel an order that has not been approved yet and free its lots.

    Raises InvalidTransition when the order is past approval (or already ended); a paid
    order's refund is the operator's follow-up and is recorded in the reason.
    """
    if not reason.strip():
        raise BookingRefused({"reason": [refusal("required")]})
    with transaction.atomic():
        if not transition(
            order, Order.STATUS_CANCELLED, allowed_from=CANCELLABLE, actor=actor, reason=reason
        ):
            current = Order.objects.values_list("status", flat=True).get(pk=order.pk)
            raise InvalidTransition(current, Order.STATUS_CANCELLED)
        _release_holds(order, timezone.now())
