"""The operator desk's home page, "Today": everything that waits on a person, in one place.

Each section is one query (its count) and its first items, each linking to the object or
the filtered list where the operator acts. A section empty says "nothing waiting". The
conditions are the same the services use, so an item leaves the page the moment it is
handled (an order approved, a refund confirmed, a job retried, a key accepted, …).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib import admin
from django.db.models import F, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.timezone import localtime
from django.utils.translation import gettext_lazy as _

from infra.models import FailedReaction
from payments import refund_due
from payments.models import Chain, Invoice
from provisioning import fleet
from provisioning.models import AccessGrant, ProvisioningJob
from reservations import campaign
from reservations.models import Host, Incident, Lot, Order
from webhooks import services as webhooks

SHOWN = 8
"""Items listed per section (the count and the link give the rest)."""


@dataclass(frozen=True)
class Item:
    label: str
    url: str
    detail: str = ""


@dataclass
class Section:
    key: str
    title: Any
    action: Any
    """What the operator does with these (one line)."""
    count: int = 0
    items: list[Item] = field(default_factory=list)
    all_url: str = ""


def _when(moment: datetime | None) -> str:
    return date_format(localtime(moment), "SHORT_DATETIME_FORMAT") if moment else ""


def _change(obj: Any) -> str:
    meta = obj._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])


def _changelist(app: str, model: str, query: str = "") -> str:
    url = reverse(f"admin:{app}_{model}_changelist")
    return f"{url}?{query}" if query else url


def _section(
    key: str,
    title: Any,
    action: Any,
    rows: QuerySet[Any],
    item: Callable[[Any], Item],
    all_url: str,
) -> Section:
    # One query for the rows shown and one more: a count only when there are more than that.
    shown = list(rows[: SHOWN + 1])
    return Section(
        key=key,
        title=title,
        action=action,
        count=len(shown) if len(shown) <= SHOWN else rows.count(),
        items=[item(row) for row in shown[:SHOWN]],
        all_url=all_url,
    )


def approvals() -> Section:
    rows = (
        Order.objects.filter(status=Order.STATUS_PAID)
        .select_related("kind", "extends")
        .order_by("starts_at")
    )
    return _section(
        "approvals",
        _("Paid orders awaiting approval"),
        _(
            "Approve them (or cancel with a reason): provisioning starts before each window. "
            "An extension continues its order's access when approved; until you decide, that "
            "access stays open past its end."
        ),
        rows,
        lambda o: Item(
            o.reference,
            _change(o),
            _("extension of %(reference)s: %(days)s more days, access to %(end)s")
            % {"reference": o.extends.reference, "days": o.window_days, "end": _when(o.ends_at)}
            if o.extends is not None
            else f"{o.lot_count} × {o.kind.name} · {_('starts')} {_when(o.starts_at)}",
        ),
        _changelist("reservations", "order", "status__exact=paid"),
    )


def needs_payment_decision(now: datetime) -> Q:
    """The invoices a person decides on: paid after expiry, the hold ended before the payment
    could be verified, or partly paid with nothing more for an hour."""
    stalled = now - timedelta(hours=1)
    return (
        Q(status=Invoice.STATUS_EXPIRED, exception=Invoice.EXCEPTION_PAID_LATE)
        | Q(unverified_at_expiry=True)
        | Q(
            status=Invoice.STATUS_PROCESSING,
            exception=Invoice.EXCEPTION_PAID_PARTIAL,
            created_at__lt=stalled,
        )
    ) & ~Q(status=Invoice.STATUS_INVALID)


def provisioning_in_trouble() -> Q:
    """The jobs a person looks at: failed, held by a check, or access held by the operator."""
    return (
        (
            Q(status__in=(ProvisioningJob.Status.FAILED, ProvisioningJob.Status.HELD))
            | Q(access_held=True)
        )
        & ~Q(status=ProvisioningJob.Status.REVOKED)
        # replaced by a spare: its booking is elsewhere (the incidents section shows it)
        & Q(replaced_at__isnull=True)
    )


def revocation_overdue(now: datetime) -> Q:
    """The grants whose window ended (plus the grace) with access not confirmed removed."""
    grace = timedelta(minutes=settings.DESK_REVOCATION_GRACE_MINUTES)
    return Q(closed_at__isnull=True, window_end__lt=now - grace)


def payment_decisions(now: datetime) -> Section:
    rows = (
        Invoice.objects.filter(needs_payment_decision(now))
        .select_related("order", "asset")
        .order_by("created_at")
    )

    def item(invoice: Invoice) -> Item:
        if invoice.unverified_at_expiry:
            why = _("hold ended before the payment could be verified")
        elif invoice.exception == Invoice.EXCEPTION_PAID_LATE:
            why = _("paid after expiry: accept or refund")
        else:
            why = _("partly paid, nothing more for an hour")
        seen = invoice.asset.from_units(invoice.amount_seen)
        return Item(
            f"{invoice.order.reference} · {seen} {invoice.asset.symbol}", _change(invoice), str(why)
        )

    return _section(
        "payments",
        _("Payments needing a decision"),
        _("Accept a late payment if its lots are free, or refund it."),
        rows,
        item,
        _changelist("payments", "invoice", "exception__exact=paid_late"),
    )


def refunds_due() -> Section:
    rows = refund_due.owing().select_related("order", "asset").order_by("created_at")

    def item(invoice: Any) -> Item:
        owed = invoice.asset.from_units(refund_due.owed_units(invoice))
        sending = refund_due.in_flight(invoice)
        if sending is not None:
            state = _("sent, being verified")
        elif invoice.refund_address:
            state = _("address given: send it")
        else:
            state = _("waiting for the researcher's address")
        return Item(
            f"{invoice.order.reference} · {owed} {invoice.asset.symbol}",
            _change(invoice),
            str(state),
        )

    return _section(
        "refunds",
        _("Refunds due"),
        _("Send from the operator wallet, then record the transaction's hash on the invoice."),
        rows,
        item,
        _changelist("payments", "invoice", "refund_owed=yes"),
    )


def provisioning_trouble() -> Section:
    rows = (
        ProvisioningJob.objects.filter(provisioning_in_trouble())
        .select_related("order", "lot__host")
        .order_by("created_at")
    )
    return _section(
        "provisioning",
        _("Provisioning failed or held"),
        _("Read the reason (a failed benchmark check, a host error), fix it, then retry."),
        rows,
        lambda job: Item(
            f"{job.order.reference} · {job.lot}",
            _change(job),
            (job.error.strip().splitlines() or [job.get_status_display()])[-1][:160],
        ),
        _changelist("provisioning", "provisioningjob", "status__exact=failed"),
    )


def open_incidents() -> Section:
    """Lots of orders that are not usable now: replaced by a spare being prepared, or held
    with no spare free (the time is credited either way)."""
    rows = (
        Incident.objects.filter(ended_at__isnull=True)
        .select_related("order", "lot__host", "replacement__host")
        .order_by("started_at", "pk")
    )

    def item(incident: Incident) -> Item:
        moved = (
            _("replaced by %(lot)s") % {"lot": incident.replacement}
            if incident.replacement_id
            else _("no spare free: retry, release or move it")
        )
        return Item(
            f"{incident.order.reference} · {incident.lot}",
            _change(incident.order),
            f"{incident.get_kind_display()} · {moved} · {incident.summary[:120]}",
        )

    return _section(
        "incidents",
        _("Incidents: lots not usable now"),
        _(
            "A spare is prepared where one was free; else fix the lot and retry it, or move the "
            "booking. The time lost is credited to the researcher by itself."
        ),
        rows,
        item,
        _changelist("reservations", "incident", "open=yes"),
    )


def drifting_lots() -> Section:
    """Lots whose latest acceptance figures fell below the drift share of their kind's
    median (provisioning.fleet): a card degrading across rentals."""
    health = fleet.health()
    flagged = health.flagged()
    lots = Lot.objects.filter(pk__in=flagged).select_related("host").order_by("host__name", "gpu_a")
    return Section(
        key="drift",
        title=_("Lots drifting below their kind"),
        action=_(
            "Compare the lot's acceptance over time with its kind; take it out of service if a "
            "card is degrading."
        ),
        count=len(flagged),
        items=[
            Item(str(lot), _change(lot), health.describe(flagged[lot.pk])) for lot in lots[:SHOWN]
        ],
        all_url=_changelist("reservations", "lot", "drift=yes"),
    )


def refused_host_keys() -> Section:
    rows = Host.objects.filter(ssh_host_key_refused_at__isnull=False).order_by(
        "-ssh_host_key_refused_at"
    )
    return _section(
        "host_keys",
        _("Hosts presenting a refused key"),
        _("Check the presented key out of band; accept it on the host's page only if it is right."),
        rows,
        lambda host: Item(host.name, _change(host), _when(host.ssh_host_key_refused_at)),
        _changelist("reservations", "host"),
    )


def failed_reactions() -> Section:
    """Reactions to domain events that raised (infra.events): beat retries each with backoff;
    the operator sees them from the first failure, and must act on those out of attempts."""
    rows = FailedReaction.objects.filter(resolved_at__isnull=True).order_by(
        # out of attempts (no next attempt) first, then the oldest
        F("next_attempt_at").asc(nulls_first=True),
        "created_at",
    )
    return _section(
        "failed_reactions",
        _("Reactions that failed"),
        _(
            "Mend the cause (the error says it); beat retries them, or retry now, or mark "
            "resolved what you did by hand."
        ),
        rows,
        lambda r: Item(f"{r.event} → {r.receiver.rsplit('.', 1)[-1]}", _change(r), r.state),
        _changelist("infra", "failedreaction", "resolved_at__isempty=1"),
    )


def failing_webhooks() -> Section:
    """Webhook endpoints whose last attempt failed: their deliveries are retried for about
    32 hours; an endpoint failing for WEBHOOK_DISABLE_AFTER_DAYS is turned off and its
    owner mailed."""
    return _section(
        "failing_webhooks",
        _("Webhook endpoints failing"),
        _(
            "Their deliveries are retried by themselves; the log says what the endpoint "
            "answers. Tell its owner, or turn it off."
        ),
        webhooks.failing_endpoints().select_related("owner"),
        lambda e: Item(
            f"{e.url} ({e.owner.email})",
            _change(e),
            _("failing since %(since)s") % {"since": _when(e.failing_since)},
        ),
        _changelist("webhooks", "endpoint", "enabled__exact=1&failing_since__isempty=0"),
    )


def windows(now: datetime, *, opening: bool) -> Section:
    soon = now + timedelta(hours=24)
    booked = (Order.STATUS_PAID, Order.STATUS_APPROVED, Order.STATUS_ACTIVE)
    field_name = "starts_at" if opening else "ends_at"
    rows = (
        Order.objects.filter(
            status__in=booked, **{f"{field_name}__gte": now, f"{field_name}__lt": soon}
        )
        .select_related("kind")
        .order_by(field_name)
    )
    return _section(
        "opening" if opening else "closing",
        _("Windows opening in the next 24 hours")
        if opening
        else _("Windows closing in the next 24 hours"),
        _("Access opens by itself at the start (an unapproved order does not).")
        if opening
        else _("Access is removed by itself at the end; the turnaround follows."),
        rows,
        lambda o: Item(
            o.reference,
            _change(o),
            f"{o.lot_count} × {o.kind.name} · {o.get_status_display()} · "
            f"{_when(getattr(o, field_name))}",
        ),
        _changelist("reservations", "order"),
    )


def revocations_overdue(now: datetime) -> Section:
    rows = (
        AccessGrant.objects.filter(revocation_overdue(now))
        .select_related("order", "lot")
        .order_by("window_end")
    )
    return _section(
        "revocations",
        _("Revocations overdue"),
        _("The window ended and access is not confirmed removed: the lot stays closed till it is."),
        rows,
        lambda g: Item(
            f"{g.order.reference} · {g.lot}",
            _change(g.job),  # the job's page: where the revocation is retried
            g.revoke_error.strip()[:160] or f"{_('ended')} {_when(g.window_end)}",
        ),
        _changelist("provisioning", "accessgrant", "access=open"),
    )


def chains(now: datetime) -> Section:
    late = now - timedelta(seconds=settings.PAYMENT_CHECK_DELAYED_SECONDS)
    rows = Chain.objects.filter(is_active=True).filter(
        Q(deep_reorg_at__isnull=False) | Q(last_scan_at__lt=late) | Q(last_scan_at__isnull=True)
    )

    def item(chain: Chain) -> Item:
        if chain.deep_reorg_at is not None:
            why = f"{_('deep reorganisation')}: {chain.deep_reorg_note[:140]}"
        else:
            since = _when(chain.last_scan_at) or "—"
            why = f"{_('not scanned since')} {since} {chain.last_scan_error[:100]}"
        return Item(str(chain), _change(chain), why)

    return _section(
        "chains",
        _("Payment chains needing a look"),
        _("A deep reorganisation to check, or a chain the scanner cannot read."),
        rows.order_by("name"),
        item,
        _changelist("payments", "chain"),
    )


NEXT_ACTIONS = {
    "decide_payment": _("decide on the payment"),
    "refund": _("send the refund"),
    "approve": _("approve"),
    "provisioning": _("fix provisioning, then retry"),
    "revocation": _("confirm access removed"),
}
"""What an order waits on a person for, most urgent first: the same conditions as Today's."""


def with_next_action(orders: QuerySet[Any], now: datetime | None = None) -> QuerySet[Any]:
    """``orders`` annotated with their current invoice's state and, for each of Today's
    conditions, whether it holds for the order (one subquery each, no query per row)."""
    from django.db.models import Exists, OuterRef, Subquery

    now = now or timezone.now()
    order = OuterRef("pk")
    current = Invoice.objects.filter(order=order, is_current=True)
    return orders.annotate(
        payment_status=Subquery(current.values("status")[:1]),
        payment_exception=Subquery(current.values("exception")[:1]),
        needs_decide_payment=Exists(
            Invoice.objects.filter(needs_payment_decision(now), order=order)
        ),
        needs_refund=Exists(refund_due.owing().filter(order=order)),
        needs_provisioning=Exists(
            ProvisioningJob.objects.filter(provisioning_in_trouble(), order=order)
        ),
        needs_revocation=Exists(AccessGrant.objects.filter(revocation_overdue(now), order=order)),
    )


def next_action(order: Any) -> str:
    """The key of NEXT_ACTIONS an order annotated by ``with_next_action`` waits on, or ""."""
    for key in NEXT_ACTIONS:
        if key == "approve":
            if order.status == Order.STATUS_PAID:
                return key
        elif getattr(order, f"needs_{key}"):
            return key
    return ""


def needing_action(orders: QuerySet[Any], now: datetime | None = None) -> QuerySet[Any]:
    """The orders waiting on a person for something (any of NEXT_ACTIONS)."""
    marked = with_next_action(orders, now)
    waiting = Q(status=Order.STATUS_PAID)
    for key in NEXT_ACTIONS:
        if key != "approve":
            waiting |= Q(**{f"needs_{key}": True})
    return marked.filter(waiting)


def campaigns(now: datetime) -> Section:
    """30-day campaigns waiting on the operator: early-end requests to answer, and
    checkpoints whose outcome is overdue (reservations.campaign's conditions)."""
    from django.db.models import Exists, OuterRef

    requested = campaign.open_early_end_requests().values("order")
    overdue = campaign.outcomes_overdue(now).values("order")
    # Two small reads of the ids first: an OR of two subqueries reads every order of the year.
    ids = {*requested.values_list("order", flat=True), *overdue.values_list("order", flat=True)}
    rows = (
        Order.objects.filter(pk__in=ids)
        .annotate(early_end=Exists(requested.filter(order=OuterRef("pk"))))
        .order_by("-early_end", "ends_at")
    )
    return _section(
        "campaigns",
        _("Campaigns: early-end requests and overdue outcomes"),
        _("Answer an early-end request (the order's page lists it); ask for an overdue outcome."),
        rows,
        lambda o: Item(
            o.reference,
            _change(o),
            str(_("asks to end early") if o.early_end else _("a checkpoint's outcome is overdue")),
        ),
        _changelist("reservations", "earlyendrequest", "handled_at__isempty=1"),
    )


def sections(now: datetime | None = None) -> list[Section]:
    """Today's sections, in the order the operator works through them. Failed reactions are
    an alarm, not a routine: that section shows only while one waits."""
    now = now or timezone.now()
    failures = failed_reactions()
    hooks = failing_webhooks()
    return [
        approvals(),
        payment_decisions(now),
        refunds_due(),
        provisioning_trouble(),
        open_incidents(),
        drifting_lots(),
        refused_host_keys(),
        *([failures] if failures.count else []),
        *([hooks] if hooks.count else []),
        revocations_overdue(now),
        campaigns(now),
        chains(now),
        windows(now, opening=True),
        windows(now, opening=False),
    ]


def today_view(request: HttpRequest) -> HttpResponse:
    """The admin's home page: "Today" above the usual list of models."""
    context = {
        **admin.site.each_context(request),
        "title": _("Today"),
        "sections": sections(),
        "app_list": admin.site.get_app_list(request),
    }
    return TemplateResponse(request, "admin/today.html", context)
