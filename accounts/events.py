"""What the accounts app announces (see infra.events: delivered after commit, each receiver
on its own, a failure recorded and retried)."""

from __future__ import annotations

from infra.events import Event

address_proven = Event(
    "account.address_proven",
    meaning="A researcher signed in with the link mailed to their address, so the address is "
    "theirs; reservations gives them the guest orders placed with it "
    "(accounts.services.proven_by_link).",
    payload={"user_id": "the user's primary key"},
)
