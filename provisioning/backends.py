"""Where the host-side steps run.

Both backends run the same shipped scripts (provisioning/host/*.sh) and the same benchmark,
and install the same split-test command in each account, each as the one file built from
its package (provisioning/validation/build.py: benchmark.pyz, gpulots.py), through the same
five calls (``Backend``):

- ``LocalBackend`` runs them on this machine inside a sandbox folder, one per host, with
  no real system accounts: for `make run`, the demo and most tests.
- ``SshBackend`` (provisioning/ssh.py) runs them on the inventory's hosts over SSH, with
  each host's key pinned in the inventory: any other key is refused, never accepted.

The benchmark measures the lot's cards and only them: both backends start it with the
lot's host device indices in CUDA_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES (the names the
accounts get from assign_cards.sh) and ROCR_VISIBLE_DEVICES removed, and pass them as
``--cards``; the benchmark checks that it sees exactly those devices before it measures.

This module is what every backend shares (the calls, the errors, the limits, the cards'
variables) and the local backend; provisioning.ssh builds on it, and provisioning.hosts
picks the configured one (``backend_for``).

Errors say what failed: ``StepFailed`` (a step's script failed; retried), its subclass
``HostUnreachable`` (no connection, SSH refused, a timeout; retried with backoff) and
``HostKeyRefused`` (the host presented a key other than the pinned one, or none is
pinned; not retried: the operator checks the host and pins its key).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings

from provisioning.validation import build
from reservations.models import Host

HOST_SCRIPTS = Path(__file__).resolve().parent / "host"
SCRIPT_TIMEOUT = 120
REVOKE_TIMEOUT = 600
"""revoke.sh looks through the host's filesystems for the account's files: more time."""
BENCHMARK_TIMEOUT = 900
HEALTH_TIMEOUT = 60
"""A health reading is one nvidia-smi (or amd-smi) call and the kernel log: seconds."""
PROBE = Path(__file__).resolve().parent / "validation" / "benchmark" / "smi.py"
"""The health probe: sent to the host on standard input (provisioning.health)."""
CARDS = re.compile(r"[0-9]+(,[0-9]+)*")
HIDDEN = "ROCR_VISIBLE_DEVICES"
"""Removed from the benchmark's environment: HIP reads HIP_VISIBLE_DEVICES as positions in
the list ROCR_VISIBLE_DEVICES exposes, so both set to "2,3" would show no card at all."""


def script_timeout(name: str) -> int:
    """Seconds host script ``name`` may run."""
    return REVOKE_TIMEOUT if name == "revoke" else SCRIPT_TIMEOUT


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

    def install_tool(self, host: Host, account: str, order: str) -> None:
        """The ``gpulots`` command (build.tool(), one file) in the account, with ``order``
        (the order's facts, JSON) beside it."""

    def run_validation(
        self, host: Host, report_name: str, arguments: list[str], *, cards: str
    ) -> str:
        """Run the benchmark on the lot's cards and only them (once: a retry finds the
        report); returns the report's path.

        ``cards`` are the lot's device indices on the host ("2,3"; "3" for one card); any
        other text is refused with StepFailed before anything runs. The benchmark sees
        them as CUDA_VISIBLE_DEVICES and HIP_VISIBLE_DEVICES (ROCR_VISIBLE_DEVICES removed)
        and as ``--cards``. A report it wrote is kept even when it exits non-zero (a device
        mismatch: exit 3, ``devices.ok`` false); without one, a crash report is stored.
        """

    def fetch_report(self, host: Host, path: str) -> dict[str, Any]:
        """The report at ``path`` on the host."""

    def stop_validation(self, host: Host, report_name: str) -> None:
        """End the benchmark writing ``report_name`` if one still runs (its grant is closing:
        nothing of the order may go on using the cards); none running is fine."""

    def read_health(self, host: Host, cards: str, since: float, until: float) -> dict[str, Any]:
        """One health reading of the lot's ``cards`` (checked as for the benchmark): the
        probe (validation/benchmark/smi.py) run on the host, its JSON; XID lines from the
        epoch seconds (``since``, ``until``]. StepFailed (HostUnreachable) when there is none."""


def still_running(report: str) -> str:
    """A ``pkill -f`` pattern for the benchmark writing ``report`` that matches neither the
    shell nor the pkill that carry it (``[j]ob-7.json`` matches only ``job-7.json``)."""
    folder, _slash, name = report.rpartition("/")
    return f"{folder}/[{name[0]}]{name[1:]}"


def crash_report(output: str) -> dict[str, Any]:
    """What is stored when the benchmark itself died (out of memory, killed, a bad build):
    the report says what failed, and access is still delivered."""
    return {"version": 1, "error": output[-3000:]}


def visible_devices(cards: str) -> dict[str, str]:
    """The variables that show the benchmark ``cards`` (host device indices), checked: the
    value goes into a command line on the host."""
    if not CARDS.fullmatch(cards):
        raise StepFailed(f"run_validation: {cards!r} is not a list of card indices")
    # PCI bus order, as nvidia-smi and the host's inventory number the cards (CUDA's own
    # default is "fastest first"); the same as the tenant's accounts get (assign_cards.sh).
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": cards,
        "HIP_VISIBLE_DEVICES": cards,
    }


def health_reading(text: str, host: Host) -> dict[str, Any]:
    """The probe's output as a reading; StepFailed when it is not one."""
    try:
        found = json.loads(text)
    except ValueError:
        found = None
    if not isinstance(found, dict) or not isinstance(found.get("cards"), list):
        raise StepFailed(f"health on {host.name}: the probe answered no reading: {text[-200:]!r}")
    return found


def is_report(text: str) -> bool:
    """Whether the benchmark wrote its report (it writes it whole, at the end)."""
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


class LocalBackend:
    """The scripts on this machine, each host a folder under ``root``."""

    sandbox = True
    """This machine's CPU stands in for the cards: the benchmark runs without --require-gpu
    and its report says "stand_in" (provisioning.services.is_sandbox)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root or settings.PROVISIONING_LOCAL_ROOT)

    def host_root(self, host: Host) -> Path:
        """The host's folder, directly under ``root``: a name that would lead anywhere else
        ("..", "a/b", a link out) is refused before anything is created or run."""
        path = self.root / host.name
        if path.resolve().parent != self.root.resolve():
            raise StepFailed(f"host name {host.name!r} is not a folder of the sandbox")
        path.mkdir(parents=True, exist_ok=True)
        return path

    def script(self, host: Host, name: str, *args: str) -> None:
        done = subprocess.run(
            ["bash", str(HOST_SCRIPTS / f"{name}.sh"), str(self.host_root(host)), *args],
            capture_output=True,
            text=True,
            timeout=script_timeout(name),
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

    def install_tool(self, host: Host, account: str, order: str) -> None:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            handle.write(order)
        try:
            self.script(host, "install_tool", account, str(build.tool()), handle.name)
        finally:
            Path(handle.name).unlink(missing_ok=True)

    def run_validation(
        self, host: Host, report_name: str, arguments: list[str], *, cards: str
    ) -> str:
        """The benchmark, as it runs on a host; here on this machine's CPU (quick sizes),
        whose stand-in for the cards honours the same variables."""
        environment = {**os.environ, **visible_devices(cards)}
        environment.pop(HIDDEN, None)
        out = self.host_root(host) / "reports" / f"{report_name}.json"
        out.parent.mkdir(exist_ok=True)
        if out.exists():  # a retry after the run finished: keep that report
            return str(out)
        program = build.benchmark()  # the one file a host gets, not the package
        command = [sys.executable, str(program), "--out", str(out), "--quick", *arguments]
        done = subprocess.run(
            [*command, "--cards", cards],
            capture_output=True,
            text=True,
            timeout=BENCHMARK_TIMEOUT,
            env=environment,
            start_new_session=True,  # its own process group, its workers in it: stoppable
        )
        if done.returncode != 0 and not (out.exists() and is_report(out.read_text())):
            out.write_text(json.dumps(crash_report(done.stderr)))
        return str(out)

    def fetch_report(self, host: Host, path: str) -> dict[str, Any]:
        report: dict[str, Any] = json.loads(Path(path).read_text())
        return report

    def stop_validation(self, host: Host, report_name: str) -> None:
        out = self.host_root(host) / "reports" / f"{report_name}.json"
        found = subprocess.run(
            ["pgrep", "-f", "--", still_running(str(out))],
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT,
        )
        for pid in found.stdout.split():  # its process group: the benchmark and its workers
            with contextlib.suppress(ProcessLookupError):
                group = os.getpgid(int(pid))
                if group != os.getpgrp():  # never this worker's own group
                    os.killpg(group, signal.SIGKILL)

    def read_health(self, host: Host, cards: str, since: float, until: float) -> dict[str, Any]:
        visible_devices(cards)  # checked: it goes on a command line
        done = subprocess.run(
            [sys.executable, "-", str(self.host_root(host)), cards, f"{since:.3f}", f"{until:.3f}"],
            input=PROBE.read_text(),
            capture_output=True,
            text=True,
            timeout=HEALTH_TIMEOUT,
        )
        if done.returncode != 0:
            raise StepFailed(f"health on {host.name}: {done.stderr.strip()[-300:]}")
        return health_reading(done.stdout, host)
