"""The booking steps' forms. They parse and type; the rules are the services' (validation)."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.functional import lazy
from django.utils.safestring import mark_safe
from django.utils.text import format_lazy
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from infra.forms import AccessibleForm
from payments.forms import address_field, vat_id_field
from reservations import availability
from reservations.errors import MESSAGES, refusal
from reservations.models import (
    CHECK_LIMIT,
    MAX_CHECKPOINTS,
    MAX_MICRO_BATCH,
    MAX_SEQ_LEN,
    MODEL_MICRO_BATCH,
    MODEL_SEQ_LEN,
    Environment,
    HardwareKind,
    Hypothesis,
    Precision,
    UsageMode,
    Window,
    Workload,
)
from reservations.quotes import per_gpu_hour
from reservations.templatetags.money import local_units, usd
from reservations.validation import (
    MAX_LOT_COUNT,
    TEXT_LIMITS,
    Errors,
    OrderRequest,
    catalogue_refusals,
    checkpoint_days,
    contact_errors,
    plan_errors,
)

FIELD_FOR = {"starts_at": "start_date"}
"""Where a service's refusal is shown when the form names the field differently."""


def add_refusals(form: forms.Form, errors: Errors) -> None:
    for name, found in errors.items():
        field = FIELD_FOR.get(name, name)
        for error in found:
            form.add_error(field if field in form.fields else None, error)


def capacity_refusals(request: OrderRequest) -> Errors:
    """Too many lots asked for, or too few free for the window (with the next start)."""
    kind = HardwareKind.objects.get(slug=request.kind)
    bookable = availability.bookable_lots(kind).count()
    if request.lot_count > bookable:
        return {"lot_count": [refusal("too_many_lots", available=bookable)]}
    free = availability.free_lots(kind, request.starts_at, request.window_days).count()
    if free >= request.lot_count:
        return {}
    next_start = availability.earliest_handover(
        kind, request.window_days, request.lot_count, request.starts_at
    )
    if next_start is None:
        return {"starts_at": [refusal("no_start_within_horizon")]}
    return {"starts_at": [refusal("lot_unavailable_until", day=date_format(next_start.date()))]}


def _blank(label: str) -> list[tuple[str, str]]:
    return [("", label)]


def kind_label(kind: HardwareKind) -> str:
    """A hardware choice: the kind (with its memory) and its lowest price per GPU-hour."""
    rates = [
        per_gpu_hour(p.amount_usd, p.window_days, kind.cards_per_lot) for p in kind.prices.all()
    ]
    if not rates:
        return local_units(kind.name)
    return gettext("%(kind)s · from %(rate)s per GPU-hour") % {
        "kind": local_units(kind.name),
        "rate": usd(min(rates)),
    }


class EnvironmentSelect(forms.Select):
    """The environments, each option saying which kinds it runs on (``data-kinds``), so the
    page can offer only those of the chosen kind."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.runs_on: dict[str, list[str]] = {}
        self.chosen_kind = ""

    def create_option(self, name: str, value: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        option = super().create_option(name, value, *args, **kwargs)
        kinds = self.runs_on.get(str(value))
        if kinds is not None:
            option["attrs"]["data-kinds"] = " ".join(kinds)
            if self.chosen_kind and self.chosen_kind not in kinds:
                option["attrs"]["disabled"] = True
        return option


class PlanForm(AccessibleForm):
    """Step 1: what is booked, when, and the question it should answer."""

    kind = forms.ChoiceField(label=_("Hardware"), widget=forms.RadioSelect)
    lot_count = forms.IntegerField(
        label=_("Number of lots (two cards each)"),
        min_value=1,
        max_value=MAX_LOT_COUNT,
        initial=1,
        error_messages={
            "max_value": lazy(
                lambda: str(MESSAGES["lot_count_above_limit"]) % {"limit": MAX_LOT_COUNT}, str
            )(),
        },
    )
    window_days = forms.TypedChoiceField(
        label=_("Window"),
        choices=Window.choices,
        coerce=int,
        widget=forms.RadioSelect,
        initial=Window.SEVEN_DAYS,
    )
    start_date = forms.DateField(
        label=_("Start date"),
        widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
        input_formats=["%Y-%m-%d"],
    )
    environment = forms.ChoiceField(label=_("Environment"), widget=EnvironmentSelect)
    usage_mode = forms.ChoiceField(
        label=_("How the two cards are used"),
        choices=UsageMode.choices,
        widget=forms.RadioSelect,
        initial=UsageMode.DISTRIBUTED,
    )
    hypothesis = forms.ChoiceField(
        label=_("Your hypothesis"), choices=Hypothesis.choices, widget=forms.RadioSelect
    )
    hypothesis_text = forms.CharField(
        label=_("In your words"),
        required=False,
        max_length=TEXT_LIMITS["hypothesis_text"],
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("What result would confirm or refute it?"),
    )
    model_params_billion = forms.DecimalField(
        label=_("Parameters (billions)"),
        required=False,
        min_value=Decimal("0.001"),
        max_value=Decimal("100000"),
        decimal_places=3,
        localize=False,
        widget=forms.NumberInput(attrs={"step": "any", "inputmode": "decimal"}),
    )
    model_precision = forms.ChoiceField(
        label=_("Precision"), required=False, choices=_blank("—") + list(Precision.choices)
    )
    model_workload = forms.ChoiceField(
        label=_("Training or inference"),
        required=False,
        choices=_blank("—") + list(Workload.choices),
    )
    model_seq_len = forms.IntegerField(
        label=_("Sequence length (tokens)"),
        required=False,
        min_value=1,
        max_value=MAX_SEQ_LEN,
        localize=False,
        help_text=_(
            "Tokens per sample (empty: 2048). The acceptance benchmark shapes its model with "
            "it, with the parameter count and precision."
        ),
        widget=forms.NumberInput(attrs={"placeholder": str(MODEL_SEQ_LEN), "inputmode": "numeric"}),
    )
    model_micro_batch = forms.IntegerField(
        label=_("Micro-batch per card"),
        required=False,
        min_value=1,
        max_value=MAX_MICRO_BATCH,
        localize=False,
        help_text=_("Samples per card and step (empty: 1)."),
        widget=forms.NumberInput(
            attrs={"placeholder": str(MODEL_MICRO_BATCH), "inputmode": "numeric"}
        ),
    )

    def __init__(self, *args: Any, check_capacity: bool = True, **kwargs: Any) -> None:
        """``check_capacity``: also refuse when too few lots are free (the plan step does;
        the review leaves that to placing the order, which says "just taken")."""
        super().__init__(*args, **kwargs)
        self.check_capacity = check_capacity
        kinds = list(HardwareKind.objects.filter(is_offered=True).prefetch_related("prices"))
        self.fields["kind"].choices = [(k.slug, kind_label(k)) for k in kinds]  # type: ignore[attr-defined]
        environments = list(
            Environment.objects.filter(is_offered=True).prefetch_related("compatible_kinds")
        )
        runs_on = {e.slug: sorted(k.slug for k in e.compatible_kinds.all()) for e in environments}
        self.fields["environment"].choices = [  # type: ignore[attr-defined]
            (e.slug, e.name) for e in environments
        ]
        widget = self.fields["environment"].widget
        widget.runs_on = runs_on
        chosen = str(self.data.get("kind") or self.initial.get("kind") or "")
        # What does not run on the chosen kind is offered disabled (the page re-enables it
        # when the kind changes); placing the order refuses it in any case.
        widget.chosen_kind = chosen if chosen in {k.slug for k in kinds} else ""
        today = timezone.now().date()
        widget = self.fields["start_date"].widget
        widget.attrs["min"] = today.isoformat()
        widget.attrs["max"] = (today + settings.RESERVATION_HORIZON).isoformat()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        request = self.order_request(data)
        errors, _params = plan_errors(request, timezone.now())
        errors.update(catalogue_refusals(request))
        if not errors and self.check_capacity:
            errors.update(capacity_refusals(request))
        add_refusals(self, errors)
        return data

    @staticmethod
    def order_request(data: dict[str, Any], **contact: Any) -> OrderRequest:
        start: date = data["start_date"]
        fields = {
            "kind": data["kind"],
            "lot_count": data["lot_count"],
            "window_days": data["window_days"],
            "starts_at": availability.handover(start),
            "environment": data["environment"],
            "usage_mode": data["usage_mode"],
            "hypothesis": data["hypothesis"],
            "hypothesis_text": data.get("hypothesis_text") or "",
            "model_params_billion": data.get("model_params_billion"),
            "model_precision": data.get("model_precision") or "",
            "model_workload": data.get("model_workload") or "",
            "model_seq_len": data.get("model_seq_len"),
            "model_micro_batch": data.get("model_micro_batch"),
            "contact_name": "",
            "contact_email": "",
            "ssh_public_keys": "",
        }
        fields.update(contact)
        return OrderRequest(**fields)

    @staticmethod
    def default_start() -> date:
        """Tomorrow: the earliest day whose handover is surely ahead while the plan is
        filled in; today in the local demo, whose windows for today start within minutes."""
        now = timezone.now()
        if settings.DEMO_MODE:
            return availability.first_bookable_day(now)
        return now.date() + timedelta(days=1)


class CheckpointRows(forms.Widget):
    """Up to MAX_CHECKPOINTS rows of a day and what is checked then, each input labelled;
    the rows beyond the first two fold away until used. Its value: one dict a row."""

    template_name = "pages/_checkpoint_rows.html"

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[dict[str, str]]:
        return [
            {
                "date": str(data.get(f"{name}-{n}-date", "")),
                "check": str(data.get(f"{name}-{n}-check", "")),
            }
            for n in range(1, MAX_CHECKPOINTS + 1)
        ]

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return False

    def get_context(self, name: str, value: Any, attrs: Any) -> dict[str, Any]:
        context = super().get_context(name, value, attrs)
        entries = [e for e in value if isinstance(e, dict)] if isinstance(value, list) else []
        rows = []
        for n in range(1, MAX_CHECKPOINTS + 1):
            entry = entries[n - 1] if n <= len(entries) else {}
            rows.append(
                {"number": n, "date": entry.get("date", ""), "check": entry.get("check", "")}
            )
        context["rows"] = rows
        context["shown"], context["folded"] = rows[:2], rows[2:]
        context["folded_open"] = any(row["date"] or row["check"] for row in rows[2:])
        context["check_limit"] = CHECK_LIMIT
        context["invalid"] = context["widget"]["attrs"].get("aria-invalid") == "true"
        return context

    def render(self, name: str, value: Any, attrs: Any = None, renderer: Any = None) -> Any:
        # The project's templates, not the form renderer's (it sees only the apps' own).
        context = self.get_context(name, value, attrs)
        return mark_safe(render_to_string(self.template_name, context))  # noqa: S308


class CheckpointsField(forms.Field):
    """The campaign's checkpoints as the rules want them (validation.planned_checkpoints):
    ``[{"date": "YYYY-MM-DD", "check": "…"}]``, the empty rows left out."""

    widget = CheckpointRows

    def to_python(self, value: Any) -> list[dict[str, str]]:
        rows = value if isinstance(value, list) else []
        entries = []
        for row in rows:
            if not isinstance(row, dict):
                continue
            day, check = str(row.get("date") or "").strip(), str(row.get("check") or "").strip()
            if day or check:
                entries.append({"date": day, "check": check})
        return entries


class ContactForm(AccessibleForm):
    """Step 2: who books, how they log in; for 30 days, the campaign's plan; optionally,
    what the receipt needs for accounting (BILLING_FIELDS: kept by payments, not the order)."""

    BILLING_FIELDS = ("billing_address", "vat_id")

    contact_name = forms.CharField(label=_("Name"), max_length=TEXT_LIMITS["contact_name"])
    contact_email = forms.EmailField(label=_("E-mail"), max_length=TEXT_LIMITS["contact_email"])
    organisation = forms.CharField(
        label=_("Organisation"), required=False, max_length=TEXT_LIMITS["organisation"]
    )
    contact_phone = forms.CharField(
        label=_("Phone or messenger (optional)"),
        required=False,
        max_length=TEXT_LIMITS["contact_phone"],
    )
    ssh_public_keys = forms.CharField(
        label=_("SSH public keys"),
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "autocomplete": "off"}),
        help_text=_("One per line, as in ~/.ssh/id_ed25519.pub. Never paste a private key."),
    )
    billing_address = address_field()
    vat_id = vat_id_field()
    checkpoints = CheckpointsField(
        label=_("Checkpoints"),
        error_messages={"required": MESSAGES["checkpoints_required"]},
        help_text=format_lazy(
            _(
                "At least one, at most {limit}: a day within the window and what you will "
                "have measured by then. You get a reminder the day before and record the "
                "outcome on the order page."
            ),
            limit=MAX_CHECKPOINTS,
        ),
    )
    abort_criteria = forms.CharField(
        label=_("Abort criteria"),
        max_length=TEXT_LIMITS["abort_criteria"],
        error_messages={"required": MESSAGES["abort_criteria_required"]},
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("What result ends the campaign early."),
    )

    def __init__(
        self,
        *args: Any,
        window_days: int,
        starts_at: datetime | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.window_days = window_days
        self.starts_at = starts_at or timezone.now()
        if window_days != Window.THIRTY_DAYS:
            del self.fields["checkpoints"]
            del self.fields["abort_criteria"]
        else:
            first, last = checkpoint_days(self.starts_at)
            widget = self.fields["checkpoints"].widget
            widget.attrs.update(min=first.isoformat(), max=last.isoformat())

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        request = OrderRequest(
            kind="",
            lot_count=1,
            window_days=self.window_days,
            starts_at=self.starts_at,
            environment="",
            usage_mode="",
            hypothesis="",
            contact_name=data.get("contact_name", ""),
            contact_email=data.get("contact_email", ""),
            organisation=data.get("organisation", ""),
            contact_phone=data.get("contact_phone", ""),
            ssh_public_keys=data.get("ssh_public_keys", ""),
            checkpoints=data.get("checkpoints") or [],
            abort_criteria=data.get("abort_criteria", ""),
        )
        errors, _keys = contact_errors(request)
        # Fields the form already refused (and so left out of ``data``) keep that one error.
        add_refusals(
            self, {name: found for name, found in errors.items() if name not in self.errors}
        )
        return data

    def refused_a_private_key(self) -> bool:
        return any(
            isinstance(error, ValidationError) and error.code == "ssh_private_key"
            for error in self.errors.as_data().get("ssh_public_keys", [])
        )
