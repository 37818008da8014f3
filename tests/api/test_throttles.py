"""The API's throttles count every request exactly once, whatever the concurrency, and count
the real client: X-Forwarded-For only from a trusted proxy, IPv6 per /64 (issue 10, item 6)."""

from __future__ import annotations

import ipaddress
import itertools
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, RequestFactory
from rest_framework.request import Request
from rest_framework.views import APIView

from api.throttles import AddressRateThrottle
from infra import env
from infra.clients import client_address, client_key
from tests.concurrency import at_once

KINDS = "/api/v1/kinds/"  # public: only the per-address throttle applies
LIMIT = 5


@pytest.fixture
def address_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    from rest_framework.settings import api_settings

    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "address": f"{LIMIT}/minute"}
    monkeypatch.setattr("api.throttles.AddressRateThrottle.THROTTLE_RATES", rates)


def kinds(client: Client, peer: str, forwarded: str | None = None) -> Any:
    headers = {"X-Forwarded-For": forwarded} if forwarded is not None else {}
    return client.get(KINDS, REMOTE_ADDR=peer, headers=headers)


def test_600_concurrent_requests_never_pass_more_than_300_a_minute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rest_framework.settings import api_settings

    rates = {**api_settings.DEFAULT_THROTTLE_RATES, "address": "300/minute"}
    monkeypatch.setattr("api.throttles.AddressRateThrottle.THROTTLE_RATES", rates)
    factory = RequestFactory()

    def ten(_index: int) -> list[bool]:
        """Ten requests from one client, one after the other, as one of 60 threads."""
        throttle, view = AddressRateThrottle(), APIView()
        return [
            throttle.allow_request(Request(factory.get(KINDS, REMOTE_ADDR="203.0.113.50")), view)
            for _ in range(10)
        ]

    outcomes = at_once(60, ten)  # 600 requests, 60 at a time (within the pools' 100 connections)

    assert all(isinstance(outcome, list) for outcome in outcomes), outcomes
    passed = sum(sum(outcome) for outcome in outcomes if isinstance(outcome, list))
    assert passed == 300


@pytest.mark.django_db
def test_made_up_forwarded_for_from_an_untrusted_peer_does_not_reset_the_count(
    client: Client, address_rate: None
) -> None:
    assert [kinds(client, "203.0.113.9").status_code for _ in range(LIMIT)] == [200] * LIMIT
    assert kinds(client, "203.0.113.9").status_code == 429

    spoofed = [kinds(client, "203.0.113.9", f"198.51.100.{n}") for n in range(20)]

    assert [response.status_code for response in spoofed] == [429] * 20
    assert all(int(response["Retry-After"]) > 0 for response in spoofed)
    assert kinds(client, "203.0.113.10").status_code == 200  # another client is not held up


@pytest.mark.django_db
def test_behind_a_trusted_proxy_the_forwarded_client_is_counted(
    client: Client, address_rate: None, settings: Any
) -> None:
    settings.TRUSTED_PROXIES = (ipaddress.ip_network("10.0.0.0/8"),)
    proxy = "10.1.2.3"
    first = [kinds(client, proxy, "198.51.100.7").status_code for _ in range(LIMIT)]
    assert first == [200] * LIMIT

    # The same client through two proxies, or with a hop of its own written in front:
    # the right-most hop that is not a trusted proxy is the client.
    assert kinds(client, proxy, "198.51.100.7, 10.9.9.9").status_code == 429
    assert kinds(client, proxy, "203.0.113.1, 198.51.100.7").status_code == 429
    assert kinds(client, proxy, "garbage, 198.51.100.7").status_code == 429
    # Other clients behind the same proxy have their own count.
    assert kinds(client, proxy, "198.51.100.8").status_code == 200
    assert kinds(client, "10.1.2.4", "198.51.100.9").status_code == 200


@pytest.mark.django_db
def test_ipv6_clients_are_counted_per_64(client: Client, address_rate: None) -> None:
    same_64 = (f"2001:db8:1:2:{n:x}::1" for n in itertools.count(1))
    assert [kinds(client, next(same_64)).status_code for _ in range(LIMIT)] == [200] * LIMIT
    assert [kinds(client, next(same_64)).status_code for _ in range(5)] == [429] * 5
    assert kinds(client, "2001:db8:1:3::1").status_code == 200  # the next /64 is another client


def test_the_client_is_the_peer_unless_the_peer_is_a_trusted_proxy(settings: Any) -> None:
    factory = RequestFactory()

    def client_of(peer: str, forwarded: str | None = None) -> str:
        headers = {"X-Forwarded-For": forwarded} if forwarded is not None else {}
        return client_key(factory.get("/", REMOTE_ADDR=peer, headers=headers))

    settings.TRUSTED_PROXIES = ()
    assert client_of("203.0.113.9", "198.51.100.1") == "203.0.113.9"
    assert client_of("::ffff:203.0.113.9") == "203.0.113.9"
    assert client_of("2001:db8::1") == "2001:db8::/64"
    assert client_of("") == "unknown"

    settings.TRUSTED_PROXIES = (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("fd00::/8"),
    )
    assert client_of("10.0.0.1") == "10.0.0.1"  # no header: the proxy itself
    assert client_of("10.0.0.1", "198.51.100.1:4711") == "198.51.100.1"
    assert client_of("fd00::1", "[2001:db8:5:6::7]:443") == "2001:db8:5:6::/64"
    assert client_of("10.0.0.1", "10.0.0.2, 10.0.0.3") == "10.0.0.2"  # all ours: the first
    assert client_of("10.0.0.1", "not-an-address") == "10.0.0.1"
    assert client_of("203.0.113.9", "198.51.100.1") == "203.0.113.9"  # not a proxy of ours
    request = factory.get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="198.51.100.1")
    assert str(client_address(request)) == "198.51.100.1"


def test_trusted_proxies_are_checked_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRUSTED_PROXIES", "10.0.0.0/8, 2001:db8::/32")
    assert env.env_networks("TRUSTED_PROXIES") == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("2001:db8::/32"),
    )
    monkeypatch.setenv("TRUSTED_PROXIES", "10.0.0.0/8,proxy.example")
    with pytest.raises(ImproperlyConfigured, match="TRUSTED_PROXIES"):
        env.env_networks("TRUSTED_PROXIES")
    monkeypatch.setenv("SIGN_IN_LIMIT_CLIENT", "ten/hour")
    with pytest.raises(ImproperlyConfigured, match="SIGN_IN_LIMIT_CLIENT"):
        env.env_rate("SIGN_IN_LIMIT_CLIENT", "10/hour")
