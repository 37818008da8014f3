"""Site-wide error pages in the visitor's language."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """A forged or replayed form post: refuse, change nothing, explain how to go on."""
    return render(request, "403_csrf.html", status=403)
