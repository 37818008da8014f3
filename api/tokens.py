"""The researcher's API tokens, on the account's pages: made here, shown once, kept only as
a hash, revocable (the API's own authentication reads them: api.authentication)."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods, require_POST

from api.models import ApiToken, TooManyTokens
from infra.forms import AccessibleForm
from infra.security import no_store
from reservations.validation import refuse_bidi_controls


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
    return render(request, "api/tokens.html", {"form": form, "tokens": mine, "shown": shown})


@login_required
@require_POST
def revoke_token(request: HttpRequest, token_id: int) -> HttpResponse:
    ApiToken.objects.filter(pk=token_id, user=request.user, revoked_at__isnull=True).update(  # type: ignore[misc]
        revoked_at=timezone.now()
    )
    return redirect("tokens:index")
