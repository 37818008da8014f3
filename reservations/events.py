"""What the reservations app announces, for the apps above it to react to (it imports none
of them). Receivers connect in their own AppConfig.ready(); see infra.events for how an
:class:`~infra.events.Event` is delivered (after commit, each receiver on its own, a failure
recorded and retried).

Every payload is primary keys: a receiver reads the rows it needs as they are when it runs.
"""

from __future__ import annotations

from django.dispatch import Signal

from infra.events import Event

ORDER = {"order_id": "the order's primary key"}

order_placed = Event(
    "order.placed",
    meaning="An order was placed and holds its lots, awaiting payment "
    "(reservations.services.place_order).",
    payload=ORDER,
)
order_paid = Event(
    "order.paid",
    meaning="An order awaiting payment is paid: its invoice settled, or the operator accepted "
    "a payment; its holds are bookings now (reservations.services.mark_paid).",
    payload=ORDER,
)
order_paid_late = Event(
    "order.paid_late",
    meaning="An expired order whose payment came late was accepted by the operator: its "
    "window is booked again and it is paid (reservations.services.reinstate_paid).",
    payload=ORDER,
)
order_cancelled = Event(
    "order.cancelled",
    meaning="An order was cancelled before approval and its lots released; if it was paid, "
    "its money is all to be refunded (reservations.services.cancel_order).",
    payload=ORDER,
)
order_expired = Event(
    "order.expired",
    meaning="An unpaid order's hold ended without a payment that keeps it: the order expired "
    "and its lots are released (reservations.services.release_unpaid).",
    payload=ORDER,
)
order_extension_placed = Event(
    "order.extension_placed",
    meaning="An extension of a paid order was placed: an order of its own, holding the same "
    "lots directly after the order's window, awaiting payment "
    "(reservations.extensions.place_extension).",
    payload=ORDER,
)
order_extended = Event(
    "order.extended",
    meaning="An approved extension's days were added to its order's window on the same lots: "
    "the order ends later, its access continues (reservations.extensions.join).",
    payload={**ORDER, "extension_id": "the extension's primary key (an order of its own)"},
)
incident_opened = Event(
    "lot.incident_opened",
    meaning="A lot of an order is not usable: its acceptance benchmark failed (or a reading "
    "of its cards went outside the kind's limits); the booking moves to a spare where one is "
    "free, and the time lost is credited once the incident ends "
    "(reservations.incidents.open_incident).",
    payload={**ORDER, "incident_id": "the incident's primary key"},
)
order_credited = Event(
    "order.credited",
    meaning="An incident ended and the time it took from the order's window is credited, "
    "pro rata to what the order paid for the lot, with no claim to file: offered as time "
    "or money, the researcher chooses (reservations.incidents.credit_for).",
    payload={**ORDER, "credit_id": "the credit's primary key"},
)
credit_decided = Event(
    "credit.decided",
    meaning="A credit was taken as time (the window ends later on the same lots), as money "
    "(owed back in the order's coin) or refused by the operator with a reason; its status "
    "says which (reservations.incidents.decide).",
    payload={**ORDER, "credit_id": "the credit's primary key"},
)
ssh_keys_changed = Event(
    "order.ssh_keys_changed",
    meaning="The researcher replaced an order's SSH keys; provisioning installs them where "
    "access is open (reservations.services.change_ssh_keys).",
    payload=ORDER,
)

booking_moved = Signal()
"""Not an announcement but a question, asked **inside** the move's transaction: a booking
moves to another lot (``reservations.inventory.move_booking``, once the old hold is released
and the new one inserted), with ``sender=Hold`` and the keyword arguments ``order``,
``old_hold`` (released) and ``new_hold``.

A receiver that cannot follow the move (access already delivered on the old lot, say) raises
``reservations.errors.MoveRefused`` with a plain sentence: the move is then rolled back,
nothing of it stays, and the operator sees that sentence. Whatever a receiver writes to the
database commits or rolls back with the move.
"""
