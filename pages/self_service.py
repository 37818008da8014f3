"""The order page's self-service: cancelling before payment and changing the SSH keys.

Both are POST forms on the order page's link (the link is the key to the order), each
calling the same service as the API (``services.cancel_order``, ``services.change_ssh_keys``).
A refusal renders the order page again with the form's errors (its view, unchanged; the
forms reach the template through ``request``, see templatetags/self_service.py).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from infra.forms import AccessibleForm
from pages.forms import add_refusals
from pages.order_page import order_page
from reservations import services
from reservations.errors import BookingRefused, InvalidTransition, refusal
from reservations.links import order_by_link, order_url
from reservations.validation import refuse_bidi_controls

FORMS = "self_service_forms"
"""The request attribute that carries bound forms with errors back to the order page."""
DONE = {
    "cancelled": gettext_lazy("Your order is cancelled and its lots are released."),
    "keys": gettext_lazy("Your SSH keys are changed."),
    "same": gettext_lazy("These are the keys you have already: nothing changed."),
}
"""What the order page says after a change (``?done=``), next to the forms: a notice only,
it changes nothing."""
PAGE_REASON = "cancelled by the researcher on the order page"


class CancelForm(AccessibleForm):
    reason = forms.CharField(
        label=gettext_lazy("Reason (optional)"),
        required=False,
        max_length=2000,
        validators=[refuse_bidi_controls],
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=gettext_lazy("For the operator; you may leave it empty."),
    )
    confirm = forms.BooleanField(
        label=gettext_lazy("Yes, cancel this order and release its lots"),
        help_text=gettext_lazy("Nothing has been paid, so nothing is charged."),
        error_messages={
            "required": gettext_lazy("Tick this box to cancel: without it nothing happens.")
        },
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, auto_id="cancel_%s", **kwargs)


class KeysForm(AccessibleForm):
    ssh_public_keys = forms.CharField(
        label=gettext_lazy("SSH public keys"),
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "autocomplete": "off"}),
        help_text=gettext_lazy(
            "One per line, as in ~/.ssh/id_ed25519.pub, or the block PuTTYgen saves as its "
            "public key. These replace the keys you have now. Never paste a private key."
        ),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, auto_id="keys_%s", **kwargs)

    def refused_a_private_key(self) -> bool:
        return any(
            error.code == "ssh_private_key"
            for error in self.errors.as_data().get("ssh_public_keys", [])
        )


def _done(url: str, what: str) -> HttpResponse:
    return redirect(f"{url}?done={what}#self-service")


def _page_again(request: HttpRequest, reference: str, secret: str, **bound: Any) -> HttpResponse:
    setattr(request, FORMS, bound)
    return order_page(request, order_by_link(reference, secret), status=400, fresh=True)


@require_POST
def cancel(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """Cancel an order before payment, after the researcher ticked the confirmation."""
    order = order_by_link(reference, secret)
    form = CancelForm(request.POST)
    if form.is_valid():
        if not services.can_cancel(order):
            form.add_error(None, refusal("not_awaiting_payment"))
        else:
            reason = form.cleaned_data["reason"].strip() or PAGE_REASON
            try:
                services.cancel_order(
                    order, actor=services.actor_on_link(request.user, order), reason=reason
                )
            except InvalidTransition:
                form.add_error(None, refusal("not_awaiting_payment"))
            else:
                return _done(order_url(order), "cancelled")
    return _page_again(request, reference, secret, cancel_form=form)


@require_POST
def change_keys(request: HttpRequest, reference: str, secret: str) -> HttpResponse:
    """Replace the order's SSH keys (installed on the hosts if access is open already)."""
    order = order_by_link(reference, secret)
    form = KeysForm(request.POST)
    if form.is_valid():
        try:
            changed = services.change_ssh_keys(
                order,
                form.cleaned_data["ssh_public_keys"],
                actor=services.actor_on_link(request.user, order),
            )
        except BookingRefused as exc:
            add_refusals(form, exc.error_dict)
        except InvalidTransition as exc:
            form.add_error(None, str(exc))
        else:
            return _done(order_url(order), "keys" if changed else "same")
    if form.refused_a_private_key():
        # Never send a private key back to the browser, not even to the same person.
        scrubbed = request.POST.copy()
        scrubbed["ssh_public_keys"] = ""
        form.data = scrubbed
    return _page_again(request, reference, secret, keys_form=form)
