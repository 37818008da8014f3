"""What one party may hold unpaid: nobody books the whole inventory without paying for it.

An anonymous client once held 94 % of all lot-days of the booking horizon with 38 guest
orders in 3.7 s, renewing them by booking again. A *party* is everything that identifies who
is booking: the client's network address (as ``infra.clients`` reads it, behind trusted
proxies only), the contact address's mailbox (``+tags`` dropped), the signed-in account. Two
orders sharing any of these belong to one party. While a party's orders are unpaid:

- it holds at most ``RESERVATION_UNPAID_ORDERS_PER_CLIENT`` orders from one client and
  ``RESERVATION_UNPAID_ORDERS_PER_MAILBOX`` for one mailbox (or one account);
- its unpaid lot-days of one kind stay within ``RESERVATION_UNPAID_SHARE`` of that kind's
  lot-days over the booking horizon — or one lot for the longest window, where the kind is
  so small that the share would forbid any long booking;
- a guest's hold is short (``RESERVATION_UNCONFIRMED_HOLD_MINUTES``) until its contact
  address proves itself by the link mailed to it (a full payment mined before the
  deadline keeps the lots while it confirms, payments.expiry).

The check runs in the placing transaction under an advisory lock per key of the party, so
concurrent requests of one party are counted one after the other: a burst cannot pass the
limits together. Paying (or cancelling) an order frees its share at once.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, Decimal

from django.conf import settings
from django.db import connection
from django.db.models import F, Q, Sum
from django.http import HttpRequest

from accounts.models import User
from infra.clients import client_key as client_ident
from infra.identity import NotAnAddress, mailbox_of
from reservations import availability
from reservations.errors import UnpaidLimitReached
from reservations.models import WINDOW_DAYS, HardwareKind, Order


@dataclass(frozen=True)
class Party:
    """Who is placing an order, as the limits see it. ``client_key`` is a keyed hash of the
    network address (no address is stored); empty when the operator places the order."""

    client_key: str = ""
    user: User | None = None

    @classmethod
    def of_request(cls, request: HttpRequest, user: User | None = None) -> Party:
        return cls(client_key=client_key(client_ident(request)), user=user)


def client_key(ident: str) -> str:
    """A keyed hash of a client identity (infra.clients): the order keeps no address."""
    digest = hmac.new(settings.SECRET_KEY.encode(), f"client:{ident}".encode(), hashlib.sha256)
    return digest.hexdigest()[:32]


def mailbox_key(address: str) -> str:
    try:
        return mailbox_of(address)
    except NotAnAddress:
        return ""  # validation refuses it before anything is written


def lot_days_cap(kind: HardwareKind) -> int:
    """The most lot-days of ``kind`` one party may hold unpaid."""
    capacity = availability.bookable_lots(kind).count() * settings.RESERVATION_HORIZON.days
    share = (Decimal(capacity) * settings.RESERVATION_UNPAID_SHARE).to_integral_value(ROUND_CEILING)
    return max(int(share), max(WINDOW_DAYS))


def _unpaid(party: Party, mailbox: str, now: datetime) -> tuple[Q, Q]:
    """The party's unpaid, still holding orders: by client, and by mailbox or account."""
    holding = Q(status=Order.STATUS_AWAITING_PAYMENT, hold_expires_at__gt=now)
    by_client = Q(client_key=party.client_key) if party.client_key else Q(pk__in=[])
    by_mailbox = Q(mailbox_key=mailbox) if mailbox else Q(pk__in=[])
    if party.user is not None:
        by_mailbox |= Q(user=party.user)
    return holding & by_client, holding & by_mailbox


def lock(party: Party, mailbox: str) -> None:
    """Serialise the placements of one party, until the transaction ends: each key of the
    party is one advisory lock, taken in a fixed order (no deadlock between two parties
    sharing keys)."""
    keys = {f"mailbox:{mailbox}"} if mailbox else set()
    if party.client_key:
        keys.add(f"client:{party.client_key}")
    if party.user is not None:
        keys.add(f"user:{party.user.pk}")
    with connection.cursor() as cursor:
        for key in sorted(keys):
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [key])


def check(order: Order, party: Party, *, now: datetime) -> None:
    """Raise ``UnpaidLimitReached`` when ``order`` (just placed, in this transaction, under
    ``lock``) takes its party past a limit; the caller's transaction then rolls it back."""
    by_client, by_mailbox = _unpaid(party, order.mailbox_key, now)
    others = ~Q(pk=order.pk)
    limits = (
        (by_client, settings.RESERVATION_UNPAID_ORDERS_PER_CLIENT),
        (by_mailbox, settings.RESERVATION_UNPAID_ORDERS_PER_MAILBOX),
    )
    for matching, limit in limits:
        held = list(
            Order.objects.filter(matching & others).values_list("hold_expires_at", flat=True)
        )
        if len(held) >= limit:
            raise UnpaidLimitReached("unpaid_orders_limit", retry_at=min(held), limit=limit)
    same_kind = Order.objects.filter((by_client | by_mailbox) & others & Q(kind=order.kind_id))
    held_days = same_kind.aggregate(days=Sum(F("lot_count") * F("window_days")))["days"] or 0
    kind = HardwareKind.objects.get(pk=order.kind_id)
    cap = lot_days_cap(kind)
    if held_days + order.lot_count * order.window_days > cap:
        first_end = min(same_kind.values_list("hold_expires_at", flat=True), default=None)
        raise UnpaidLimitReached(
            "unpaid_share_limit", retry_at=first_end, kind=kind.name, cap=cap, held=held_days
        )


def hold_duration(confirmed: bool) -> timedelta:
    """How long a new order keeps its lots unpaid."""
    if confirmed:
        return settings.RESERVATION_HOLD_DURATION
    return min(settings.RESERVATION_UNCONFIRMED_HOLD, settings.RESERVATION_HOLD_DURATION)
