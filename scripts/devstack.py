#!/usr/bin/env python
"""``make run``: the whole product on this machine, in the foreground.

Checks that PostgreSQL and Redis answer (one clear line on how to start either if not),
creates the database if needed, migrates, loads the catalogue into an empty database,
ensures the operator account (printing its login), then runs web (gunicorn), the Celery
worker and Celery beat together. Ctrl-C stops them all.

A child that exits on its own is started again (``supervise``): after 1 s, then 2, 4 … up
to 30 s while it keeps failing fast, each restart logged. One that exits more than
``RESTART_LIMIT`` times within a minute is broken, not unlucky: then everything stops.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import urlparse

if TYPE_CHECKING:
    from psycopg import Connection

ROOT = Path(__file__).resolve().parent.parent

RUN_ENV: dict[str, str] = {
    "HOST": "127.0.0.1",
    "PORT": "8000",
    "WEB_WORKERS": "4",
    "WEB_THREADS": "2",
    "DEVCHAIN_PORT": "8545",
    "RUN_DIR": "var",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/gpulots",
    "REDIS_URL": "redis://127.0.0.1:6379/0",
    "PROVISIONING_CLOCK_QUEUE": "gpulots-clock",
    "WEBHOOK_QUEUE": "gpulots-hooks",
}
"""Every environment variable `make run` itself reads, with its default (the settings read
theirs through ``infra.env``, listed in ``READ``; the documentation's table lists both, and
a test keeps it equal to them)."""


def run_env(name: str) -> str:
    return os.environ.get(name, RUN_ENV[name])


VAR = Path(run_env("RUN_DIR"))
if not VAR.is_absolute():
    VAR = ROOT / VAR
BIN = Path(sys.executable).parent
COLOURS = {
    "web": "\033[36m",
    "worker": "\033[33m",
    "clock": "\033[34m",
    "hooks": "\033[94m",
    "beat": "\033[35m",
    "chain": "\033[32m",
}
CLOCK_QUEUE = run_env("PROVISIONING_CLOCK_QUEUE")
HOOKS_QUEUE = run_env("WEBHOOK_QUEUE")
RESET = "\033[0m"
RESTART_LIMIT = 5
"""Restarts of one child within RESTART_WINDOW seconds before `make run` gives up."""
RESTART_WINDOW = 60.0
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 30.0
STABLE_AFTER = 30.0
"""A child that ran this long before exiting is restarted after BACKOFF_FIRST again."""


def fail(message: str) -> NoReturn:
    print(f"make run: {message}", file=sys.stderr)
    raise SystemExit(1)


def check_postgres(url: str) -> Connection:
    """Connect to the server's maintenance database, or say how to start PostgreSQL."""
    import psycopg

    parsed = urlparse(url)
    server = dict(
        host=parsed.hostname or "127.0.0.1",
        port=parsed.port or 5432,
        user=parsed.username or "postgres",
        password=parsed.password or None,
        connect_timeout=3,
    )
    try:
        conn = psycopg.connect(dbname="postgres", autocommit=True, **server)  # type: ignore[arg-type]
    except psycopg.OperationalError:
        fail(
            f"PostgreSQL is not reachable at {server['host']}:{server['port']} — start it with "
            "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` "
            "(or set DATABASE_URL)"
        )
    return conn


def ensure_database(conn: Connection, url: str) -> None:
    from psycopg import sql

    name = urlparse(url).path.lstrip("/")
    with conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"make run: created database {name}")


def check_redis(url: str) -> None:
    from redis import Redis
    from redis.exceptions import RedisError

    try:
        Redis.from_url(url, socket_connect_timeout=3).ping()
    except (RedisError, OSError):
        parsed = urlparse(url)
        fail(
            f"Redis is not reachable at {parsed.hostname}:{parsed.port or 6379} — start it with "
            "`redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save ''` "
            "(or set REDIS_URL)"
        )


def manage(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        fail(f"`manage.py {' '.join(args)}` failed")
    return result.stdout


def pump(name: str, stream: object) -> None:
    colour = COLOURS.get(name, "") if sys.stdout.isatty() else ""
    end = RESET if colour else ""
    for line in stream:  # type: ignore[attr-defined]
        sys.stdout.write(f"{colour}{name:>6}{end} | {line}")
        sys.stdout.flush()


def spawn(name: str, command: list[str]) -> subprocess.Popen[str]:
    """A child whose output is prefixed with ``name``; in its own session, so Ctrl-C reaches
    only us and we stop the children in order."""
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    threading.Thread(target=pump, args=(name, process.stdout), daemon=True).start()
    return process


def devchain_command(port: str) -> list[str]:
    """anvil on loopback, a block every 2 s, its state kept in var/ across restarts, quiet."""
    binary = ROOT / "node_modules" / ".bin" / "anvil"
    if not binary.exists():
        fail("anvil is missing — run `npm ci` (`make run` does it)")
    return [
        str(binary),
        "--host",
        "127.0.0.1",
        "--port",
        port,
        "--chain-id",
        "31337",
        "--block-time",
        "2",
        "--state",
        str(VAR / "anvil-state.json"),
        "--quiet",  # no line per block or RPC call: the other logs stay readable
    ]


def wait_for_port(port: str, process: subprocess.Popen[str], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", int(port))) == 0:
                return True
        if process.poll() is not None:
            return False
        time.sleep(0.2)
    return False


def start_devchain(port: str) -> subprocess.Popen[str]:
    process = spawn("chain", devchain_command(port))
    if wait_for_port(port, process):
        return process
    process.kill()
    fail(f"anvil did not start on port {port} (is the port taken? set DEVCHAIN_PORT)")


def devchain_again(port: str) -> Callable[[subprocess.Popen[str]], None]:
    """After anvil is restarted: wait for it, and deploy the contracts again should its
    saved state have been lost with it."""

    def again(process: subprocess.Popen[str]) -> None:
        if not wait_for_port(port, process):
            return  # it exited again: the supervisor sees it
        result = subprocess.run(
            [
                sys.executable,
                str(ROOT / "manage.py"),
                "devchain",
                "setup",
                "--url",
                f"http://127.0.0.1:{port}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            print(f"make run: the dev chain's setup failed after its restart:\n{result.stderr}")

    return again


@dataclass
class Child:
    """A supervised child: its command, the process running it now, its restarts."""

    name: str
    command: list[str]
    process: subprocess.Popen[str]
    started: float = field(default_factory=time.monotonic)
    restarts: deque[float] = field(default_factory=deque)
    backoff: float = BACKOFF_FIRST
    restart_at: float | None = None
    after_restart: Callable[[subprocess.Popen[str]], None] | None = None


def supervise(children: list[Child], stopping: threading.Event) -> int:
    """Until ``stopping`` is set (Ctrl-C): restart every child that exits, with a growing
    pause while it keeps failing fast. Returns 0, or 1 when a child exited more than
    RESTART_LIMIT times within RESTART_WINDOW seconds (the caller then stops the rest)."""
    while not stopping.is_set():
        now = time.monotonic()
        for child in children:
            if child.restart_at is not None:
                if now >= child.restart_at and not stopping.is_set():
                    child.process = spawn(child.name, child.command)
                    child.started, child.restart_at = time.monotonic(), None
                    print(f"make run: {child.name} started again", flush=True)
                    if child.after_restart is not None:
                        child.after_restart(child.process)
                continue
            code = child.process.poll()
            if code is None:
                continue
            while child.restarts and child.restarts[0] <= now - RESTART_WINDOW:
                child.restarts.popleft()
            if len(child.restarts) >= RESTART_LIMIT:
                print(
                    f"make run: {child.name} exited with {code}, {len(child.restarts) + 1} "
                    f"times within {RESTART_WINDOW:g} s; giving up, stopping the rest",
                    flush=True,
                )
                return 1
            if now - child.started >= STABLE_AFTER:
                child.backoff = BACKOFF_FIRST
            delay, child.backoff = child.backoff, min(BACKOFF_MAX, child.backoff * 2)
            child.restarts.append(now)
            child.restart_at = now + delay
            print(
                f"make run: {child.name} exited with {code}; restarting it in {delay:g} s "
                f"(restart {len(child.restarts)} of at most {RESTART_LIMIT} a minute)",
                flush=True,
            )
        stopping.wait(0.2)
    return 0


def stop_all(children: list[Child]) -> None:
    for child in children:
        if child.process.poll() is None:
            child.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 15
    for child in children:
        try:
            child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()


def celery_worker(*options: str) -> list[str]:
    return [str(BIN / "celery"), "-A", "config", "worker", "--loglevel", "INFO", *options]


def pay_command() -> str:
    """The command that pays an order on this run's chain, as it must be pasted into another
    terminal: with each setting this run was given that differs from make's defaults."""
    given = [
        f"{name}={os.environ[name]}"
        for name in ("DATABASE_URL",)
        if name in os.environ and os.environ[name] != RUN_ENV[name]
    ]
    return " ".join([*given, "make pay REF=<reference>"])


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("PROVISIONING_CLOCK_QUEUE", CLOCK_QUEUE)
    os.environ.setdefault("WEBHOOK_QUEUE", HOOKS_QUEUE)
    database_url = run_env("DATABASE_URL")
    redis_url = run_env("REDIS_URL")
    host = run_env("HOST")
    port = run_env("PORT")
    # Links in mails and on pages follow where this run serves, unless SITE_URL says otherwise.
    os.environ.setdefault("SITE_URL", f"http://{host}:{port}")
    # The local demo: today's windows start within minutes (said on every page; the
    # settings refuse it without DJANGO_DEBUG). DEMO_MODE=0 books as production does.
    os.environ.setdefault("DEMO_MODE", "1")
    postgres = check_postgres(database_url)
    check_redis(os.environ.get("CELERY_BROKER_URL") or redis_url)
    ensure_database(postgres, database_url)

    VAR.mkdir(exist_ok=True)
    chain_port = run_env("DEVCHAIN_PORT")
    anvil = start_devchain(chain_port)
    manage("migrate", "--noinput")
    print(manage("load_catalogue", "--demo-inventory").strip())
    login = manage("ensure_operator", "--password-file", str(VAR / "operator-password")).strip()
    print(manage("devchain", "setup", "--url", f"http://127.0.0.1:{chain_port}").strip())

    commands = {
        "web": [
            str(BIN / "gunicorn"),
            "config.wsgi",
            "--bind",
            f"{host}:{port}",
            "--workers",
            run_env("WEB_WORKERS"),
            "--threads",
            run_env("WEB_THREADS"),
            "--access-logfile",
            "-",
        ],
        "worker": celery_worker("--concurrency", "2"),
        # The access tick's own worker: opening and closing access never waits behind a
        # benchmark that keeps the other worker busy.
        "clock": celery_worker("--pool", "solo", "--queues", CLOCK_QUEUE, "--hostname", "clock@%h"),
        # Webhook deliveries on threads (each mostly waits on a receiver's answer): a slow
        # receiver never delays provisioning or payments.
        "hooks": celery_worker(
            "--pool",
            "threads",
            "--concurrency",
            "8",
            "--queues",
            HOOKS_QUEUE,
            "--hostname",
            "hooks@%h",
        ),
        "beat": [
            str(BIN / "celery"),
            "-A",
            "config",
            "beat",
            "--loglevel",
            "INFO",
            "--schedule",
            str(VAR / "celerybeat-schedule"),
        ],
    }
    children = [
        Child(
            "chain",
            devchain_command(chain_port),
            anvil,
            after_restart=devchain_again(chain_port),
        )
    ]
    children += [Child(name, command, spawn(name, command)) for name, command in commands.items()]

    print(f"\nGPU lots is running: http://{host}:{port}/")
    print(f"Operator desk: http://{host}:{port}/admin/  ·  health: /healthz")
    print(f"Dev chain: http://127.0.0.1:{chain_port} (chain id 31337); pay an order with")
    print(f"  {pay_command()}")
    print(f"{login}\nCtrl-C stops web, workers, beat and the dev chain.\n", flush=True)

    stopping = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    exit_code = supervise(children, stopping)
    stop_all(children)
    print("make run: stopped.")
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
