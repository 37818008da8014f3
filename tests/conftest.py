"""Shared fixtures: a small real catalogue on PostgreSQL, SSH keys, order requests."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.utils import timezone

from accounts.models import User
from api.models import ApiToken
from payments import devchain
from payments.devchain import DevChain
from payments.models import Asset, Chain
from reservations.catalogue import load_catalogue
from reservations.models import HardwareKind, Host, Lot
from reservations.services import OrderRequest
from tests.workers import WorkerProcess, start_worker

PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
"""The start of an OpenSSH private key, as a researcher might paste it by mistake."""


def openssh_public_key(comment: str = "ada@lab") -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    line = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{line.decode()} {comment}"


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") and not config.pluginmanager.has_plugin(
        "tests.parallel"
    ):
        raise pytest.UsageError(
            "on several processes the suite needs `-p tests.parallel` (a Redis per process): "
            "run `make test`, or `python -m pytest -p tests.parallel -n 3`"
        )


SLOW_FIXTURES = {
    "celery_worker",  # a real Celery worker process
    "worker_with_beat",
    "ssh_worker",
    "anvil_url",  # the dev chain
    "browser",  # headless Chromium
    "live_server",
    "sshd",  # OpenSSH's server on loopback
    "backend",  # the local provisioning backend, which runs the benchmark
    "ssh_backend",
}
SLOW_MODULES = {
    # Each starts processes of its own: the benchmarks, make run, the validation benchmark
    # and the split test under torch, compilemessages.
    "test_benchmarks",
    "test_devstack",
    "test_translations",
    "test_access_guards",
    "test_card_isolation",
    "test_device_pinning",
    "test_shipped_files",
    "test_split_test_command",
    "test_split_test_install",
    "test_two_benchmarks_on_one_host",
    "test_validation_benchmark",
    "test_validation_benchmark_gpu_paths",
    "test_access_window_clock",
    "test_acceptance_hold",
    # The benchmark through the local backend, or a chain node of their own, inside tests.
    "test_expiry_on_chain",
    "test_provisioning_api",
    "test_operator",
    "test_provisioning",
    "test_self_service",
    "test_outages",
    "test_scan_cursor",
    "test_network_presets",
    "test_campaign",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``slow``: a test that starts a real component (worker, chain, browser, sshd, the
    benchmark): ``make test-fast`` leaves them out, ``make test`` runs everything."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        module = item.path.stem
        if fixtures & SLOW_FIXTURES or module in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _default_language() -> Iterator[None]:
    """Every test starts in the default language and leaves no other active: Django's
    LocaleMiddleware activates a request's language in the test's thread and never resets
    it, so a request to /de/ would make a later test's refusals German."""
    from django.utils import translation

    translation.activate("en")
    yield
    translation.deactivate()


@pytest.fixture
def ssh_key() -> str:
    return openssh_public_key()


@dataclass
class Inventory:
    b200: HardwareKind
    h200: HardwareKind
    mi300x: HardwareKind
    h200_lots: list[Lot]
    b200_lots: list[Lot]
    mi300x_lots: list[Lot]


def build_inventory() -> Inventory:
    """The seed catalogue, with 2 H200 lots, 1 B200 lot and 1 MI300X lot."""
    load_catalogue()
    kinds = {kind.slug: kind for kind in HardwareKind.objects.all()}
    lots: dict[str, list[Lot]] = {}
    for slug, pairs in {"h200": [(0, 1), (2, 3)], "b200": [(0, 1)], "mi300x": [(0, 1)]}.items():
        host = Host.objects.create(name=f"test-{slug}", kind=kinds[slug], address="127.0.0.1")
        lots[slug] = [Lot.objects.create(host=host, gpu_a=a, gpu_b=b) for a, b in pairs]
    return Inventory(
        b200=kinds["b200"],
        h200=kinds["h200"],
        mi300x=kinds["mi300x"],
        h200_lots=lots["h200"],
        b200_lots=lots["b200"],
        mi300x_lots=lots["mi300x"],
    )


@pytest.fixture
def inventory(db: None) -> Inventory:
    return build_inventory()


@pytest.fixture
def soon() -> datetime:
    """A start two days from now, on the hour."""
    return (timezone.now() + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)


RequestFactory = Callable[..., OrderRequest]


@pytest.fixture
def make_request(ssh_key: str, soon: datetime) -> RequestFactory:
    def factory(**overrides: object) -> OrderRequest:
        fields: dict[str, object] = {
            "kind": "h200",
            "lot_count": 1,
            "window_days": 7,
            "starts_at": soon,
            "environment": "pytorch-2.9-cuda-12.8",
            "usage_mode": "distributed",
            "hypothesis": "shorter_step",
            "hypothesis_text": "Two cards halve the step time of our 7B fine-tune.",
            "contact_name": "Ada Lovelace",
            "contact_email": "ada@example.org",
            "ssh_public_keys": ssh_key,
        }
        fields.update(overrides)
        return OrderRequest(**fields)  # type: ignore[arg-type]

    return factory


# --------------------------------------------------------------------------- API users


@pytest.fixture
def ada(db: None) -> tuple[User, str]:
    """A researcher with an API token: (user, token)."""
    user = User.objects.create_user("ada@example.org")
    _record, token = ApiToken.issue(user, "pipeline")
    return user, token


@pytest.fixture
def eve(db: None) -> tuple[User, str]:
    """Another user with a token, who must never see ada's orders."""
    user = User.objects.create_user("eve@example.org")
    _record, token = ApiToken.issue(user, "eve")
    return user, token


@pytest.fixture(scope="session")
def celery_worker(django_db_setup: None, django_db_blocker: object) -> Iterator[WorkerProcess]:
    """A real worker process, started once per test session (after the test database)."""
    with django_db_blocker.unblock():  # type: ignore[attr-defined]
        yield from start_worker()


@pytest.fixture(autouse=True)
def _worker_settles(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test with the session's worker, the worker is idle before the database is
    flushed: the database fixture is set up from in here, so it is torn down after this
    fixture's wait."""
    if "celery_worker" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("_django_db_helper")
    worker = request.getfixturevalue("celery_worker")
    yield
    assert worker.settle(), f"the worker stayed busy after the test:\n{worker.log()[-3000:]}"


@pytest.fixture
def eager_tasks() -> Iterator[None]:
    """Run Celery tasks in the calling process (for page tests; flows that matter use a
    real worker, see tests/workers.py)."""
    from config.celery import app

    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = False


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """Cached page fragments never leak from one test into the next."""
    from django.core.cache import cache

    from reservations.quotes import forget_readings_here

    cache.clear()
    forget_readings_here()


# --------------------------------------------------------------------------- the dev chain


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
