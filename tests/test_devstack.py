"""`make run`: the whole product starts from one command and stops with Ctrl-C."""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
DEVSTACK = ROOT / "scripts" / "devstack.py"
DATABASE = "gpulots_devstack_test"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def drop_database() -> None:
    with psycopg.connect(
        host="127.0.0.1", user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


def stack_env(tmp_path: Path, **overrides: str) -> dict[str, str]:
    environ = {
        **os.environ,
        "DJANGO_DEBUG": "1",
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{DATABASE}",
        "REDIS_URL": "redis://127.0.0.1:6379/12",
        "CELERY_TASK_DEFAULT_QUEUE": f"devstack-{tmp_path.name}",
        "RUN_DIR": str(tmp_path),
        "PORT": str(free_port()),
        "DEVCHAIN_PORT": str(free_port()),
    }
    environ.pop("CELERY_BROKER_URL", None)
    environ.update(overrides)
    return environ


class Stack:
    def __init__(self, environ: dict[str, str]) -> None:
        self.port = environ["PORT"]
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            [sys.executable, str(DEVSTACK)],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float = 90) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output)
            if match:
                return match
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"{pattern!r} never appeared:\n{self.output}")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("make-run")


@pytest.fixture(scope="module")
def stack(run_dir: Path) -> Iterator[Stack]:
    """One `make run` for the module's tests, in their order: it starts (the first test),
    survives a child's death (the second), stops on Ctrl-C and starts again on its data (the
    last). Starting it costs most of each test; once is enough to watch all of it."""
    drop_database()
    running = Stack(stack_env(run_dir))
    try:
        yield running
    finally:
        if running.process.poll() is None:
            running.process.kill()
            running.process.wait()
        drop_database()


def children_of(stack: Stack) -> list[str]:
    return subprocess.run(
        ["pgrep", "-P", str(stack.process.pid)], capture_output=True, text=True
    ).stdout.split()


def log_in(stack: Stack, email: str, password: str) -> str:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(stack.url("/admin/login/")).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token
    form = urllib.parse.urlencode(
        {
            "username": email,
            "password": password,
            "csrfmiddlewaretoken": token.group(1),
            "next": "/admin/",
        }
    ).encode()
    request = urllib.request.Request(stack.url("/admin/login/"), data=form)
    request.add_header("Referer", stack.url("/admin/login/"))
    return opener.open(request).read().decode()


def test_make_run_starts_web_workers_beat_and_the_dev_chain(stack: Stack) -> None:
    login = stack.wait_for(r"Operator login: (\S+) / (\S+)")
    stack.wait_for(r"worker \| .*ready\.")
    stack.wait_for(r"clock \| .*ready\.")  # the access tick's own worker
    stack.wait_for(r"hooks \| .*ready\.")  # the webhook deliveries' own worker
    stack.wait_for(r"beat \| .*beat: Starting")
    assert "Catalogue loaded." in stack.output
    assert "Dev chain ready" in stack.output

    health = json.loads(urllib.request.urlopen(stack.url("/healthz")).read())
    assert health == {"status": "ok", "database": "ok", "broker": "ok", "chain 31337": "ok"}
    desk = log_in(stack, login.group(1), login.group(2))
    assert "<h1>Today</h1>" in desk  # the desk opens on what waits on a person
    assert "Orders" in desk

    children = children_of(stack)
    assert len(children) == 6  # web, worker, clock, hooks, beat, dev chain
    # Links in mails and pages follow the port it serves on; the demo's settings are on.
    for pid in children[1:]:  # the dev chain (anvil) is started first
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"SITE_URL=http://127.0.0.1:{stack.port}".encode() in environ, pid
        assert b"DEMO_MODE=1" in environ
    landing = urllib.request.urlopen(stack.url("/en/")).read().decode()
    assert 'data-testid="demo-note"' in landing
    # The pay command it prints works when pasted: with the database this run was given.
    assert f"DATABASE_URL=postgres://postgres@127.0.0.1:5432/{DATABASE} make pay REF=" in (
        stack.output
    )


@pytest.mark.parametrize(
    ("override", "service"),
    [
        ({"DATABASE_URL": "postgres://postgres@127.0.0.1:1/gpulots"}, "PostgreSQL"),
        ({"REDIS_URL": "redis://127.0.0.1:1/0"}, "Redis"),
    ],
)
def test_it_says_in_one_line_when_a_service_is_down(
    tmp_path: Path, override: dict[str, str], service: str
) -> None:
    result = subprocess.run(
        [sys.executable, str(DEVSTACK)],
        cwd=ROOT,
        env=stack_env(tmp_path, **override),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{service} is not reachable" in lines[0]
    assert "start it with" in lines[0]


def worker_pid(stack: Stack) -> int:
    """The general worker's process (not the clock's): a child of `make run`."""
    children = children_of(stack)
    for pid in children:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if b"worker" in command and b"--concurrency" in command:
            return int(pid)
    raise AssertionError(f"no worker among {children}")


def test_a_child_that_dies_is_restarted_and_the_rest_keep_running(stack: Stack) -> None:
    stack.wait_for(r"worker \| .*ready\.")
    stack.wait_for(r"beat \| .*beat: Starting")
    first = worker_pid(stack)

    os.kill(first, signal.SIGKILL)

    stack.wait_for(r"make run: worker exited with -9; restarting it in 1 s", timeout=30)
    deadline = time.monotonic() + 90
    while len(re.findall(r"worker \| .*ready\.", stack.output)) < 2:
        assert stack.process.poll() is None, stack.output
        assert time.monotonic() < deadline, stack.output
        time.sleep(0.2)
    assert worker_pid(stack) != first
    health = json.loads(urllib.request.urlopen(stack.url("/healthz")).read())
    assert health["status"] == "ok"  # web and the rest never stopped


def test_ctrl_c_stops_everything_and_a_second_start_keeps_the_data_and_the_login(
    stack: Stack, run_dir: Path
) -> None:
    first = stack.wait_for(r"Operator login: (\S+ / \S+)").group(1)
    stack.wait_for(r"beat \| .*beat: Starting")
    children = children_of(stack)
    assert children
    stack.process.send_signal(signal.SIGINT)
    assert stack.process.wait(timeout=30) == 0
    assert "make run: stopped." in stack.output
    for pid in children:
        assert (
            not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
        )
    again = Stack(stack_env(run_dir, PORT=str(free_port())))
    try:
        assert again.wait_for(r"Operator login: (\S+ / \S+)").group(1) == first
        assert "Catalogue already present" in again.output
    finally:
        again.process.send_signal(signal.SIGINT)
        again.process.wait(timeout=30)


def load_devstack(monkeypatch: pytest.MonkeyPatch) -> object:
    import importlib.util

    spec = importlib.util.spec_from_file_location("devstack", DEVSTACK)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "devstack", module)
    spec.loader.exec_module(module)
    return module


def test_a_child_that_keeps_dying_stops_make_run_after_the_restart_limit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    devstack: Any = load_devstack(monkeypatch)
    monkeypatch.setattr(devstack, "BACKOFF_MAX", 0.05)
    command = [sys.executable, "-c", "raise SystemExit(3)"]
    child = devstack.Child("worker", command, devstack.spawn("worker", command), backoff=0.01)
    started = time.monotonic()

    assert devstack.supervise([child], threading.Event()) == 1

    assert time.monotonic() - started < 20
    out = capsys.readouterr().out
    assert out.count("make run: worker exited with 3; restarting it in") == devstack.RESTART_LIMIT
    assert "times within 60 s; giving up, stopping the rest" in out
