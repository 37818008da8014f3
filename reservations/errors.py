"""Every refusal a researcher can meet while booking, in one place.

Each has a stable machine-readable code (the REST API returns it as ``code``) and a lazily
translated message (the pages show it next to the field). Services raise
``django.core.exceptions.ValidationError`` keyed by field, built from these.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Self

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

MESSAGES = {
    "required": _("This field is required."),
    "too_long": _("This is too long: at most %(limit)s characters."),
    "unknown_kind": _("This hardware kind is not offered."),
    "invalid_window": _("Choose a window of 3, 7 or 30 days."),
    "no_price": _("This kind has no price for that window yet."),
    "invalid_lot_count": _("Choose at least one lot."),
    "lot_count_above_limit": _("At most %(limit)s lots per order."),
    "bidi_control": _(
        "This text holds invisible direction controls (such as U+202E, which shows text "
        "backwards): remove them."
    ),
    "too_many_lots": _("Only %(available)s lots of this kind exist."),
    "invalid_confirmation": _("This confirmation link is not valid for this order."),
    "unpaid_orders_limit": _(
        "You already hold %(limit)s unpaid orders. Pay or cancel one of them, or wait until "
        "its hold ends, then book again."
    ),
    "unpaid_share_limit": _(
        "Unpaid orders may hold at most %(cap)s lot-days of %(kind)s at a time, and yours hold "
        "%(held)s. Pay an order you hold, or book fewer lots or a shorter window."
    ),
    "start_in_past": _("The start lies in the past."),
    "start_beyond_horizon": _("Bookings open at most %(days)s days ahead."),
    "start_not_aware": _("The start needs a time zone."),
    "unknown_environment": _("This environment is not offered."),
    "incompatible_environment": _("This environment does not run on %(kind)s."),
    "invalid_choice": _("Choose one of the offered options."),
    "invalid_email": _("Enter a valid e-mail address."),
    "invalid_params": _("Give the parameter count in billions, above 0 and at most 100000."),
    "invalid_shape": _("Give a whole number from 1 to %(top)s."),
    "invalid_precision": _("Choose one of the offered precisions."),
    "invalid_workload": _("Choose training or inference."),
    "quantised_training": _(
        "Quantised int8/int4 weights are for inference; train in fp32, bf16, fp16 or fp8."
    ),
    "checkpoints_required": _("A 30-day campaign needs defined checkpoints."),
    "abort_criteria_required": _("A 30-day campaign needs abort criteria."),
    "checkpoint_invalid": _(
        "Checkpoint %(number)s needs a date (YYYY-MM-DD) and what is checked that day."
    ),
    "checkpoint_outside_window": _(
        "Checkpoint %(number)s: choose a day within the window, %(first)s to %(last)s."
    ),
    "too_many_checkpoints": _("At most %(limit)s checkpoints."),
    "checkpoint_too_long": _(
        "Checkpoint %(number)s: say what is checked in at most %(limit)s characters."
    ),
    "campaign_not_running": _(
        "Outcomes and early-end requests are for a 30-day campaign whose window is running."
    ),
    "checkpoint_not_yet": _("This checkpoint's day has not come yet."),
    "outcome_recorded": _("The outcome of this checkpoint is already recorded."),
    "early_end_open": _("An early end is already requested; the operator will answer."),
    "ssh_key_required": _("Add at least one SSH public key."),
    "ssh_too_many_keys": _("At most 10 SSH keys per order."),
    "ssh_private_key": _(
        "This is a private key. Never share it: paste the public key (the .pub file) "
        "instead. Nothing was stored."
    ),
    "ssh_key_invalid": _("Line %(line)s is not a usable SSH public key: %(detail)s."),
    "ssh_key_weak": _("Line %(line)s: %(detail)s."),
    "lot_unavailable": _("No longer available: not enough free lots for this window."),
    "lot_unavailable_until": _(
        "Not enough free lots for this window. The earliest start with enough lots is %(day)s."
    ),
    "no_start_within_horizon": _(
        "Not enough free lots for this window within the booking horizon."
    ),
    "asset_unpriced": _("This coin cannot be priced right now; choose a stablecoin."),
    "not_awaiting_payment": _("This order is not waiting for a payment."),
    "payment_under_way": _("A payment to this invoice is already under way."),
    "chain_unreachable": _("The payment network cannot be reached right now; try again shortly."),
    "not_a_late_payment": _("Only a confirmed payment that arrived late can be accepted."),
    "nothing_to_refund": _("This invoice has nothing to refund."),
    "already_settled": _("This invoice is settled already: there is no late payment to accept."),
    "already_paid": _(
        "This order is already paid by another invoice: refund this payment instead."
    ),
    "order_cancelled": _("This order was cancelled: refund this payment instead."),
    "late_payment_short": _(
        "This late payment is less than was due: refund it, or wait until the rest is confirmed."
    ),
    "invoice_still_open": _(
        "This invoice is still open for payment: refund only once it has expired or settled."
    ),
    "invalid_tx_hash": _("A transaction hash is 0x followed by 64 hexadecimal digits."),
    "invalid_refund_address": _(
        "A refund address is 0x followed by 40 hexadecimal digits, as your wallet shows it."
    ),
    "refund_address_checksum": _(
        "The upper and lower case letters of this address do not match its checksum "
        "(EIP-55): it is probably mistyped. Copy it from your wallet again."
    ),
    "refund_address_zero": _(
        "This is the zero address: money sent there is lost. Give your wallet's address."
    ),
    "refund_address_ours": _(
        "This is one of our own addresses, not yours. Give your wallet's address."
    ),
    "refund_address_contract": _(
        "This is the address of a coin's contract, not a wallet: money sent there is lost. "
        "Give your wallet's address."
    ),
    "refund_in_flight": _(
        "A refund of this payment is on its way to %(address)s: the address can no longer change."
    ),
    "refund_address_missing": _(
        "No refund address has been given yet: the researcher was mailed to give one on the "
        "order page."
    ),
    "refund_being_verified": _(
        "A refund of this invoice is being verified on-chain: wait for its result."
    ),
    "refund_tx_used": _("This transaction is already recorded as a refund."),
    "too_many_switches": _(
        "The coin of this order was changed too often. Pay the invoice shown, or choose "
        "another coin again in %(minutes)s minutes."
    ),
    "too_many_open_invoices": _(
        "This order already has %(count)s invoices waiting for payment. Pay one of them, or "
        "choose another coin once one has expired."
    ),
    "invalid_transition": _("This order cannot go from %(current)s to %(target)s."),
    "keys_locked": _(
        "The SSH keys of this order can no longer change: its window has ended, or it was "
        "cancelled or expired."
    ),
    "not_extendable": _(
        "Only a paid order whose window has not ended can be extended (an extension is "
        "extended through its order)."
    ),
    "too_late_to_extend": _(
        "Too late to extend: an extension must be paid before the window's last hours, and "
        "these have begun."
    ),
    "extension_pending": _(
        "An extension of this order already waits for its payment or approval: pay or cancel "
        "it first."
    ),
    "lots_not_free_until": _(
        "Your lots are booked by someone else after your window: they are free only until "
        "%(free_until)s."
    ),
    "move_not_counting": _("This booking was already moved or released."),
    "move_order_ended": _("This order no longer holds lots: there is nothing to move."),
    "move_same_lot": _("The booking is already on lot %(lot)s."),
    "move_other_kind": _("Lot %(lot)s is not of this booking's hardware kind, %(kind)s."),
    "move_lot_not_active": _("Lot %(lot)s is not in service (%(status)s): it takes no bookings."),
    "move_lot_not_free": _("Lot %(lot)s is not free for this booking's whole window any more."),
    "credit_decided": _("This credit was already taken or refused."),
    "credit_window_over": _("Your window is over: this credit can be taken as money only."),
    "credit_lots_not_free": _(
        "Your lots are booked by someone else right after your window: take this credit as money."
    ),
    "credit_reason_required": _("Say why the credit is refused: the researcher is mailed it."),
}


class CodedError(ValueError):
    """A refusal from a pure function (no database); ``code`` is a key of MESSAGES."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def refusal(code: str, **params: Any) -> ValidationError:
    return ValidationError(MESSAGES[code], code=code, params=params or None)


class BookingRefused(ValidationError):
    """Bad input to a booking service; ``error_dict`` maps field names to refusals."""


class RateLimited(BookingRefused):
    """The same action too often in a while: refused (HTTP 429 in the API) with how many
    seconds until it is allowed again."""

    def __init__(self, message: Any, *, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LotUnavailable(Exception):
    """Capacity is gone for the requested window; ``next_start`` says when it is not."""

    code = "lot_unavailable"

    def __init__(self, next_start: datetime | None) -> None:
        super().__init__(str(MESSAGES[self.code]))
        self.next_start = next_start


class UnpaidLimitReached(Exception):
    """One party already holds as much unpaid as it may (reservations.fairness);
    ``retry_at`` is when its first unpaid hold ends (None: not known)."""

    def __init__(self, code: str, *, retry_at: datetime | None, **params: Any) -> None:
        super().__init__(str(MESSAGES[code]) % params)
        self.code = code
        self.retry_at = retry_at


class InvalidTransition(Exception):
    code = "invalid_transition"

    def __init__(self, current: str, target: str) -> None:
        super().__init__(str(MESSAGES[self.code] % {"current": current, "target": target}))
        self.current = current
        self.target = target


class KeysLocked(InvalidTransition):
    """An order's SSH keys cannot change any more (its window ended, or it was cancelled or
    expired)."""

    code = "keys_locked"

    def __init__(self, current: str) -> None:
        Exception.__init__(self, str(MESSAGES[self.code]))
        self.current = current
        self.target = current


class MoveRefused(Exception):
    """A booking cannot move to the lot asked for; ``message`` says why in one plain sentence,
    shown to the operator as it is.

    ``reservations.events.booking_moved`` receivers raise it to veto a move (e.g. access
    already delivered on the old lot); ``move_booking`` lets it propagate, so its transaction
    rolls back and nothing changes.
    """

    code = "move_refused"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @classmethod
    def because(cls, code: str, **params: Any) -> Self:
        """One of the refusals above, in the active language."""
        refused = cls(str(MESSAGES[code]) % params if params else str(MESSAGES[code]))
        refused.code = code
        return refused


class LotNotFree(MoveRefused):
    """The target lot has a counting hold overlapping the booking's period (the exclusion
    constraint said so, or would have)."""

    code = "move_lot_not_free"
