"""Brute-force protection of password sign-in (the operators' admin login), with django-axes.

Failed attempts are counted per (address, e-mail address) pair: after ``AXES_FAILURE_LIMIT``
failures the pair is locked out for ``AXES_COOLOFF_MINUTES`` (each further try restarts the
cool-off), the right password included, and the answer is the page
``admin/locked_out.html`` with status 429. ``manage.py axes_reset`` (or
``axes_reset_username <address>``) lifts a lockout at once. Researchers sign in with
one-time e-mail links, which do not go through a password and are not counted here.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from infra.clients import client_address
from infra.identity import NotAnAddress, canonical_email


def username(request: HttpRequest, credentials: dict[str, Any] | None) -> str | None:
    """The address an attempt names, in the canonical form sign-in compares
    (``infra.identity``): ``Operator@Example.org`` and ``operator@example.org`` count as
    one, as they are one account."""
    field = str(getattr(settings, "AXES_USERNAME_FORM_FIELD", "username"))
    given = (credentials or {}).get(field) or request.POST.get(field)
    if not given:
        return None
    try:
        return canonical_email(str(given))
    except NotAnAddress:
        return str(given).strip().lower()


def locked_out(
    request: HttpRequest, original_response: HttpResponse | None, credentials: Any
) -> HttpResponse:
    """The answer to a locked-out attempt: a page that says why and for how long (429)."""
    minutes = max(1, int(settings.AXES_COOLOFF_TIME.total_seconds() // 60))
    context = {"failure_limit": settings.AXES_FAILURE_LIMIT, "minutes": minutes}
    return render(request, "admin/locked_out.html", context, status=429)


def client_ip(request: HttpRequest) -> str | None:
    """The client's address as every other limit reads it (``infra.clients``: the peer, or
    behind a trusted proxy the forwarded client), so a lockout is per client even behind a
    reverse proxy, and a made-up X-Forwarded-For changes nothing."""
    address = client_address(request)
    return None if address is None else str(address)
