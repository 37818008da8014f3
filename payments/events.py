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
