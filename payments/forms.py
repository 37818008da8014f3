"""The billing details a receipt is made out to (the contact step reuses these fields)."""

from __future__ import annotations

from django import forms
from django.utils.translation import gettext_lazy as _

from infra.forms import AccessibleForm
from payments.models import BILLING_LIMITS, VAT_ID
from reservations.validation import refuse_bidi_controls


def organisation_field() -> forms.CharField:
    return forms.CharField(
        label=_("Organisation on the receipt"),
        required=False,
        max_length=BILLING_LIMITS["organisation"],
        validators=[refuse_bidi_controls],
        help_text=_("Empty: the organisation you gave when booking."),
    )


def address_field() -> forms.CharField:
    return forms.CharField(
        label=_("Billing address (optional)"),
        required=False,
        max_length=BILLING_LIMITS["address"],
        validators=[refuse_bidi_controls],
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "street-address"}),
        help_text=_("Printed on your receipt, e.g. for a university's accounting."),
    )


def vat_id_field() -> forms.CharField:
    return forms.CharField(
        label=_("VAT id (optional)"),
        required=False,
        max_length=BILLING_LIMITS["vat_id"],
        validators=[VAT_ID, refuse_bidi_controls],
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )


class BillingForm(AccessibleForm):
    """On the order page: whom the receipt is made out to, changeable at any time. Its
    fields are prefixed (``billing-…``): the page carries other forms beside it."""

    prefix = "billing"
    organisation = organisation_field()
    address = address_field()
    vat_id = vat_id_field()
