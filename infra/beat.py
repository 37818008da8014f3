"""Periodic tasks run once per period however many beats send them.

``celery beat`` must run once, but a second one started by mistake (two machines each
running the compose file, a forgotten terminal) would run every periodic task twice: twice
the chain's RPC requests, twice the work. Beat's scheduler here (:class:`SlottedScheduler`,
CELERY_BEAT_SCHEDULER) marks each message with its **slot** — the number of the schedule's
period it was sent in — and a task decorated :func:`once_per_slot` claims its slot in the
database first (a unique key): the first claim runs, the second beat's message for the same
slot does nothing. A call not sent by beat (a test, the desk, a task enqueued by hand) has
no slot and always runs.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from celery import current_task, schedules
from celery.beat import PersistentScheduler, ScheduleEntry
from django.db import IntegrityError, transaction

from infra.models import BeatClaim

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])
HEADER = "beat_slot"
KEEP = 2000
"""Claims kept per task (older ones are deleted now and then)."""


def period_seconds(schedule: Any) -> float:
    """How long one period of a beat schedule is: a timedelta's length, or a crontab's
    spacing (``minute="*"``: 60 s, ``"*/5"``: 300 s, one minute an hour: 3,600 s)."""
    if isinstance(schedule, timedelta):
        return max(schedule.total_seconds(), 1.0)
    if isinstance(schedule, schedules.crontab):
        fields: Any = schedule  # the stubs leave out its parsed fields
        per_hour = len(fields.minute) * (len(fields.hour) / 24)
        return 3600.0 / max(per_hour, 1 / 24)
    if isinstance(schedule, schedules.schedule):
        every: Any = schedule
        return max(float(every.run_every.total_seconds()), 1.0)
    return 60.0


def slot_of(schedule: Any, now: float) -> int:
    return int(now // period_seconds(schedule))


class SlottedScheduler(PersistentScheduler):
    """Beat's own scheduler, which writes each message's slot into its headers."""

    def apply_async(
        self, entry: ScheduleEntry, producer: Any = None, advance: bool = True, **kwargs: Any
    ) -> Any:
        options = dict(entry.options or {})
        headers = dict(options.get("headers") or {})
        headers[HEADER] = slot_of(entry.schedule, time.time())
        entry.options = {**options, "headers": headers}
        return super().apply_async(entry, producer, advance, **kwargs)


def claim(task: str, slot: int) -> bool:
    """Whether this run is the first of ``task`` in ``slot`` (then it is recorded)."""
    try:
        with transaction.atomic():
            BeatClaim.objects.create(task=task, slot=slot)
    except IntegrityError:
        return False
    if slot % 500 == 0:  # now and then: what no beat can send again
        BeatClaim.objects.filter(task=task, slot__lt=slot - KEEP).delete()
    return True


def _slot_of_this_message() -> int | None:
    request = getattr(current_task, "request", None)
    if request is None:
        return None
    found = getattr(request, HEADER, None)
    if found is None:
        found = (getattr(request, "headers", None) or {}).get(HEADER)
    return int(found) if found is not None else None


def once_per_slot(func: F) -> F:
    """Under ``@shared_task``: a run sent by beat does nothing when its slot was claimed
    already (by the same slot's message from another beat)."""

    @functools.wraps(func)
    def run(*args: Any, **kwargs: Any) -> Any:
        slot = _slot_of_this_message()
        name = getattr(current_task, "name", None) or func.__qualname__
        if slot is not None and not claim(name, slot):
            log.info("periodic task skipped: its slot ran already", extra={"task": name})
            return None
        return func(*args, **kwargs)

    return run  # type: ignore[return-value]
