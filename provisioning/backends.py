"""Where the host-side steps run. The local backend runs the same scripts (provisioning/host)
on this machine inside a sandbox folder — no real system accounts — for `make run`, the
demo and the tests. (The SSH backend, with pinned host keys, comes next.)"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings

HOST_SCRIPTS = Path(__file__).resolve().parent / "host"
BENCHMARK = Path(__file__).resolve().parent / "validation" / "benchmark.py"


class StepFailed(Exception):
    """A host-side step failed; the message says which and why."""


class LocalBackend:
    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root or settings.PROVISIONING_LOCAL_ROOT)

    def host_root(self, host_name: str) -> Path:
        path = self.root / host_name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def script(self, host_name: str, name: str, *args: str) -> None:
        done = subprocess.run(
            ["bash", str(HOST_SCRIPTS / f"{name}.sh"), str(self.host_root(host_name)), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise StepFailed(f"{name}: {done.stderr.strip()[-500:]}")

    def install_keys(self, host_name: str, account: str, keys: str) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".pub", delete=False) as handle:
            handle.write(keys)
        try:
            self.script(host_name, "install_keys", account, handle.name)
        finally:
            Path(handle.name).unlink(missing_ok=True)

    def run_validation(self, host_name: str, report_name: str, arguments: list[str]) -> Path:
        """The benchmark, as it runs on a host; here on this machine's CPU (quick sizes)."""
        out = self.host_root(host_name) / "reports" / f"{report_name}.json"
        out.parent.mkdir(exist_ok=True)
        if out.exists():  # a retry after the run finished: keep that report
            return out
        done = subprocess.run(
            [sys.executable, str(BENCHMARK), "--out", str(out), "--quick", *arguments],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            out.write_text(json.dumps({"version": 1, "error": done.stderr[-3000:]}))
        return out

    def fetch_report(self, path: Path) -> dict[str, Any]:
        report: dict[str, Any] = json.loads(path.read_text())
        return report
