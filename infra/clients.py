"""Who is asking: the one client identity every per-client limit counts by.

The API's throttle trusted any ``X-Forwarded-For``: twenty made-up values passed after the
real address was refused. The client is now the peer that connected (``REMOTE_ADDR``); only
when that peer is one of ``TRUSTED_PROXIES`` (settings; none by default) is the forwarded
chain read, from the right, and the client is the right-most hop that is not a trusted proxy
— the address the first trusted proxy saw connect. Hops further left were written by the
client itself and are never believed.

IPv6 clients are counted per /64: one subscriber gets a whole /64 and can pick a fresh
address in it for every request.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from django.conf import settings

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

IPV6_CLIENT_PREFIX = 64


class HasMeta(Protocol):
    """A Django request, or DRF's wrapper of one."""

    @property
    def META(self) -> Mapping[str, Any]: ...


UNKNOWN = "unknown"
"""The client of a request whose peer address cannot be read (counted as one client)."""


def parse_address(text: str) -> Address | None:
    """An address as a hop writes it: ``198.51.100.7``, ``2001:db8::1``, with a port
    (``198.51.100.7:443``, ``[2001:db8::1]:443``) or not; IPv4-mapped IPv6 as IPv4."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:  # IPv4 with a port; bare IPv6 has two colons or more
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _trusted(address: Address, proxies: Iterable[Network]) -> bool:
    return any(address.version == network.version and address in network for network in proxies)


def client_address(request: HasMeta) -> Address | None:
    """The address of the client that sent ``request`` (None when the peer is unreadable)."""
    proxies = tuple(settings.TRUSTED_PROXIES)
    peer = parse_address(request.META.get("REMOTE_ADDR") or "")
    if peer is None or not _trusted(peer, proxies):
        return peer
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR") or ""
    client = peer
    for hop in reversed(forwarded.split(",")):
        address = parse_address(hop)
        if address is None:
            break  # garbage: not written by a proxy we trust; the last good hop stands
        client = address
        if not _trusted(address, proxies):
            break
    return client


def client_key(request: HasMeta) -> str:
    """The client as limits count it: the IPv4 address, or the IPv6 address's /64."""
    address = client_address(request)
    if address is None:
        return UNKNOWN
    if isinstance(address, ipaddress.IPv6Address):
        network = ipaddress.IPv6Network((address, IPV6_CLIENT_PREFIX), strict=False)
        return str(network)
    return str(address)
