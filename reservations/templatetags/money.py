"""Amounts in US dollars, written the way the page's language writes them."""

from __future__ import annotations

import re
from decimal import Context, Decimal

from django import template
from django.utils import formats
from django.utils.translation import get_language, gettext

register = template.Library()

DIGITS = Context(prec=200)
"""Enough digits for any token amount (a uint256 has 78): never rounded for display."""


@register.filter
def units(value: Decimal | None) -> str:
    """A token amount as wallets take it: a dot, no grouping, no trailing zeros."""
    if value is None:
        return ""
    text = format(Decimal(value).normalize(DIGITS), "f")
    return text


@register.filter
def usd(value: Decimal | int | float | None, places: int = 2) -> str:
    """``$1,130.00`` in English, ``1.130,00 $`` in German, ``1 130,00 $`` in French."""
    if value is None or value == "":
        return ""
    number = formats.number_format(Decimal(value), places, use_l10n=True, force_grouping=True)
    if (get_language() or "en").startswith("en"):
        return f"${number}"
    return f"{number}\u00a0$"


GB_IN_NAME = re.compile(r"(\d+(?:[.,]\d+)?)\s?GB\b")


def local_units(text: object) -> str:
    """A kind's name with its memory as the language writes it: "2× NVIDIA H200 141 Go" in
    French (the catalogue's names say "GB")."""
    return GB_IN_NAME.sub(lambda m: gettext("%(gb)s GB") % {"gb": m.group(1)}, str(text))


@register.filter
def memory_units(value: object) -> str:
    return local_units(value)
