"""Events the reservations app sends, for the apps above it to react to (it imports none of
them)."""

from __future__ import annotations

from django.dispatch import Signal

booking_moved = Signal()
"""A booking moved to another lot: sent by ``reservations.inventory.move_booking`` inside its
transaction, once the old hold is released and the new one inserted, with ``sender=Hold``
and the keyword arguments ``order``, ``old_hold`` (released) and ``new_hold``.

A receiver that cannot follow the move (access already delivered on the old lot, say) raises
``reservations.errors.MoveRefused`` with a plain sentence: the move is then rolled back,
nothing of it stays, and the operator sees that sentence. Whatever a receiver writes to the
database commits or rolls back with the move.
"""

ssh_keys_changed = Signal()
"""The researcher changed an order's SSH keys: sent by ``reservations.services.change_ssh_keys``
inside its transaction, once the new keys replaced the old ones, with ``sender=Order`` and the
keyword argument ``order``. A receiver that puts the keys somewhere (provisioning: the hosts
where access is open) does so after commit, from the database, never from the signal."""
