"""How reservations reacts to what happened below it (infra.events): connected when this
module is imported, from ReservationsConfig.ready(). Each receiver is idempotent."""

from __future__ import annotations

from accounts.events import address_proven
from accounts.models import User
from infra.identity import NotAnAddress, canonical_email
from reservations.models import Order


@address_proven.receiver(dispatch_uid="reservations: give a proven address its guest orders")
def attach_guest_orders(*, user_id: int, **_: object) -> int:
    """The guest orders placed with the (now proven) address become the account's."""
    try:
        email = canonical_email(User.objects.get(pk=user_id).email)
    except NotAnAddress:
        return 0
    # Exactly the canonical form (infra.identity): never a look-alike's orders.
    return Order.objects.filter(user__isnull=True, contact_email=email).update(user_id=user_id)
