"""What the provisioning app announces (see infra.events: delivered after commit, each
receiver on its own, a failure recorded and retried). Payloads are primary keys."""

from __future__ import annotations

from infra.events import Event

LOT = {"order_id": "the order's primary key", "job_id": "the lot's provisioning job"}

order_approved = Event(
    "order.approved",
    meaning="A paid order was approved: one provisioning job per booked lot, prepared from "
    "its preparation lead on (provisioning.services.approve_order).",
    payload={"order_id": "the order's primary key"},
)
report_ready = Event(
    "report.ready",
    meaning="A lot's validation report is stored (passed, failed or crashed: the report says; "
    "a failed acceptance holds the lot) (provisioning.services._run_steps, the fetch_report "
    "step of run_job).",
    payload=LOT,
)
access_opened = Event(
    "access.opened",
    meaning="SSH access to a lot is open: the order's keys are on the host, inside its window "
    "(provisioning.services._open_access, the last step of run_job).",
    payload=LOT,
)
access_closed = Event(
    "access.closed",
    meaning="A lot's access is removed from its host at the window's end (or once overdue), "
    "confirmed on the host (provisioning.services.revoke_lot: at the window's end, for "
    "cancellations, and on a replaced lot).",
    payload=LOT,
)
lot_held = Event(
    "lot.held",
    meaning="A lot stopped before delivery because its validation failed or crashed (or its "
    "cards were not the ones seen); it waits for the operator to release it or retry "
    "(provisioning.services._hold).",
    payload=LOT,
)
access_closing_soon = Event(
    "access.closing_soon",
    meaning="An active order's window ends within PROVISIONING_REMINDER_HOURS; the researcher "
    "is mailed once (provisioning.services.remind_before_end).",
    payload={"order_id": "the order's primary key"},
)
lot_replaced = Event(
    "lot.replaced",
    meaning="A lot that failed (its acceptance, or its cards during the window) was replaced: "
    "the booking moved to a spare lot of the same kind, which is prepared and validated; the "
    "failed lot's access is closed and it goes to maintenance "
    "(provisioning.replacement.replace).",
    payload={**LOT, "replacement_job_id": "the replacement lot's provisioning job"},
)
