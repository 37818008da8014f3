"""Every change to webhooks goes through here: the pages, the desk, the API and the tasks
call these functions and nothing else writes the tables.

A delivery is claimed by a conditional update (a lease), posted, and its attempt recorded;
a failure is retried from the database by beat (``queue_due``) on RETRY_SCHEDULE, with the
same ``webhook-id`` each time; an endpoint failing for WEBHOOK_DISABLE_AFTER_DAYS is turned
off and its owner mailed (``disable_failing``)."""

from __future__ import annotations

import json
import logging
import random
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, models, transaction
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from accounts.models import User
from infra.mail import send_templated
from webhooks import catalogue, signing, transport
from webhooks.models import Attempt, Delivery, Endpoint, Message

log = logging.getLogger(__name__)

RETRY_SCHEDULE = (
    timedelta(seconds=5),
    timedelta(minutes=5),
    timedelta(minutes=30),
    timedelta(hours=2),
    timedelta(hours=5),
    timedelta(hours=10),
    timedelta(hours=14),
)
"""The wait after each failed attempt (±10 % jitter): eight attempts over about 32 hours."""
JITTER = 0.1
REQUEUE_AFTER = timedelta(minutes=5)
"""A due delivery enqueued this long ago and still pending lost its broker message: beat
enqueues it again (a second task for it is harmless: the lease lets one post)."""
ROTATION_OVERLAP = timedelta(hours=24)


def lease() -> timedelta:
    """How long a worker holds a delivery it is posting: the timeout and a margin."""
    return timedelta(seconds=settings.WEBHOOK_TIMEOUT_SECONDS + 30)


# --------------------------------------------------------------------------- endpoints


def _refused(field: str, code: str, message: str) -> ValidationError:
    return ValidationError({field: [ValidationError(message, code=code)]})


def check_endpoint(
    owner: User,
    *,
    url: str,
    event_types: list[str],
    all_orders: bool,
    endpoint: Endpoint | None = None,
) -> list[str]:
    """What an endpoint may be, checked as the service saves it (a form or serializer may
    check first, but cannot skip this): returns the event types in catalogue order."""
    if all_orders and not owner.is_staff:
        raise _refused(
            "all_orders", "operators_only", _("Only an operator's endpoint hears of every order.")
        )
    allowed = {event.name for event in catalogue.offered(operator=all_orders)}
    unknown = sorted(set(event_types) - allowed)
    if unknown:
        raise _refused(
            "event_types",
            "unknown_event_type",
            _("Not an event this endpoint can receive: %(names)s.") % {"names": ", ".join(unknown)},
        )
    mine = Endpoint.objects.filter(owner=owner)
    if endpoint is None and mine.count() >= settings.WEBHOOK_MAX_ENDPOINTS:
        raise _refused(
            "url",
            "too_many_endpoints",
            _("You have %(count)d endpoints, the most there may be: delete one first.")
            % {"count": settings.WEBHOOK_MAX_ENDPOINTS},
        )
    try:  # last: it asks the DNS
        transport.target(url)
    except transport.EndpointRefused as exc:
        raise _refused("url", exc.code, str(exc)) from exc
    return [event.name for event in catalogue.EVENT_TYPES if event.name in event_types]


def create_endpoint(
    owner: User,
    *,
    url: str,
    event_types: list[str],
    description: str = "",
    enabled: bool = True,
    all_orders: bool = False,
) -> tuple[Endpoint, str]:
    """A new endpoint and its secret, which is shown this once (kept only sealed)."""
    with transaction.atomic():
        User.objects.select_for_update().filter(pk=owner.pk).first()  # one count at a time
        chosen = check_endpoint(owner, url=url, event_types=event_types, all_orders=all_orders)
        secret = signing.new_secret()
        endpoint = Endpoint.objects.create(
            owner=owner,
            url=url,
            event_types=chosen,
            description=description,
            enabled=enabled,
            all_orders=all_orders,
            secret_sealed=signing.seal(secret),
        )
    return endpoint, secret


def update_endpoint(endpoint: Endpoint, **changes: Any) -> Endpoint:
    """Change the URL, events, description or enabled; turned on again, what was pending
    is due at once and the failure count starts over."""
    unknown = set(changes) - {"url", "event_types", "description", "enabled", "all_orders"}
    if unknown:
        raise TypeError(f"not an endpoint's editable field: {sorted(unknown)}")
    merged = {
        "url": changes.get("url", endpoint.url),
        "event_types": changes.get("event_types", endpoint.event_types),
        "all_orders": changes.get("all_orders", endpoint.all_orders),
    }
    changes["event_types"] = check_endpoint(endpoint.owner, endpoint=endpoint, **merged)
    with transaction.atomic():
        turned_on = changes.get("enabled") is True and not endpoint.enabled
        if turned_on:
            changes.update(failing_since=None, disabled_reason="")
            Delivery.objects.filter(endpoint=endpoint, status=Delivery.Status.PENDING).update(
                next_attempt_at=timezone.now(), queued_at=None
            )
        Endpoint.objects.filter(pk=endpoint.pk).update(**changes)
    endpoint.refresh_from_db()
    return endpoint


def rotate_secret(endpoint: Endpoint, *, overlap: timedelta = ROTATION_OVERLAP) -> str:
    """A new secret, shown this once; the old one also signs for ``overlap`` (both
    signatures are sent), so a receiver can switch without missing a delivery."""
    secret = signing.new_secret()
    Endpoint.objects.filter(pk=endpoint.pk).update(
        secret_sealed=signing.seal(secret),
        previous_secret_sealed=endpoint.secret_sealed,
        previous_secret_until=timezone.now() + overlap,
    )
    endpoint.refresh_from_db()
    return secret


def delete_endpoint(endpoint: Endpoint) -> None:
    endpoint.delete()  # its deliveries and attempts go with it


def signing_secrets(endpoint: Endpoint, now: datetime) -> list[str]:
    found = [signing.unseal(endpoint.secret_sealed)]
    if endpoint.previous_secret_sealed and (endpoint.previous_secret_until or now) > now:
        found.append(signing.unseal(endpoint.previous_secret_sealed))
    return found


# --------------------------------------------------------------------------- messages


def envelope(event_type: str, data: dict[str, Any], at: datetime) -> dict[str, Any]:
    """What every delivery's body is (Standard Webhooks' shape): type, timestamp, data."""
    return {
        "type": event_type,
        "timestamp": at.isoformat().replace("+00:00", "Z"),
        "api_version": catalogue.API_VERSION,
        "data": data,
    }


def recipients(event_type: str, owner_id: int | None) -> models.QuerySet[Endpoint]:
    """The enabled endpoints that hear of this event about an order of ``owner_id``: the
    owner's own, and the operators'. An operators' event goes to operators only."""
    wanted = models.Q(event_types=[]) | models.Q(event_types__contains=[event_type])
    operators = models.Q(all_orders=True, owner__is_staff=True)
    heard = operators
    if owner_id is not None and not catalogue.BY_NAME[event_type].operators_only:
        heard |= models.Q(owner_id=owner_id, all_orders=False)
    return Endpoint.objects.filter(wanted, heard, enabled=True, owner__is_active=True)


def fan_out(
    event_type: str,
    key: str,
    data: dict[str, Any],
    *,
    order_id: int | None,
    owner_id: int | None,
    now: datetime | None = None,
) -> Message | None:
    """One message for what happened (``key``, once however often a receiver runs) and a
    delivery for each endpoint that hears of it, each enqueued after commit."""
    now = now or timezone.now()
    endpoints = list(recipients(event_type, owner_id).values_list("pk", flat=True))
    if not endpoints:
        return None
    try:
        with transaction.atomic():
            message = Message.objects.create(
                event_type=event_type,
                key=key[:120],
                order_id=order_id,
                payload=envelope(event_type, data, now),
                created_at=now,
            )
            _deliver_to(message, endpoints, now)
    except IntegrityError:  # already sent: a retried receiver
        return Message.objects.filter(key=key[:120]).first()
    return message


def _deliver_to(message: Message, endpoint_ids: list[int], now: datetime) -> list[int]:
    made = Delivery.objects.bulk_create(
        Delivery(
            message=message,
            endpoint_id=pk,
            next_attempt_at=now,
            queued_at=now,
            created_at=now,
        )
        for pk in endpoint_ids
    )
    ids = [delivery.pk for delivery in made]
    transaction.on_commit(lambda: _enqueue(ids))
    return ids


def _enqueue(delivery_ids: list[int], *, by_hand: bool = False) -> None:
    # The tasks' module imports this one: its task is looked up when first queued (as
    # provisioning.services.enqueue_job does).
    from webhooks.tasks import deliver

    for pk in delivery_ids:
        try:
            deliver.delay(pk, by_hand=by_hand)
        except Exception:  # the broker away: beat finds the row (queue_due)
            log.warning("a webhook delivery could not be enqueued", exc_info=True)
            return


def send_test(endpoint: Endpoint) -> Delivery:
    """A ``webhook.test`` event to this endpoint alone, delivered like any other."""
    now = timezone.now()
    data = {"endpoint": endpoint.public_id, "description": endpoint.description}
    with transaction.atomic():
        message = Message.objects.create(
            event_type=catalogue.TEST_EVENT,
            key=f"test:{endpoint.pk}:{now.timestamp()}:{random.random()}",  # noqa: S311
            payload=envelope(catalogue.TEST_EVENT, data, now),
            created_at=now,
        )
        (pk,) = _deliver_to(message, [endpoint.pk], now)
    return Delivery.objects.get(pk=pk)


def redeliver(delivery: Delivery) -> bool:
    """ "Redeliver": one more attempt now, whatever the delivery's state (the same id)."""
    now = timezone.now()
    with transaction.atomic():
        done = Delivery.objects.filter(pk=delivery.pk, endpoint__enabled=True).update(
            status=Delivery.Status.PENDING, next_attempt_at=now, queued_at=now, leased_until=None
        )
        if done:
            transaction.on_commit(lambda: _enqueue([delivery.pk], by_hand=True))
    return bool(done)


# --------------------------------------------------------------------------- delivering


def _wait(attempts: int) -> timedelta | None:
    """The wait after ``attempts`` failed attempts, or None when the schedule is spent."""
    if attempts > len(RETRY_SCHEDULE):
        return None
    base = RETRY_SCHEDULE[attempts - 1]
    return base * random.uniform(1 - JITTER, 1 + JITTER)  # noqa: S311


FAILING_PROBE_MIN = timedelta(seconds=5)
FAILING_PROBE_MAX = timedelta(minutes=10)
"""How long a delivery to a failing endpoint waits while another one is being tried there:
as long as the endpoint has been failing, within these bounds."""


def endpoint_busy_failing(endpoint: Endpoint, delivery_id: int, now: datetime) -> bool:
    """Whether ``endpoint`` is failing and another of its deliveries is being posted now."""
    if endpoint.failing_since is None:
        return False
    others = Delivery.objects.filter(
        endpoint=endpoint, status=Delivery.Status.PENDING, leased_until__gt=now
    )
    return others.exclude(pk=delivery_id).exists()


def deliver(delivery_id: int, *, by_hand: bool = False, now: datetime | None = None) -> bool:
    """Post a due delivery once (claimed first, so two workers never post it at once) and
    record what came of it. Returns whether this call delivered it."""
    now = now or timezone.now()
    found = Delivery.objects.select_related("endpoint", "message").filter(pk=delivery_id).first()
    if found is None or not found.endpoint.enabled:
        return False
    held_until = now + lease()
    free = models.Q(leased_until__isnull=True) | models.Q(leased_until__lt=now)
    if endpoint_busy_failing(found.endpoint, delivery_id, now) and not by_hand:
        # A failing endpoint gets one attempt at a time: the others wait (no attempt
        # counted), so an endpoint that hangs never holds more than one worker thread.
        failing = now - (found.endpoint.failing_since or now)
        pause = min(max(failing, FAILING_PROBE_MIN), FAILING_PROBE_MAX)
        Delivery.objects.filter(
            free, pk=delivery_id, status=Delivery.Status.PENDING, next_attempt_at__lte=now
        ).update(next_attempt_at=now + pause, queued_at=None)
        return False
    claimed = (
        Delivery.objects.filter(free, pk=delivery_id, status=Delivery.Status.PENDING)
        .filter(next_attempt_at__lte=now)
        .update(leased_until=held_until)
    )
    if not claimed:
        return False
    endpoint, message = found.endpoint, found.message
    body = json.dumps(message.payload, separators=(",", ":"), ensure_ascii=False).encode()
    # The signature's timestamp is the real time (receivers refuse an old one); the log and
    # the schedule follow this call's clock (``now``: a test's simulated one).
    headers = signing.headers(
        signing_secrets(endpoint, now),
        message.public_id,
        int(timezone.now().timestamp()),
        body,
    )
    answer = transport.post(endpoint.url, body, headers)
    ok = answer.status is not None and 200 <= answer.status < 300
    attempts = found.attempts + 1
    wait = None if ok else _wait(attempts)
    finished = now + timedelta(milliseconds=answer.duration_ms)
    with transaction.atomic():
        Attempt.objects.create(
            delivery_id=delivery_id,
            number=attempts,
            started_at=now,
            duration_ms=answer.duration_ms,
            status_code=answer.status,
            response=answer.body,
            error=answer.error,
            by_hand=by_hand,
        )
        if ok:
            status, next_at = Delivery.Status.DELIVERED, None
        elif wait is None:
            status, next_at = Delivery.Status.FAILED, None
        else:
            status, next_at = Delivery.Status.PENDING, finished + wait
        Delivery.objects.filter(pk=delivery_id, leased_until=held_until).update(
            status=status,
            attempts=attempts,
            next_attempt_at=next_at,
            queued_at=None,
            leased_until=None,
        )
        mine = Endpoint.objects.filter(pk=endpoint.pk)
        if ok:
            mine.filter(failing_since__isnull=False).update(failing_since=None)
        else:
            mine.filter(failing_since__isnull=True).update(failing_since=now)
    if not ok:
        log.info(
            "webhook delivery failed",
            extra={"delivery": delivery_id, "status": answer.status, "error": answer.error},
        )
    return ok


def queue_due(*, now: datetime | None = None, limit: int = 1000) -> int:
    """Beat: enqueue what is due — retries whose time came, and deliveries whose task was
    lost (a broker message gone, a worker killed mid-post: its lease ran out)."""
    now = now or timezone.now()
    free = models.Q(leased_until__isnull=True) | models.Q(leased_until__lt=now)
    unqueued = models.Q(queued_at__isnull=True) | models.Q(queued_at__lt=now - REQUEUE_AFTER)
    due = Delivery.objects.filter(
        free,
        unqueued,
        status=Delivery.Status.PENDING,
        next_attempt_at__lte=now,
        endpoint__enabled=True,
    )
    ids = list(due.order_by("next_attempt_at").values_list("pk", flat=True)[:limit])
    if ids:
        Delivery.objects.filter(pk__in=ids).update(queued_at=now)
        _enqueue(ids)
    return len(ids)


def failing_endpoints(now: datetime | None = None) -> models.QuerySet[Endpoint]:
    """Enabled endpoints whose last attempt failed, longest failing first (the desk's Today)."""
    return Endpoint.objects.filter(enabled=True, failing_since__isnull=False).order_by(
        "failing_since"
    )


def disable_failing(*, now: datetime | None = None) -> int:
    """Beat: an endpoint failing for WEBHOOK_DISABLE_AFTER_DAYS is turned off and its owner
    mailed; turned on again, what is still pending follows."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.WEBHOOK_DISABLE_AFTER_DAYS)
    turned_off = 0
    for endpoint in Endpoint.objects.filter(enabled=True, failing_since__lt=cutoff).select_related(
        "owner"
    ):
        since = endpoint.failing_since.isoformat() if endpoint.failing_since else "?"
        reason = _("failing since %(since)s") % {"since": since}
        language = settings.LANGUAGE_CODE
        with transaction.atomic(), translation.override(language):
            if not Endpoint.objects.filter(pk=endpoint.pk, enabled=True).update(
                enabled=False, disabled_reason=reason[:200]
            ):
                continue
            # Mailed before the change commits: a mail server away leaves it on for the
            # next run, never off without its owner told.
            path = reverse("webhooks:endpoint", args=[endpoint.public_id])
            send_templated(
                "webhook_disabled",
                {
                    "endpoint": endpoint,
                    "days": settings.WEBHOOK_DISABLE_AFTER_DAYS,
                    "link": settings.SITE_URL + path,
                },
                endpoint.owner.email,
                language,
            )
        turned_off += 1
    return turned_off
