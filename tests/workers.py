"""A real Celery worker process for the flows that matter, on the test database."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Generator
from dataclasses import dataclass, field
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class WorkerProcess:
    queue: str
    process: subprocess.Popen[str]
    output: list[str] = field(default_factory=list)

    def log(self) -> str:
        return "".join(self.output)

    def hostname(self) -> str:
        found = re.search(r"(\S+@\S+) ready\.", self.log())
        return found.group(1) if found else ""

    def settle(self, timeout: float = 60) -> bool:
        """Leave the worker idle for the next test: drop what still waits in its queue, wait
        until it runs nothing, and revoke what it holds for later (prefetched, or a retry's
        countdown). A task still running while the test database is flushed deadlocks the
        flush (TRUNCATE against the task's locks) and the next test finds the last one's
        rows. True once idle; False if it stayed busy for ``timeout`` seconds."""
        from config.celery import app

        name = self.hostname()
        app.control.purge()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            inspect = app.control.inspect(destination=[name], timeout=1.0)
            active = inspect.active() or {}  # no answer: busy (the solo pool is running)
            if name in active and not active[name]:
                held = [task["id"] for task in (inspect.reserved() or {}).get(name, [])]
                held += [
                    task["request"]["id"] for task in (inspect.scheduled() or {}).get(name, [])
                ]
                if held:
                    app.control.revoke(held)
                return True
            time.sleep(0.2)
        return False


def current_database_url() -> str:
    """The current test database as a DATABASE_URL, for the processes a test starts."""
    settings = connection.settings_dict
    user = settings["USER"] or "postgres"
    password = f":{settings['PASSWORD']}" if settings["PASSWORD"] else ""
    return (
        f"postgres://{user}{password}@{settings['HOST'] or '127.0.0.1'}:"
        f"{settings['PORT'] or 5432}/{settings['NAME']}"
    )


def start_worker(
    timeout: float = 120,
    *,
    beat_schedule: Path | None = None,
    environ: dict[str, str] | None = None,
) -> Generator[WorkerProcess, None, None]:
    """Start ``celery worker`` on a queue of its own against the current test database;
    with ``beat_schedule``, beat runs inside it too (its schedule kept in that file), sending
    the periodic tasks to the same queue. ``environ`` adds settings for the worker."""
    database_url = current_database_url()
    queue = f"test-{uuid.uuid4().hex[:12]}"
    environ = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DATABASE_CONN_MAX_AGE": "0",
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "DJANGO_DEBUG": "1",
        **(environ or {}),
    }
    beat = ["--beat", "--schedule", str(beat_schedule)] if beat_schedule else []
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "--pool",
            "solo",
            "--queues",
            queue,
            # A node name of its own: the suite's processes each start a worker on this
            # machine, and control commands (inspect, revoke) address one by name.
            "--hostname",
            f"{queue}@%h",
            "--without-mingle",
            "--without-gossip",
            "--loglevel",
            "INFO",
            *beat,
        ],
        cwd=ROOT,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    worker = WorkerProcess(queue=queue, process=process)
    # Tasks this test process sends with .delay() go to the worker's queue.
    from config.celery import app

    previous_queue = app.conf.task_default_queue
    app.conf.task_default_queue = queue

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            worker.output.append(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while " ready." not in worker.log():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"the Celery worker did not start:\n{worker.log()}")
        time.sleep(0.1)
    try:
        yield worker
    finally:
        app.conf.task_default_queue = previous_queue
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


def wait_for(predicate: object, timeout: float = 30, interval: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(interval)
    return False


class RedisServer:
    """A private ``redis-server`` on a free loopback port, which a test can stop and start
    again (on the same port, empty, as a restarted Redis without persistence is)."""

    def __init__(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None
