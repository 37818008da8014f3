"""Template context every page needs: the language switcher's links, and whether this is
the local demo (``DEMO_MODE``, said on every page)."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from django.urls import translate_url
from django.utils.translation import get_language


def languages(request: HttpRequest) -> dict[str, object]:
    current = get_language()
    return {
        "language_links": [
            {
                "code": code,
                "name": name,
                "url": translate_url(request.get_full_path(), code),
                "current": code == current,
            }
            for code, name in settings.LANGUAGES
        ],
        "demo_mode": settings.DEMO_MODE,
        "demo_start_minutes": settings.DEMO_START_MINUTES,
    }
