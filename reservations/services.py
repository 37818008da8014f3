"""Booking services: every order state change happens here, and only here.

Views, serializers, admin actions and tasks parse their input, call one function below and
render the result. Each function documents what it guarantees.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from accounts.models import User
from infra.identity import canonical_email
from reservations import availability, fairness, notifications, placement
from reservations.errors import (
    BookingRefused,
    InvalidTransition,
    KeysLocked,
    LotUnavailable,
    refusal,
)
from reservations.events import (
    order_cancelled,
    order_expired,
    order_paid,
    order_paid_late,
    order_placed,
    ssh_keys_changed,
)
from reservations.models import (
    MODEL_MICRO_BATCH,
    MODEL_SEQ_LEN,
    Checkpoint,
    HardwareKind,
    Hold,
    Order,
    OrderEvent,
    OrderSshKey,
)
from reservations.notifications import contact_token
from reservations.ssh_keys import SshKeyError, parse_public_keys
from reservations.validation import OrderRequest, ValidRequest, catalogue_refusals, validate

log = logging.getLogger(__name__)

REFERENCE_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32
REFERENCE_LENGTH = 16  # 80 bits: unguessable, so the reference can be the order link's key
_EXCLUSION_VIOLATION = "23P01"
_HOLD_ATTEMPTS = 8


@dataclass(frozen=True)
class Actor:
    """Who causes a state change, for the audit trail."""

    label: str
    user: User | None = None

    @classmethod
    def of(cls, user: User) -> Actor:
        return cls(label=user.email, user=user)


RESEARCHER = Actor("researcher")


def actor_on_link(user: Any, order: Order) -> Actor:
    """Who acts through an order's link (``user``: the request's, maybe anonymous): its
    signed-in owner by name; anyone else holding the link is "researcher"."""
    if user.is_authenticated and order.user_id == user.pk:
        return Actor.of(user)
    return RESEARCHER


def system(task: str) -> Actor:
    return Actor(f"system: {task}")


def is_exclusion_violation(exc: IntegrityError) -> bool:
    """Whether the database refused a hold because it overlaps another on the same lot."""
    return getattr(exc.__cause__, "sqlstate", None) == _EXCLUSION_VIOLATION


def new_secret() -> str:
    return secrets.token_urlsafe(16)  # 128 bits


def new_reference() -> str:
    body = "".join(secrets.choice(REFERENCE_ALPHABET) for _ in range(REFERENCE_LENGTH))
    return "GL-" + "-".join(body[i : i + 4] for i in range(0, REFERENCE_LENGTH, 4))


# --------------------------------------------------------------------------- placing


def place_order(
    request: OrderRequest,
    *,
    user: User | None = None,
    party: fairness.Party | None = None,
    now: datetime | None = None,
) -> Order:
    """Create an order and hold its lots, all or nothing.

    Guarantees: on return the order exists with exactly ``lot_count`` holds, the price is
    frozen into it, and an audit event records its creation. On ``BookingRefused`` (bad
    input), ``UnpaidLimitReached`` (the party holds as much unpaid as it may) or
    ``LotUnavailable`` (capacity gone, with the next possible start) nothing at all was
    written. Overlap is refused by the database's exclusion constraint; losing a race for a
    lot makes this function try the next free one.

    ``party`` is who places it from outside (the pages and the API always say): its unpaid
    orders are limited (reservations.fairness), checked under its locks in the placing
    transaction. None: the operator's own placement, limited by nothing but capacity.
    """
    now = now or timezone.now()
    valid = validate(request, now)
    if party is None:
        order = _place(request, valid, user, None, now)
        order_placed.announce(order_id=order.pk)
        return order
    with transaction.atomic():
        # The party's placements one after the other; bad input and capacity answer first,
        # then the limits, counting this order in (a refusal rolls it back).
        fairness.lock(party, fairness.mailbox_key(request.contact_email))
        order = _place(request, valid, user, party, now)
        fairness.check(order, party, now=now)
        order_placed.announce(order_id=order.pk)
        return order


def _place(
    request: OrderRequest,
    valid: ValidRequest,
    user: User | None,
    party: fairness.Party | None,
    now: datetime,
) -> Order:
    # Look at the free lots no other placement is taking this instant; if too few, look once
    # more at all of them (a lot another placement held may still be free for this window).
    skip_locked = True
    for _attempt in range(_HOLD_ATTEMPTS):
        order, hold, keys, event = _new_rows(request, valid, user, party, now)
        try:
            placed = _insert(order, hold, keys, event, request, valid, skip_locked=skip_locked)
        except IntegrityError as exc:
            # Another booking took one of our lots between our look and our insert.
            # PostgreSQL made us wait for it, then refused ours: look again, afresh.
            if not is_exclusion_violation(exc):
                raise
            continue
        if placed is None:
            if skip_locked:
                skip_locked = False
                continue
            break
        order.pk = placed.id
        order.kind_id = placed.kind_id
        order.environment_id = placed.environment_id
        order.unit_price_usd = placed.unit_price_usd
        order.total_usd = placed.total_usd
        order._state.adding = False
        order._state.db = connection.alias
        log.info("order placed", extra={"order": order.reference, "lots": order.lot_count})
        return order
    raise _why_not_placed(request, now)


def _insert(
    order: Order,
    hold: Hold,
    keys: list[OrderSshKey],
    event: OrderEvent,
    request: OrderRequest,
    valid: ValidRequest,
    *,
    skip_locked: bool,
) -> placement.Placed | None:
    """The placing statement, atomic on its own; inside a caller's transaction, under a
    savepoint, so that a lost race does not break the caller's transaction. A campaign's
    checkpoints are written in the same transaction: an order never lacks its plan."""
    atomic = connection.in_atomic_block or bool(valid.checkpoints)
    with transaction.atomic() if atomic else nullcontext():
        placed = placement.insert_order(
            order,
            hold,
            keys,
            event,
            kind=request.kind,
            environment=request.environment,
            skip_locked=skip_locked,
        )
        if placed is not None and valid.checkpoints:
            Checkpoint.objects.bulk_create(
                Checkpoint(order_id=placed.id, position=number, due_on=c.due_on, what=c.what)
                for number, c in enumerate(valid.checkpoints, start=1)
            )
        return placed


def _why_not_placed(request: OrderRequest, now: datetime) -> Exception:
    """The catalogue's refusal, too many lots asked for, or capacity gone (and when it is not)."""
    refusals = catalogue_refusals(request)
    if refusals:
        return BookingRefused(refusals)
    kind = HardwareKind.objects.get(slug=request.kind)
    bookable = availability.bookable_lots(kind).count()
    if request.lot_count > bookable:
        return BookingRefused({"lot_count": [refusal("too_many_lots", available=bookable)]})
    return LotUnavailable(
        availability.earliest_start(kind, request.window_days, request.lot_count, now)
    )


def _new_rows(
    request: OrderRequest,
    valid: ValidRequest,
    user: User | None,
    party: fairness.Party | None,
    now: datetime,
) -> tuple[Order, Hold, list[OrderSshKey], OrderEvent]:
    """The unsaved rows of a new order: the order (its kind, environment and prices come
    from the catalogue in the placing statement), its hold template, keys, first event."""
    starts_at = request.starts_at
    contact_email = canonical_email(request.contact_email)  # checked by validation
    # The address proved itself when it is the signed-in account's own (its sign-in link
    # reached it); the operator's own placements need no proof.
    confirmed = party is None or (user is not None and user.email == contact_email)
    order = Order(
        reference=new_reference(),
        secret=new_secret(),
        user=user,
        status=Order.STATUS_AWAITING_PAYMENT,
        language=request.language[:8],
        contact_name=request.contact_name.strip(),
        contact_email=contact_email,
        organisation=request.organisation.strip(),
        contact_phone=request.contact_phone.strip(),
        lot_count=request.lot_count,
        window_days=request.window_days,
        starts_at=starts_at,
        ends_at=starts_at + timedelta(days=request.window_days),
        usage_mode=request.usage_mode,
        hypothesis=request.hypothesis,
        hypothesis_text=request.hypothesis_text.strip(),
        model_params_billion=valid.model_params_billion,
        model_precision=request.model_precision,
        model_workload=request.model_workload,
        model_seq_len=request.model_seq_len or MODEL_SEQ_LEN,
        model_micro_batch=request.model_micro_batch or MODEL_MICRO_BATCH,
        abort_criteria=request.abort_criteria.strip(),
        hold_expires_at=now + fairness.hold_duration(confirmed),
        contact_confirmed_at=now if confirmed else None,
        client_key=party.client_key if party else "",
        mailbox_key=fairness.mailbox_key(contact_email),
        created_at=now,
        updated_at=now,
    )
    hold = Hold(period=availability.blocked_period(starts_at, request.window_days), created_at=now)
    keys = [
        OrderSshKey(algorithm=k.algorithm, public_key=k.line, fingerprint=k.fingerprint)
        for k in valid.keys
    ]
    actor = Actor.of(user) if user else RESEARCHER
    event = OrderEvent(
        actor=actor.user,
        actor_label=actor.label[:120],
        from_status="",
        to_status=Order.STATUS_AWAITING_PAYMENT,
        created_at=now,
    )
    return order, hold, keys, event


# --------------------------------------------------------------------------- contact


def confirm_contact(order: Order, token: str, *, now: datetime | None = None) -> bool:
    """The contact address proved itself: its mails may now carry the booker's text and an
    unpaid order keeps its lots for the full hold, counted from the booking.

    Raises BookingRefused for a wrong token. True when this call confirmed it; False when
    it was confirmed already (the link used twice changes nothing). A hold that already
    ran out is not revived.
    """
    if not secrets.compare_digest(token.encode(), contact_token(order).encode()):
        raise BookingRefused({"token": [refusal("invalid_confirmation")]})
    now = now or timezone.now()
    with transaction.atomic():
        # Locks: this order's row.
        current = (
            Order.objects.select_for_update()
            .filter(pk=order.pk, contact_confirmed_at__isnull=True)
            .values("status", "created_at", "hold_expires_at")
            .first()
        )
        if current is None:
            return False
        changes: dict[str, Any] = {"contact_confirmed_at": now, "updated_at": now}
        full_hold = current["created_at"] + settings.RESERVATION_HOLD_DURATION
        if current["status"] == Order.STATUS_AWAITING_PAYMENT and current["hold_expires_at"] > now:
            changes["hold_expires_at"] = max(current["hold_expires_at"], full_hold)
        Order.objects.filter(pk=order.pk).update(**changes)
        status = current["status"]
        _record(order, status, status, RESEARCHER, "contact address confirmed")
    for field, value in changes.items():
        setattr(order, field, value)
    return True


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


def mark_paid(order: Order, *, actor: Actor, reason: str) -> bool:
    """The order's invoice settled: the order is paid and its holds become bookings.

    False (nothing changed) when the order no longer awaits payment — its hold expired or
    it was cancelled: the payment is then the operator's to accept or refund. Must run in
    the caller's transaction (the invoice's state changes with it).
    """
    if not transition(
        order,
        Order.STATUS_PAID,
        allowed_from=[Order.STATUS_AWAITING_PAYMENT],
        actor=actor,
        reason=reason,
    ):
        return False
    Hold.objects.filter(order=order, status=Hold.Status.HELD).update(status=Hold.Status.BOOKED)
    notifications.enqueue_order_mail(order, "order_paid")
    order_paid.announce(order_id=order.pk)
    return True


def reinstate_paid(order: Order, *, actor: Actor, reason: str) -> None:
    """An expired order whose payment arrived late is accepted: its window is booked again
    if enough lots are still free, and it is paid.

    Raises LotUnavailable (with the next start) when they are not — then the operator
    refunds — and InvalidTransition when the order is not expired. Must run in the caller's
    transaction (the invoice settles with it). The exclusion constraint arbitrates against
    a concurrent booking, as for any other hold.
    """
    with transaction.atomic():
        # Locks: the order's row (taken again if the caller holds it: no-op).
        current = (
            Order.objects.select_for_update().values_list("status", flat=True).get(pk=order.pk)
        )
        if current != Order.STATUS_EXPIRED:
            raise InvalidTransition(current, Order.STATUS_PAID)
        period = availability.blocked_period(order.starts_at, order.window_days)
        free = availability.free_lots(order.kind_id, order.starts_at, order.window_days)
        if order.extends_id is not None:
            # An extension continues its order on the same lots: those it held, for the
            # period it held (right after its order's blocked period), or none.
            held = Hold.objects.filter(order=order).order_by("pk")
            first = held.first()
            if first is None:
                raise LotUnavailable(None)
            period = first.period
            free = availability.free_lots_in(order.kind_id, period).filter(
                pk__in=held.values("lot_id")
            )
        # Lots locked in id order before their holds go in, as placing does (placement.py):
        # a concurrent placement then waits for the lot instead of deadlocking with us.
        lots = list(free.select_for_update(of=("self",))[: order.lot_count])
        if len(lots) < order.lot_count:
            raise LotUnavailable(None)
        try:
            with transaction.atomic():
                Hold.objects.bulk_create(
                    Hold(order=order, lot=lot, period=period, status=Hold.Status.BOOKED)
                    for lot in lots
                )
        except IntegrityError as exc:
            if not is_exclusion_violation(exc):
                raise
            raise LotUnavailable(None) from None
        transition(
            order,
            Order.STATUS_PAID,
            allowed_from=[Order.STATUS_EXPIRED],
            actor=actor,
            reason=reason,
        )
        order_paid_late.announce(order_id=order.pk)
    notifications.enqueue_order_mail(order, "order_paid")


def record_note(order: Order, *, actor: Actor, reason: str) -> None:
    """An audit entry without a state change (a refund made outside, a decision taken)."""
    current = Order.objects.values_list("status", flat=True).get(pk=order.pk)
    _record(order, current, current, actor, reason)


def _release_holds(order: Order, now: datetime) -> int:
    return Hold.objects.filter(order=order, status__in=Hold.COUNTING).update(
        status=Hold.Status.RELEASED, released_at=now
    )


def release_unpaid(order: Order, *, now: datetime, reason: str) -> bool:
    """The expiry itself: an unpaid order whose hold time has passed is expired and its
    lots released, with ``reason`` in the audit trail and the researcher mailed.

    Idempotent and race-safe: only the caller whose conditional update changes the row
    releases the holds; everyone else gets False. Called by payments.expiry.close_at_deadline
    once the chain has had its say (a payment mined in time keeps the order).
    """
    with transaction.atomic():
        expired = transition(
            order,
            Order.STATUS_EXPIRED,
            allowed_from=[Order.STATUS_AWAITING_PAYMENT],
            actor=system("expire_unpaid_holds"),
            reason=reason,
            extra_filter={"hold_expires_at__lte": now},
        )
        if expired:
            _release_holds(order, now)
            notifications.enqueue_order_mail(order, "order_expired")
            order_expired.announce(order_id=order.pk)
    return expired


CANCELLABLE = (Order.STATUS_AWAITING_PAYMENT, Order.STATUS_PAID)


def cancel_order(order: Order, *, actor: Actor, reason: str) -> None:
    """Cancel an order that has not been approved yet and free its lots.

    Raises InvalidTransition when the order is past approval (or already ended). The
    researcher is mailed the reason (an operator refusing an extension says why). Announces
    ``order_cancelled`` once the cancellation is committed: a paid order's money is then
    all to be refunded, and payments' receiver flags it (the refund flow asks the
    researcher for an address).
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
        notifications.enqueue_order_mail(order, "order_cancelled")  # with the reason
        # Its extensions not yet joined go with it (their money, if paid, is refunded; the
        # order's own mail is the researcher's word of it).
        pending = Order.objects.filter(extends=order, status__in=CANCELLABLE, joined_at=None)
        for extension in pending:
            if transition(
                extension,
                Order.STATUS_CANCELLED,
                allowed_from=CANCELLABLE,
                actor=actor,
                reason=f"the order it extends ({order.reference}) was cancelled",
            ):
                _release_holds(extension, timezone.now())
                order_cancelled.announce(order_id=extension.pk)
    order_cancelled.announce(order_id=order.pk)


# --------------------------------------------------------------------------- self-service

KEYS_CHANGEABLE = (
    Order.STATUS_AWAITING_PAYMENT,
    Order.STATUS_PAID,
    Order.STATUS_APPROVED,
    Order.STATUS_ACTIVE,
)
"""While an order's keys may still change: until its window ends (before access opens they
simply go in at the start; after, provisioning installs them on the hosts)."""
KEYS_CHANGED = "SSH keys changed"


def can_change_keys(order: Order, *, now: datetime | None = None) -> bool:
    """Whether the researcher may still change this order's SSH keys."""
    return order.status in KEYS_CHANGEABLE and (now or timezone.now()) < order.ends_at


def can_cancel(order: Order) -> bool:
    """Whether the researcher may cancel this order: before payment only (as the API says;
    after it, the operator decides and refunds)."""
    return order.status == Order.STATUS_AWAITING_PAYMENT


def change_ssh_keys(order: Order, text: str, *, actor: Actor, now: datetime | None = None) -> bool:
    """The order's SSH keys become the ones in ``text`` (parsed as at booking: OpenSSH lines
    or RFC 4716 / PuTTY blocks, converted).

    Raises BookingRefused (field ``ssh_public_keys``) for unusable keys or a private key —
    then nothing changed — and InvalidTransition once the order's window has ended or it is
    cancelled or expired. False when the keys are the same as before (nothing written).
    Otherwise the keys are replaced under the order's row lock, the order's ``updated_at``
    moves (its page shows them at once), an audit event lists the new fingerprints, and
    ``events.ssh_keys_changed`` tells provisioning after commit, which installs them on the
    hosts where access is open (from the database).
    """
    try:
        keys = parse_public_keys(text)
    except SshKeyError as exc:
        params = {"line": exc.line_number, "detail": exc.detail}
        raise BookingRefused({"ssh_public_keys": [refusal(exc.code, **params)]}) from None
    now = now or timezone.now()
    with transaction.atomic():
        # Locks: this order's row (ordered with cancelling, paying and other key changes).
        current = (
            Order.objects.select_for_update().filter(pk=order.pk).values("status", "ends_at").get()
        )
        if current["status"] not in KEYS_CHANGEABLE or now >= current["ends_at"]:
            raise KeysLocked(current["status"])
        before = set(OrderSshKey.objects.filter(order=order).values_list("fingerprint", flat=True))
        if before == {key.fingerprint for key in keys}:
            return False
        OrderSshKey.objects.filter(order=order).delete()
        OrderSshKey.objects.bulk_create(
            OrderSshKey(
                order=order, algorithm=k.algorithm, public_key=k.line, fingerprint=k.fingerprint
            )
            for k in keys
        )
        Order.objects.filter(pk=order.pk).update(updated_at=now)
        fingerprints = ", ".join(key.fingerprint for key in keys)
        _record(
            order, current["status"], current["status"], actor, f"{KEYS_CHANGED}: {fingerprints}"
        )
        order.status = current["status"]
        order.updated_at = now
        ssh_keys_changed.announce(order_id=order.pk)
    return True
