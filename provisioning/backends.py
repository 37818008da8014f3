"""Where the host-side steps run.

Both backends run the same shipped scripts (provisioning/host/*.sh) and the same benchmark
(provisioning/validation/benchmark.py), through the same four calls:

- ``LocalBackend`` runs them on this machine inside a sandbox folder, one per host, with
  no real system accounts: for `make run`, the demo and most tests.
- ``SshBackend`` (provisioning/ssh.py) runs them on the inventory's hosts over SSH, with
  each host's key pinned in the inventory: any other key is refused, never accepted.

Errors say what failed: ``StepFailed`` (a step's script failed; retried), its subclass
``HostUnreachable`` (no connection, SSH refused, a timeout; retried with backoff) and
``HostKeyRefused`` (the host presented a key other than the pinned one, or none is
pinned; not retried: the operator checks the host and pins its key).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings

from reservations.models import Host

HOST_SCRIPTS = Path(__file__).resolve().parent / "host"
BENCHMARK = Path(__file__).resolve().parent / "validation" / "benchmark.py"
SCRIPT_TIMEOUT = 120
BENCHMARK_TIMEOUT = 900


class StepFailed(Exception):
    """A host-side step failed; the message says which and why."""


class HostUnreachable(StepFailed):
    """No SSH session with the host (refused, timed out, authentication refused)."""


class HostKeyRefused(StepFailed):
    """The host's key is not the pinned one (or none is pinned). ``presented`` is the key
    the host offered, in OpenSSH format, for the operator to check; empty if unknown."""

    def __init__(self, message: str, presented: str = "") -> None:
        super().__init__(message)
        self.presented = presented


class Backend(Protocol):
    def script(self, host: Host, name: str, *args: str) -> None:
        """Run host script ``name`` with ``args``; StepFailed when it fails."""

    def install_keys(self, host: Host, account: str, keys: str) -> None:
        """The account's authorized keys become ``keys`` (OpenSSH lines)."""

    def run_validation(self, host: Host, report_name: str, arguments: list[str]) -> str:
        """Run the benchmark (once: a retry finds the report); returns the report's path."""

    def fetch_report(self, host: Host, path: str) -> dict[str, Any]:
        """The report at ``path`` on the host."""


def crash_report(output: str) -> dict[str, Any]:
    """What is stored when the benchmark itself died (out of memory, killed, a bad build):
    the report says what failed, and access is still delivered."""
    return {"version": 1, "error": output[-3000:]}


def backend_for(host: Host) -> Backend:
    """The configured backend (PROVISIONING_BACKEND)."""
    if settings.PROVISIONING_BACKEND == "ssh":
        from provisioning.ssh import SshBackend

        return SshBackend()
    return LocalBackend()


class LocalBackend:
    """The scripts on this machine, each host a folder under ``root``."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root or settings.PROVISIONING_LOCAL_ROOT)

    def host_root(self, host: Host) -> Path:
        path = self.root / host.name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def script(self, host: Host, name: str, *args: str) -> None:
        done = subprocess.run(
            ["bash", str(HOST_SCRIPTS / f"{name}.sh"), str(self.host_root(host)), *args],
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT,
        )
        if done.returncode != 0:
            raise StepFailed(f"{name}: {done.stderr.strip()[-500:]}")

    def install_keys(self, host: Host, account: str, keys: str) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".pub", delete=False) as handle:
            handle.write(keys)
        try:
            self.script(host, "install_keys", account, handle.name)
        finally:
            Path(handle.name).unlink(missing_ok=True)

    def run_validation(self, host: Host, report_name: str, arguments: list[str]) -> str:
        """The benchmark, as it runs on a host; here on this machine's CPU (quick sizes)."""
        out = self.host_root(host) / "reports" / f"{report_name}.json"
        out.parent.mkdir(exist_ok=True)
        if out.exists():  # a retry after the run finished: keep that report
            return str(out)
        done = subprocess.run(
            [sys.executable, str(BENCHMARK), "--out", str(out), "--quick", *arguments],
            capture_output=True,
            text=True,
            timeout=BENCHMARK_TIMEOUT,
        )
        if done.returncode != 0:
            out.write_text(json.dumps(crash_report(done.stderr)))
        return str(out)

    def fetch_report(self, host: Host, path: str) -> dict[str, Any]:
        report: dict[str, Any] = json.loads(Path(path).read_text())
        return report
