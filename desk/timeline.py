"""The desk's occupancy timeline: who is on which lot, when (reservations.timeline draws it)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse, QueryDict
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _
from django.views.decorators.gzip import gzip_page

from reservations import timeline


@gzip_page
def timeline_view(request: HttpRequest) -> HttpResponse:
    """The occupancy timeline (reservations.timeline), filtered by kind, host and range, a
    page of hosts at a time (the page links keep the filters).

    Compressed for a browser that accepts it (a page of 10 hosts over 180 days: ~570 kB of
    HTML, ~36 kB gzipped, ~4 ms to compress), this page only, not the whole site: BREACH
    needs a secret in the body and something an attacker puts in the body next to it. The
    only secret here is the CSRF token of the logout form, which Django masks afresh in
    every response, and Django pads each compressed response by a random length; nothing
    from the address is echoed but the validated filters (an unknown kind or host matches
    no lot: no page links)."""
    kind = request.GET.get("kind", "")
    host = request.GET.get("host", "")
    try:
        days = int(request.GET.get("days", ""))
    except ValueError:
        days = None
    ranges = (30, 90, settings.RESERVATION_HORIZON.days)
    if days not in ranges:
        days = 90
    try:
        page = int(request.GET.get("page", ""))
    except ValueError:
        page = 1
    drawn = timeline.build(kind=kind, host=host, days=days, page=page)
    first = (drawn.page - 1) * timeline.HOSTS_PER_PAGE
    # The page links carry the filters and nothing else from the request: a compressed page
    # that echoed what a link put in the address would let the sizes of the responses tell
    # what else is on the page (BREACH).
    kept = QueryDict(mutable=True)
    kept.update({name: value for name, value in (("kind", kind), ("host", host)) if value})
    kept["days"] = str(days)
    context = {
        **admin.site.each_context(request),
        "title": _("Occupancy timeline"),
        "timeline": drawn,
        "choices": timeline.filters(),
        "ranges": ranges,
        "chosen": {"kind": kind, "host": host, "days": days},
        "page_numbers": range(1, drawn.pages + 1),
        "kept": kept,
        "hosts_shown": (first + 1, first + len(drawn.groups)),
    }
    return TemplateResponse(request, "admin/timeline.html", context)
