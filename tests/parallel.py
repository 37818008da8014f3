"""The suite on several processes (pytest-xdist): ``make test`` loads this plugin with
``-p tests.parallel``.

Each xdist process gets what cannot be shared: pytest-django gives it its own test
database (``test_gpulots_gw0`` …), session fixtures give it its own dev chain, Celery worker
(on a queue and under a node name of its own), sshd and Chromium on ports the OS grants, and
this plugin gives it a Redis of its own. Sharing one Redis would not do: a test's
``cache.clear()`` is a FLUSHDB, which would empty another process's cache, rate limits and
broker queues in the middle of its test.

The plugin is imported while pytest reads its options, before pytest-django imports the
settings, so the settings (and every process a test starts) read the private Redis from
the environment like any other.
"""

from __future__ import annotations

import atexit
import os
import shutil

import pytest

from tests.workers import RedisServer

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
"""``gw0``, ``gw1`` … inside an xdist process; empty in the controller or a serial run."""

_redis: RedisServer | None = None

if WORKER:
    if shutil.which("redis-server") is None:  # pragma: no cover - the machine's setup
        raise RuntimeError("the parallel suite starts a redis-server per process: install it")
    _redis = RedisServer()
    os.environ["REDIS_URL"] = _redis.url(0)
    os.environ["CELERY_BROKER_URL"] = _redis.url(1)
    atexit.register(_redis.stop)


def pytest_report_header(config: pytest.Config) -> str | None:
    if _redis is None:
        return None
    return f"{WORKER}: private Redis on 127.0.0.1:{_redis.port}"
