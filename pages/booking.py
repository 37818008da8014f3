"""The booking pages: landing, the three booking steps and the live quote.

Views parse, call one service and render. The booking draft lives in the session until
the order is placed; nothing is written to the database before the review is confirmed.
"""

from __future__ import annotations

import hashlib
from datetime import date, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.translation import get_language
from django.views.decorators.http import require_GET, require_http_methods

from pages.forms import ContactForm, PlanForm
from payments.receipts import save_billing
from reservations import availability, fairness, notifications, services
from reservations.errors import BookingRefused, LotUnavailable, UnpaidLimitReached
from reservations.links import order_url
from reservations.models import Environment, HardwareKind, Window
from reservations.quotes import per_gpu_hour, quote
from reservations.validation import planned_checkpoints

DRAFT = "booking"
RECENT = "recent_orders"


LANDING_SECONDS = 15
"""How long the landing page's catalogue table (prices, free lots) is reused."""


def landing(request: HttpRequest) -> HttpResponse:
    """What a lot is and is not, the windows, the kinds with prices and what is free soon.

    The table is a template fragment cached per language for LANDING_SECONDS; the kinds are
    only looked up when it is rendered anew (the template calls ``kinds``).
    """
    starts_at = availability.handover(PlanForm.default_start())

    def kinds() -> list[HardwareKind]:
        free = availability.free_lot_counts(starts_at, Window.SEVEN_DAYS)
        bookable = availability.bookable_lot_counts()
        offered = list(HardwareKind.objects.filter(is_offered=True).prefetch_related("prices"))
        for kind in offered:
            kind.price_by_window = {p.window_days: p.amount_usd for p in kind.prices.all()}  # type: ignore[attr-defined]
            kind.gpu_hour_by_window = {  # type: ignore[attr-defined]
                days: per_gpu_hour(amount, days, kind.cards_per_lot)
                for days, amount in kind.price_by_window.items()  # type: ignore[attr-defined]
            }
            kind.free_lots = free.get(kind.pk, 0)  # type: ignore[attr-defined]
            kind.bookable_lots = bookable.get(kind.pk, 0)  # type: ignore[attr-defined]
        return offered

    return render(
        request,
        "pages/landing.html",
        {"kinds": kinds, "availability_start": starts_at, "cache_seconds": LANDING_SECONDS},
    )


# --------------------------------------------------------------------------- step 1: plan


@require_http_methods(["GET", "POST"])
def book_plan(request: HttpRequest) -> HttpResponse:
    draft = request.session.get(DRAFT, {})
    if request.method == "POST":
        data = request.POST.copy()
        # The quote's buttons (without JavaScript): start on the earliest free date, or switch
        # to another kind free on this one; the page comes back with the new quote.
        chosen = {"use_start": "start_date", "switch_kind": "kind"}
        for button, field in chosen.items():
            value = data.get(button)
            if isinstance(value, str) and value:
                data[field] = value
        form = PlanForm(data)
        # the no-JavaScript "update the quote", or one of the quote's buttons
        refresh_only = any(name in request.POST for name in ("refresh", *chosen))
        if form.is_valid() and not refresh_only:
            draft["plan"] = _plain(form.cleaned_data)
            request.session[DRAFT] = draft
            return redirect("pages:book_contact")
    else:
        initial = draft.get("plan") or {
            "start_date": PlanForm.default_start().isoformat(),
            "kind": request.GET.get("kind", ""),
            "window_days": request.GET.get("window", Window.SEVEN_DAYS),
        }
        form = PlanForm(initial=initial)
    return render(
        request,
        "pages/book_plan.html",
        {
            "form": form,
            "quote": _quote_from(form.data or form.initial),
            "step": 1,
            "handover_hour": settings.RESERVATION_HANDOVER_HOUR,
        },
    )


QUOTE_SECONDS = 5
"""How long one form state's quote is reused (placing the order re-checks everything)."""
QUOTE_FIELDS = (
    "kind",
    "lot_count",
    "window_days",
    "start_date",
    "environment",
    "model_params_billion",
    "model_precision",
    "model_workload",
    "model_seq_len",
    "model_micro_batch",
)


@require_GET
def book_quote(request: HttpRequest) -> HttpResponse:
    """The live part of step 1: price, availability, advice, for what the form holds now.

    Rendered fragments are shared for QUOTE_SECONDS between everyone asking about the same
    form state in the same language. A start or lot count that cannot be booked at all is
    answered 400, with the reason in the fragment (the page shows it as any other)."""
    state = "&".join(f"{name}={request.GET.get(name, '')[:40]}" for name in QUOTE_FIELDS)
    key = "quote:v3:" + hashlib.sha256(f"{get_language()}|{state}".encode()).hexdigest()
    cached = cache.get(key)
    if cached is None:
        found = _quote_from(request.GET)
        # No request: the fragment uses nothing of it, and the context processors (the
        # language links, the user, messages) were a fifth of its time.
        html = render_to_string("pages/_quote.html", {"quote": found})
        cached = (400 if found.refusals else 200, html)
        cache.set(key, cached, QUOTE_SECONDS)
    status, html = cached
    return HttpResponse(html, status=status)


def _quote_from(data: Any) -> Any:
    return quote(
        kind=str(data.get("kind") or ""),
        window_days=_int(data.get("window_days")),
        lot_count=_int(data.get("lot_count")) or 1,
        start_date=_date(data.get("start_date")),
        environment=str(data.get("environment") or ""),
        params_billion=_decimal(data.get("model_params_billion")),
        precision=str(data.get("model_precision") or ""),
        workload=str(data.get("model_workload") or ""),
        seq_len=_int(data.get("model_seq_len")),
        micro_batch=_int(data.get("model_micro_batch")),
        shared_seconds=QUOTE_SECONDS,
    )


# --------------------------------------------------------------------------- step 2: contact


@require_http_methods(["GET", "POST"])
def book_contact(request: HttpRequest) -> HttpResponse:
    draft = request.session.get(DRAFT, {})
    if "plan" not in draft:
        return redirect("pages:book_plan")
    window_days = int(draft["plan"]["window_days"])
    starts_at = availability.handover(
        _date(draft["plan"].get("start_date")) or timezone.now().date()
    )
    if request.method == "POST":
        form = ContactForm(request.POST, window_days=window_days, starts_at=starts_at)
        if form.is_valid():
            draft["contact"] = _plain(form.cleaned_data)
            request.session[DRAFT] = draft
            return redirect("pages:book_review")
        if form.refused_a_private_key():
            # Never send a private key back to the browser, not even to the same person.
            scrubbed = request.POST.copy()
            scrubbed["ssh_public_keys"] = ""
            form.data = scrubbed
    else:
        initial = draft.get("contact") or draft.get("again_contact") or _account_contact(request)
        form = ContactForm(initial=initial, window_days=window_days, starts_at=starts_at)
    return render(request, "pages/book_contact.html", {"form": form, "step": 2})


def _account_contact(request: HttpRequest) -> dict[str, str]:
    if request.user.is_authenticated:
        return {"contact_email": request.user.email, "contact_name": request.user.get_full_name()}
    return {}


# --------------------------------------------------------------------------- step 3: review


@require_http_methods(["GET", "POST"])
def book_review(request: HttpRequest) -> HttpResponse:
    draft = request.session.get(DRAFT, {})
    if "plan" not in draft:
        return redirect("pages:book_plan")
    if "contact" not in draft:
        return redirect("pages:book_contact")
    plan_form = PlanForm(draft["plan"], check_capacity=False)
    if not plan_form.is_valid():  # the draft went stale (a date passed, a price vanished)
        stale = {"form": plan_form, "step": 1, "quote": _quote_from(draft["plan"])}
        return render(request, "pages/book_plan.html", stale)
    contact = dict(draft["contact"])
    billing = {name: contact.pop(name, "") for name in ContactForm.BILLING_FIELDS}
    order_request = PlanForm.order_request(
        plan_form.cleaned_data, **contact, language=get_language() or "en"
    )
    context: dict[str, Any] = {
        "plan": plan_form.cleaned_data,
        "contact": draft["contact"],
        "kind": HardwareKind.objects.get(slug=order_request.kind),
        "environment": Environment.objects.get(slug=order_request.environment),
        "quote": _quote_from(draft["plan"]),
        "starts_at": order_request.starts_at,
        "ends_at": order_request.starts_at + timedelta(days=order_request.window_days),
        "checkpoints": planned_checkpoints(order_request)[0],
        "step": 3,
    }
    if request.method == "POST":
        user = request.user if request.user.is_authenticated else None
        try:
            party = fairness.Party.of_request(request, user)
            order = services.place_order(order_request, user=user, party=party)
        except LotUnavailable as exc:
            # The service's next start is the earliest instant; the pages book whole days.
            next_start = availability.earliest_handover(
                context["kind"],
                order_request.window_days,
                order_request.lot_count,
                order_request.starts_at,
            )
            context["taken"] = exc
            context["next_date"] = next_start.date() if next_start else None
        except BookingRefused as exc:
            context["refusals"] = exc.messages
        except UnpaidLimitReached as exc:
            context["refusals"] = [str(exc)]
        else:
            if any(billing.values()):
                save_billing(order, address=billing["billing_address"], vat_id=billing["vat_id"])
            notifications.enqueue_order_placed(order)
            del request.session[DRAFT]
            request.session[RECENT] = [order.reference, *request.session.get(RECENT, [])][:20]
            return redirect(order_url(order))
    return render(request, "pages/book_review.html", context)


@require_http_methods(["POST"])
def book_next_start(request: HttpRequest) -> HttpResponse:
    """ "Just taken": move the draft to the next free start the review page offered."""
    draft = request.session.get(DRAFT, {})
    day = _date(request.POST.get("start_date"))
    if "plan" in draft and day:
        draft["plan"]["start_date"] = day.isoformat()
        request.session[DRAFT] = draft
    return redirect("pages:book_review")


# --------------------------------------------------------------------------- parsing


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """Cleaned form data as the session can keep it (JSON)."""
    plain: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, date):
            plain[key] = value.isoformat()
        elif isinstance(value, Decimal):
            plain[key] = str(value)
        elif value is not None:
            plain[key] = value
    return plain


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _date(value: Any) -> date | None:
    try:
        return date.fromisoformat(str(value))
    except (TypeError, ValueError):
        return None


def _decimal(value: Any) -> Decimal | None:
    try:
        number = Decimal(str(value))
    except (InvalidOperation, TypeError, ValueError):
        return None
    return number if number.is_finite() and number > 0 else None
