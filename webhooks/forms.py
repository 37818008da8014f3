"""The endpoint form of the account page and the desk (the services check it again)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext_lazy as _

from infra.forms import AccessibleForm
from reservations.validation import refuse_bidi_controls
from webhooks import catalogue


class EndpointForm(AccessibleForm):
    url = forms.URLField(
        label=_("URL"),
        max_length=500,
        assume_scheme="https",
        help_text=_("Where the events are posted: https:// and a public host name."),
    )
    description = forms.CharField(
        label=_("Description"),
        max_length=200,
        required=False,
        help_text=_("e.g. the lab scheduler"),
        validators=[refuse_bidi_controls],
    )
    event_types = forms.MultipleChoiceField(
        label=_("Events"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("None ticked: every event."),
    )
    enabled = forms.BooleanField(label=_("Enabled"), required=False, initial=True)

    def __init__(self, *args: Any, operator: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        events = self.fields["event_types"]
        assert isinstance(events, forms.MultipleChoiceField)
        events.choices = [
            (event.name, f"{event.name} — {event.meaning}")
            for event in catalogue.offered(operator=operator)
        ]
