"""Sign in by e-mail link, sign out, and a researcher's orders."""

from __future__ import annotations

from django import forms
from django.contrib.auth import login, logout
from django.contrib.auth.decorators import login_required
from django.core.validators import EmailValidator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.encoding import force_str
from django.utils.http import urlsafe_base64_decode
from django.utils.translation import get_language
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods, require_POST

from accounts import services
from accounts.models import User
from accounts.tokens import sign_in_tokens
from infra.clients import client_key
from infra.forms import AccessibleForm
from infra.identity import NotAnAddress, canonical_email


class SignInForm(AccessibleForm):
    email = forms.EmailField(label=_("E-mail"), max_length=254)

    def clean_email(self) -> str:
        """One address, one identity (infra.identity): the form mail is delivered to."""
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
        services.proven_by_link(user)
        return redirect("accounts:orders")
    return render(request, "accounts/sign_in_confirm.html", {"email": user.email if user else ""})


@require_POST
def sign_out(request: HttpRequest) -> HttpResponse:
    logout(request)
    return redirect("pages:landing")


@login_required
def orders(request: HttpRequest) -> HttpResponse:
    mine = request.user.orders.select_related("kind").order_by("-created_at")  # type: ignore[union-attr]
    return render(request, "accounts/orders.html", {"orders": mine})
