"""Domain events: how an app tells the apps above it what happened, without importing them.

An app defines the events it sends in its own ``events.py`` (``reservations.events``,
``provisioning.events``), each an :class:`Event` with its name, its meaning and its payload;
:func:`catalogue` lists them all. The one service that makes the change announces it
(``order_paid.announce(order_id=...)``); an app above connects its receivers in its
``AppConfig.ready()`` (its ``receivers.py``), as pretix does with ``pretix.base.signals``.
A new reaction (a webhook, a metric, a mail) is a new receiver, never an edit of the sender.

What a receiver can rely on:

- **After commit.** An event announced inside a transaction is delivered once it commits
  (``transaction.on_commit``), and not at all if it rolls back: a receiver never acts on a
  change that did not happen, and it can never undo the sender's change. Announced with no
  transaction of the application's open, it is delivered at once. (A test case's wrapping
  transaction, which is never committed, does not count as one: Django treats it the same
  way for ``atomic(durable=True)``.)
- **Primary keys and plain values**, never model instances: a receiver reads what it needs
  from the database, as it is when it runs.
- **Each receiver on its own.** One that raises does not stop the others. Its failure is
  logged and recorded (:class:`infra.models.FailedReaction`); beat's
  ``infra.tasks.retry_failed_reactions`` calls that receiver again with the same payload,
  with backoff, up to ``MAX_ATTEMPTS``; then the operator is mailed and the desk's Today
  lists it until someone marks it resolved. So receivers are idempotent: doing again what
  was done already changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.core.mail import mail_admins
from django.db import DatabaseError, transaction
from django.utils import timezone
from django.utils.module_loading import import_string

from infra.models import FailedReaction

log = logging.getLogger(__name__)

Receiver = Callable[..., Any]
"""A module-level function taking the payload as keyword arguments (and ``**_`` for the
``sender``, the Event): a retry finds it again by its dotted path."""

_CATALOGUE: dict[str, Event] = {}


class Event:
    """Something that happened in the sending app, for the apps above it to react to."""

    def __init__(self, name: str, *, meaning: str, payload: Mapping[str, str]) -> None:
        if name in _CATALOGUE:
            raise ValueError(f"event {name!r} is defined twice")
        self.name = name
        self.meaning = meaning
        self.payload = dict(payload)
        """Each keyword argument's name and what it is."""
        self._receivers: dict[str, Receiver] = {}
        _CATALOGUE[name] = self

    def __repr__(self) -> str:
        return f"<Event {self.name}>"

    def connect(self, receiver: Receiver, *, dispatch_uid: str) -> None:
        """Call ``receiver`` for every delivery (once, however often ``ready()`` runs)."""
        if "<locals>" in receiver.__qualname__:
            raise ValueError("a receiver must be a module-level function (a retry imports it)")
        self._receivers.setdefault(dispatch_uid, receiver)

    def receiver(self, *, dispatch_uid: str) -> Callable[[Receiver], Receiver]:
        """As a decorator: ``@order_paid.receiver(dispatch_uid="...")`` connects the function."""

        def connect(receiver: Receiver) -> Receiver:
            self.connect(receiver, dispatch_uid=dispatch_uid)
            return receiver

        return connect

    def receivers(self) -> list[str]:
        """The dotted paths of the receivers connected now, in the order they run."""
        return [receiver_path(receiver) for receiver in self._receivers.values()]

    def announce(self, **payload: Any) -> None:
        """Tell the receivers, after the current transaction commits (at once outside one).

        ``payload`` must be exactly the event's documented keys, with plain values."""
        if set(payload) != set(self.payload):
            raise TypeError(f"{self.name} carries {sorted(self.payload)}, not {sorted(payload)}")
        if in_application_transaction():
            transaction.on_commit(lambda: self.deliver(payload))
        else:
            self.deliver(payload)

    def deliver(self, payload: Mapping[str, Any]) -> None:
        """Call every receiver now, each on its own; record each failure for a retry (logged
        here once, not also mailed: beat retries it, and mails when it is out of attempts)."""
        for receiver in list(self._receivers.values()):
            try:
                receiver(sender=self, **payload)
            except Exception as exc:  # recorded and retried, never lost
                failed(self, receiver, dict(payload), exc)


def catalogue() -> dict[str, Event]:
    """Every event the apps define, by name (after the apps are loaded)."""
    return dict(_CATALOGUE)


def in_application_transaction() -> bool:
    """Whether a transaction of the application's own is open on the default database."""
    blocks = transaction.get_connection().atomic_blocks
    return any(not block._from_testcase for block in blocks)


def receiver_path(receiver: Receiver) -> str:
    return f"{receiver.__module__}.{receiver.__qualname__}"


MAX_ATTEMPTS = 8
"""Deliveries of one failed reaction before the operator is asked to look (about 4 hours)."""


def next_attempt(attempts: int, now: datetime) -> datetime:
    """When a reaction that failed ``attempts`` times is tried again: 1, 2, 4 … 128 min."""
    return now + timedelta(minutes=2 ** min(attempts - 1, 7))


def failed(event: Event, receiver: Receiver, payload: dict[str, Any], exc: Exception) -> None:
    """Log and record a receiver's failure, for beat to retry (never swallowed)."""
    path = receiver_path(receiver)
    log.error(
        "a receiver of %s failed; it will be retried",
        event.name,
        exc_info=exc,
        extra={"event": event.name, "receiver": path, "payload": payload},
    )
    now = timezone.now()
    try:
        FailedReaction.objects.create(
            event=event.name,
            receiver=path,
            payload=payload,
            error=f"{type(exc).__name__}: {exc}"[:2000],
            attempts=1,
            next_attempt_at=next_attempt(1, now),
            created_at=now,
        )
    except DatabaseError:  # the log line above is then the only record
        log.critical("a failed reaction could not be recorded", extra={"receiver": path})


CLAIM = timedelta(minutes=10)
"""How long a retry holds a failed reaction before another beat may take it again."""


def retry_failed(*, now: datetime | None = None, limit: int = 100) -> int:
    """Beat: call again each failed reaction that is due; returns how many succeeded.

    Each is claimed first by a conditional update (its ``next_attempt_at`` moved ahead), so
    two beats never run it at once. Success marks it resolved; another failure counts an
    attempt and waits longer; the last attempt leaves it to the operator, who is mailed."""
    now = now or timezone.now()
    due = FailedReaction.objects.filter(resolved_at__isnull=True, next_attempt_at__lte=now)
    succeeded = 0
    for reaction in due.order_by("next_attempt_at", "pk")[:limit]:
        mine = FailedReaction.objects.filter(
            pk=reaction.pk, resolved_at__isnull=True, next_attempt_at=reaction.next_attempt_at
        ).update(next_attempt_at=now + CLAIM)
        if mine:
            succeeded += _retry(reaction, now)
    return succeeded


def _retry(reaction: FailedReaction, now: datetime) -> bool:
    attempts = reaction.attempts + 1
    event = _CATALOGUE.get(reaction.event)
    try:
        if event is None:
            raise LookupError(f"no event {reaction.event!r} is defined any more")
        receiver: Receiver = import_string(reaction.receiver)
        receiver(sender=event, **reaction.payload)
    except Exception as exc:  # recorded, and tried again or left to the operator
        last = attempts >= MAX_ATTEMPTS
        FailedReaction.objects.filter(pk=reaction.pk).update(
            attempts=attempts,
            error=f"{type(exc).__name__}: {exc}"[:2000],
            next_attempt_at=None if last else next_attempt(attempts, now),
        )
        log.error(
            "a receiver of %s failed again (attempt %d)",
            reaction.event,
            attempts,
            exc_info=exc,
            extra={"receiver": reaction.receiver, "payload": reaction.payload},
        )
        if last:
            mail_admins(
                f"A reaction to {reaction.event} failed {attempts} times",
                f"{reaction.receiver}({reaction.payload}) failed {attempts} times; the last "
                f"time with {type(exc).__name__}: {exc}.\n\nIt is listed on the desk's Today "
                "page: mend the cause, then retry it there or mark it resolved.",
                fail_silently=True,
            )
        return False
    FailedReaction.objects.filter(pk=reaction.pk).update(
        attempts=attempts, resolved_at=now, resolution=f"delivered on attempt {attempts}"
    )
    return True


def retry_now(reaction_ids: list[int]) -> int:
    """The operator's "retry now": due at once (also those that waited for the operator)."""
    return FailedReaction.objects.filter(pk__in=reaction_ids, resolved_at__isnull=True).update(
        next_attempt_at=timezone.now()
    )


def resolve(reaction_ids: list[int], *, by: str) -> int:
    """The operator dealt with these by hand: they are not retried any more."""
    return FailedReaction.objects.filter(pk__in=reaction_ids, resolved_at__isnull=True).update(
        resolved_at=timezone.now(), next_attempt_at=None, resolution=f"resolved by {by}"[:200]
    )
