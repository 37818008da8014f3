"""Sign in by e-mail link, sign out, and a researcher's orders."""

from __future__ import annotations

from django import forms
from django.contrib.auth import login, logout
from django.contrib.auth.decorators import login_required
from django.core.validators import EmailValidator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.encoding import force_str
from django.utils.http import urlsafe_base64_decode
from django.utils.translation import get_language
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods, require_POST

from accounts import services
from accounts.models import User
from accounts.tokens import sign_in_tokens
from api.models import ApiToken, TooManyTokens
from config.clients import client_key
from config.forms import AccessibleForm
from config.identity import NotAnAddress, canonical_email
from config.security import no_store
from reservations.validation import refuse_bidi_controls


class SignInForm(AccessibleForm):
    email = forms.EmailField(label=_("E-mail"), max_length=254)

    def clean_email(self) -> str:
        """One address, one identity (config.identity): the form mail is delivered to."""
        try:
            return canonical_email(self.cleaned_data["email"])
        except NotAnAddress:
            raise forms.ValidationError(EmailValidator.message, code="invalid") from None


@require_http_methods(["GET", "POST"])
def sign_in(request: HttpRequest) -> HttpResponse:
    """Only validates and hands the rest to a worker: the answer is the same page, in the same
    time, for every address (existing, new, an operator's, or one that asked too often)."""
    form = SignInForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        email = form.cleaned_data["email"]
        services.request_sign_in(email, get_language() or "en", client_key(request))
        return render(request, "accounts/sign_in_sent.html", {"email": email})
    return render(request, "accounts/sign_in.html", {"form": form})


@require_http_methods(["GET", "POST"])
def sign_in_link(request: HttpRequest, uidb64: str, token: str) -> HttpResponse:
    """GET shows a button; only its POST signs in, so a mail scanner that fetches the link
    does not use it up."""
    try:
        user = User.objects.get(pk=int(force_str(urlsafe_base64_decode(uidb64))))
    except (ValueError, TypeError, OverflowError, User.DoesNotExist):
        user = None
    valid = user is not None and not user.is_staff and sign_in_tokens.check_token(user, token)
    if not valid:
        return render(request, "accounts/sign_in_invalid.html", status=400)
    if request.method == "POST":
        assert user is not None
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        services.attach_guest_orders(user)
        return redirect("accounts:orders")
    return render(request, "accounts/sign_in_confirm.html", {"email": user.email if user else ""})


@require_POST
def sign_out(request: HttpRequest) -> HttpResponse:
    logout(request)
    return redirect("reservations:landing")


class TokenForm(AccessibleForm):
    name = forms.CharField(
        label=_("Name"),
        max_length=80,
        help_text=_("e.g. the lab pipeline"),
        validators=[refuse_bidi_controls],
    )


@login_required
@no_store  # it shows a new token once: never kept by the browser or a proxy
@require_http_methods(["GET", "POST"])
def tokens(request: HttpRequest) -> HttpResponse:
    """Personal API tokens: made here, shown once, kept only as a hash, revocable."""
    form = TokenForm(request.POST or None)
    shown = None
    if request.method == "POST" and form.is_valid():
        try:
            _record, shown = ApiToken.issue(request.user, form.cleaned_data["name"])
        except TooManyTokens as exc:
            form.add_error("name", forms.ValidationError(str(exc), code=exc.code))
        else:
            form = TokenForm()
    mine = ApiToken.objects.filter(user=request.user)  # type: ignore[misc]
    return render(request, "accounts/tokens.html", {"form": form, "tokens": mine, "shown": shown})


@login_required
@require_POST
def revoke_token(request: HttpRequest, token_id: int) -> HttpResponse:
    ApiToken.objects.filter(pk=token_id, user=request.user, revoked_at__isnull=True).update(  # type: ignore[misc]
        revoked_at=timezone.now()
    )
    return redirect("accounts:tokens")


@login_required
def orders(request: HttpRequest) -> HttpResponse:
    mine = request.user.orders.select_related("kind").order_by("-created_at")  # type: ignore[union-attr]
    return render(request, "accounts/orders.html", {"orders": mine})
