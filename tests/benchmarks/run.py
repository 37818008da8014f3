"""Running a benchmark from the tests: its exit status and its one JSON line.

Each benchmark that starts a whole stack has a test module of its own, so that the
parallel suite spreads them over its processes (a module stays on one process); each
uses a database of its own and, under xdist, its process's private Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bench_env() -> dict[str, str]:
    """A benchmark's stack on this test process's private Redis (tests.parallel), so that
    two benchmarks running at once on two processes never share a cache or a queue."""
    private = os.environ.get("REDIS_URL", "")
    if os.environ.get("PYTEST_XDIST_WORKER") and private:
        return {"BENCH_REDIS_URL": private.rsplit("/", 1)[0] + "/13"}
    return {}


def run_bench(
    script: str, *args: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, object]]:
    code, report, _printed = run_bench_printing(script, *args, env=env)
    return code, report


def run_bench_printing(
    script: str, *args: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, object], str]:
    """The benchmark's exit status, its one JSON line, and what it printed on standard error
    (``--profile``'s output)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        cwd=ROOT,
        env={**os.environ, **bench_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout + result.stderr
    return result.returncode, json.loads(lines[0]), result.stderr


def profile_of(script: str, *args: str) -> str:
    """What ``--profile`` alone prints (standard error; no JSON line then) for a benchmark
    run that must succeed."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--profile", *args],
        cwd=ROOT,
        env={**os.environ, **bench_env()},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr
