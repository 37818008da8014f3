"""Read settings from the environment, loudly.

Tiny helpers in the manner of healthchecks: every variable the settings read goes
through one of them, so a bad value fails at start-up with its name in the message,
and ``READ`` lists every name (the documentation and docker-compose.yml are checked against it).
Secrets may also come from ``<NAME>_FILE`` (Docker/Kubernetes secrets).
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from django.core.exceptions import ImproperlyConfigured

READ: dict[str, str | None] = {}
"""Every environment variable the settings read, with its default (None: no default)."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _raw(name: str, default: str | None) -> str | None:
    READ.setdefault(name, default)
    value = os.environ.get(name)
    if value is None:
        path = os.environ.get(f"{name}_FILE")
        if path:
            value = Path(path).read_text().strip()
    return default if value is None else value


def env_str(name: str, default: str | None = None) -> str | None:
    return _raw(name, default)


def env_required(name: str, default_when: bool, default: str) -> str:
    """A value that must be set explicitly unless ``default_when`` (e.g. DEBUG) holds."""
    value = _raw(name, None)
    if value:
        return value
    if default_when:
        READ[name] = default
        return default
    raise ImproperlyConfigured(
        f"{name} must be set (or {name}_FILE pointing at a file holding it); "
        "for local development, set DJANGO_DEBUG=1 instead"
    )


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name, "1" if default else "0")
    assert value is not None
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = _raw(name, str(default))
    assert value is not None
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below its minimum {minimum}")
    return number


def env_list(name: str, default: str = "") -> list[str]:
    value = _raw(name, default) or ""
    return [item.strip() for item in value.split(",") if item.strip()]


RATE_PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
"""The periods of a rate ``N/period`` (DRF's words; DRF reads only the first letter)."""


def parse_rate(rate: str) -> tuple[int, int]:
    """``"300/minute"`` as (300, 60): at most that many in that many seconds."""
    count, _slash, period = rate.strip().partition("/")
    seconds = next((s for word, s in RATE_PERIODS.items() if word.startswith(period[:1])), None)
    if not count.isdigit() or int(count) < 1 or not period or seconds is None:
        raise ValueError(rate)
    return int(count), seconds


def env_rate(name: str, default: str) -> str:
    """A rate ``N/second``, ``/minute``, ``/hour`` or ``/day`` (checked at start-up)."""
    value = _raw(name, default) or ""
    try:
        parse_rate(value)
    except ValueError:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not a rate (use N/second, N/minute, N/hour or N/day)"
        ) from None
    return value.strip()


def env_networks(
    name: str, default: str = ""
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Comma-separated addresses or CIDR networks (``10.0.0.0/8,2001:db8::/32``)."""
    try:
        return tuple(ipaddress.ip_network(item, strict=False) for item in env_list(name, default))
    except ValueError as error:
        raise ImproperlyConfigured(f"{name}: {error}") from None


def database_from_url(url: str) -> dict[str, Any]:
    """``postgres://user:password@host:port/name?sslmode=require`` as a DATABASES entry."""
    parsed = urlparse(url)
    if parsed.scheme not in {"postgres", "postgresql"}:
        raise ImproperlyConfigured(
            f"DATABASE_URL must be a postgres:// URL, not {parsed.scheme}://"
        )
    name = unquote(parsed.path.lstrip("/"))
    if not name:
        raise ImproperlyConfigured("DATABASE_URL names no database")
    options = {key: values[-1] for key, values in parse_qs(parsed.query).items()}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        "OPTIONS": options,
    }
