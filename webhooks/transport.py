"""One POST to an endpoint, safely: the name is resolved here and every address it gives
must be public (no loopback, private, link-local, metadata or other reserved address) unless
WEBHOOK_ALLOW_PRIVATE_ADDRESSES is on, and the connection goes to the address that was
checked, so a name that changes its answer between the check and the connection (DNS
rebinding) cannot reach inside. Redirects are not followed; the whole exchange is cut at
WEBHOOK_TIMEOUT_SECONDS; the answer is read no further than RESPONSE_LIMIT bytes."""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import urllib3
from django.conf import settings
from django.utils.translation import gettext_lazy as _
from urllib3.exceptions import HTTPError, TimeoutError

RESPONSE_LIMIT = 64 * 1024
"""The most of an answer that is read (the log keeps its first EXCERPT bytes)."""
EXCERPT = 1024
USER_AGENT = "gpulots-webhooks/1"


class EndpointRefused(ValueError):
    """A URL that may not receive webhooks, with a sentence saying why and a stable code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str
    address: str


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def target(url: str) -> Target:
    """Where ``url`` would be delivered, checked now (at save and again at each delivery)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise EndpointRefused("invalid_url", str(_("This is not a valid URL."))) from exc
    scheme, host = parts.scheme.lower(), parts.hostname
    allowed = ("https", "http") if settings.WEBHOOK_ALLOW_HTTP else ("https",)
    if scheme not in allowed:
        raise EndpointRefused("https_required", str(_("The URL must start with https://.")))
    if not host:
        raise EndpointRefused("invalid_url", str(_("The URL has no host name.")))
    if parts.username or parts.password:
        raise EndpointRefused(
            "credentials_in_url", str(_("Put no user name or password in the URL."))
        )
    port = port or (443 if scheme == "https" else 80)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise EndpointRefused(
            "unresolvable", str(_("The host name %(host)s does not resolve.") % {"host": host})
        ) from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    if not settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES and not all(map(_public, addresses)):
        raise EndpointRefused(
            "private_address",
            str(
                _(
                    "%(host)s resolves to a private, loopback, link-local or reserved address: "
                    "webhooks go to public addresses only."
                )
                % {"host": host}
            ),
        )
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(scheme, host, port, path, addresses[0])


@dataclass(frozen=True)
class Answer:
    status: int | None
    body: str
    error: str
    duration_ms: int


def post(url: str, body: bytes, headers: dict[str, str]) -> Answer:
    """POST ``body`` to ``url``; never raises for what the endpoint does (or fails to)."""
    started = time.monotonic()
    timeout = float(settings.WEBHOOK_TIMEOUT_SECONDS)

    def answer(status: int | None, text: str = "", error: str = "") -> Answer:
        return Answer(status, text, error[:300], int((time.monotonic() - started) * 1000))

    try:
        where = target(url)
    except EndpointRefused as exc:
        return answer(None, error=f"refused: {exc}")
    default_port = 443 if where.scheme == "https" else 80
    host_header = where.host if where.port == default_port else f"{where.host}:{where.port}"
    pool: urllib3.HTTPConnectionPool
    if where.scheme == "https":
        pool = urllib3.HTTPSConnectionPool(
            where.address,
            where.port,
            server_hostname=where.host,
            assert_hostname=where.host,
            cert_reqs="CERT_REQUIRED",
            maxsize=1,
        )
    else:
        pool = urllib3.HTTPConnectionPool(where.address, where.port, maxsize=1)
    try:
        response = pool.urlopen(
            "POST",
            where.path,
            body=body,
            headers={
                "Host": host_header,
                "Content-Type": "application/json",
                "User-Agent": USER_AGENT,
                **headers,
            },
            redirect=False,
            retries=False,
            preload_content=False,
            timeout=urllib3.Timeout(total=timeout),
        )
        try:
            read = bytearray()
            deadline = started + timeout
            while len(read) < RESPONSE_LIMIT:
                if time.monotonic() > deadline:
                    return answer(
                        response.status,
                        read[:EXCERPT].decode(errors="replace"),
                        "timed out reading the answer",
                    )
                chunk = response.read(min(8192, RESPONSE_LIMIT - len(read)))
                if not chunk:
                    break
                read += chunk
        finally:
            response.release_conn()
        return answer(response.status, read[:EXCERPT].decode(errors="replace"))
    except TimeoutError:
        return answer(None, error=f"no answer within {timeout:g} s")
    except HTTPError as exc:
        reason = getattr(exc, "reason", None) or exc
        return answer(None, error=f"{type(exc).__name__}: {reason}")
    except OSError as exc:
        return answer(None, error=f"{type(exc).__name__}: {exc}")
    finally:
        pool.close()
