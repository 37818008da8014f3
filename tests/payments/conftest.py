"""A real anvil for the payment tests: started once per session, reset per test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from payments import devchain
from payments.devchain import DevChain
from payments.models import Asset, Chain
from reservations.models import Order
from reservations.services import place_order
from tests.conftest import RequestFactory, build_inventory


@pytest.fixture(scope="session")
def anvil_url() -> Iterator[str]:
    port = devchain.free_port()
    process = devchain.start_anvil(port)
    url = f"http://127.0.0.1:{port}"
    DevChain(url).deploy()
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


@dataclass
class Payments:
    dev: DevChain
    chain: Chain
    usdc: Asset
    eth: Asset


@pytest.fixture
def payments(anvil_url: str, db: None) -> Iterator[Payments]:
    """The dev chain configured (2 confirmations), its state rolled back after the test."""
    yield from _configured(anvil_url)


@pytest.fixture
def committed_payments(anvil_url: str, transactional_db: None) -> Iterator[Payments]:
    """The same, committed: for tests where other processes or threads read the database."""
    yield from _configured(anvil_url)


def _configured(anvil_url: str) -> Iterator[Payments]:
    dev = DevChain(anvil_url)
    snapshot = dev.snapshot()
    chain = devchain.configure(anvil_url, confirmations=2)
    try:
        yield Payments(
            dev=dev,
            chain=chain,
            usdc=Asset.objects.get(chain=chain, symbol="USDC"),
            eth=Asset.objects.get(chain=chain, symbol="ETH"),
        )
    finally:
        dev.revert(snapshot)


@pytest.fixture
def order(db: None, make_request: RequestFactory) -> Order:
    build_inventory()
    return place_order(make_request(lot_count=1, window_days=3))
