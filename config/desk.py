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
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, QueryDict
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.timezone import localtime
from django.utils.translation import gettext_lazy as _
from django.views.decorators.gzip import gzip_page

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
    return Section(
        key=key,
        title=title,
        action=action,
        count=rows.count(),
        items=[item(row) for row in rows[:SHOWN]],
        all_url=all_url,
    )


def approvals() -> Section:
    from reservations.models import Order

    rows = (
        Order.objects.filter(status=Order.STATUS_PAID).select_related("kind").order_by("starts_at")
    )
    return _section(
        "approvals",
        _("Paid orders awaiting approval"),
        _("Approve them (or cancel with a reason): provisioning starts before each window."),
        rows,
        lambda o: Item(
            o.reference,
            _change(o),
            f"{o.lot_count} × {o.kind.name} · {_('starts')} {_when(o.starts_at)}",
        ),
        _changelist("reservations", "order", "status__exact=paid"),
    )


def payment_decisions(now: datetime) -> Section:
    from payments.models import Invoice

    stalled = now - timedelta(hours=1)
    rows = (
        Invoice.objects.filter(
            Q(status=Invoice.STATUS_EXPIRED, exception=Invoice.EXCEPTION_PAID_LATE)
            | Q(unverified_at_expiry=True)
            | Q(
                status=Invoice.STATUS_PROCESSING,
                exception=Invoice.EXCEPTION_PAID_PARTIAL,
                created_at__lt=stalled,
            )
        )
        .exclude(status=Invoice.STATUS_INVALID)
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
    from payments import refunds

    rows = refunds.owing().select_related("order", "asset").order_by("created_at")

    def item(invoice: Any) -> Item:
        owed = invoice.asset.from_units(refunds.owed_units(invoice))
        sending = refunds.in_flight(invoice)
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
    from provisioning.models import ProvisioningJob

    rows = (
        ProvisioningJob.objects.filter(
            Q(status__in=(ProvisioningJob.Status.FAILED, ProvisioningJob.Status.HELD))
            | Q(access_held=True)
        )
        .exclude(status=ProvisioningJob.Status.REVOKED)
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


def refused_host_keys() -> Section:
    from reservations.models import Host

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


def windows(now: datetime, *, opening: bool) -> Section:
    from reservations.models import Order

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
    from provisioning.models import AccessGrant

    grace = timedelta(minutes=settings.DESK_REVOCATION_GRACE_MINUTES)
    rows = (
        AccessGrant.objects.filter(closed_at__isnull=True, window_end__lt=now - grace)
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
    from payments.models import Chain

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


def sections(now: datetime | None = None) -> list[Section]:
    now = now or timezone.now()
    return [
        approvals(),
        payment_decisions(now),
        refunds_due(),
        provisioning_trouble(),
        refused_host_keys(),
        revocations_overdue(now),
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


@gzip_page
def timeline_view(request: HttpRequest) -> HttpResponse:
    """The occupancy timeline (reservations.timeline), filtered by kind, host and range, a
    page of hosts at a time (the page links keep the filters).

    Compressed for a browser that accepts it (a page of 10 hosts over 180 days: ~570 kB of
    HTML, ~36 kB gzipped, ~4 ms to compress), this page only, not the whole site: BREACH
    needs a secret in the body and something an attacker puts in the body next to it. The
    only secret here is the CSRF token of the logout form, which Django masks afresh in
    every response, and Django pads each compressed response by a random length; nothing
    from the address is echoed but the validated filters (an unknown kind or host matches
    no lot: no page links)."""
    from reservations import timeline

    kind = request.GET.get("kind", "")
    host = request.GET.get("host", "")
    try:
        days = int(request.GET.get("days", ""))
    except ValueError:
        days = None
    ranges = (30, 90, settings.RESERVATION_HORIZON.days)
    if days not in ranges:
        days = 90
    try:
        page = int(request.GET.get("page", ""))
    except ValueError:
        page = 1
    drawn = timeline.build(kind=kind, host=host, days=days, page=page)
    first = (drawn.page - 1) * timeline.HOSTS_PER_PAGE
    # The page links carry the filters and nothing else from the request: a compressed page
    # that echoed what a link put in the address would let the sizes of the responses tell
    # what else is on the page (BREACH).
    kept = QueryDict(mutable=True)
    kept.update({name: value for name, value in (("kind", kind), ("host", host)) if value})
    kept["days"] = str(days)
    context = {
        **admin.site.each_context(request),
        "title": _("Occupancy timeline"),
        "timeline": drawn,
        "choices": timeline.filters(),
        "ranges": ranges,
        "chosen": {"kind": kind, "host": host, "days": days},
        "page_numbers": range(1, drawn.pages + 1),
        "kept": kept,
        "hosts_shown": (first + 1, first + len(drawn.groups)),
    }
    return TemplateResponse(request, "admin/timeline.html", context)
