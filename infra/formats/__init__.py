"""The project's date formats, where Django's own are not what the language writes.

French writes the first of the month as an ordinal, "1er décembre 2026", and every other day
as a cardinal, "2 décembre 2026". Django's format characters have no French ordinal: its
``S`` gives the English suffixes ("st", "nd", …). ``install`` makes ``S`` French while
French is active — "er" on the 1st, nothing on other days — and the French formats below
use ``jS``. The other languages' formats do not use ``S``; in English it is unchanged.
"""

from __future__ import annotations

from django.utils import dateformat
from django.utils.translation import get_language

_english_suffix = dateformat.DateFormat.S


def _suffix(self: dateformat.DateFormat) -> str:
    if (get_language() or "").startswith("fr"):
        return "er" if getattr(self.data, "day", None) == 1 else ""
    return _english_suffix(self)


def install() -> None:
    """Called once at start-up (infra's AppConfig.ready)."""
    dateformat.DateFormat.S = _suffix  # type: ignore[method-assign]
