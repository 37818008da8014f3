"""What the payments app announces (see infra.events: delivered after commit, each receiver
on its own, a failure recorded and retried). Payloads are primary keys."""

from __future__ import annotations

from infra.events import Event

refund_sent = Event(
    "refund.sent",
    meaning="The operator recorded a refund's transaction; it is verified on-chain before "
    "it counts (payments.refunds.record_refund).",
    payload={"refund_id": "the refund's primary key"},
)
invoice_exception = Event(
    "invoice.exception",
    meaning="An invoice's payment is not simply in full and on time: part of it came, more "
    "than due came, it came after the deadline, or in a coin or on a chain no longer accepted "
    "(held for the operator) (payments.settlement.recompute).",
    payload={"invoice_id": "the invoice's primary key"},
)
