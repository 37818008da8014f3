"""The benchmark measures the lot's cards and only them: each backend shows it the lot's
cards (and no others), the benchmark checks what it sees before it measures anything, and a
mismatch is a kept report (devices.ok false, exit 3), never a measurement of other cards.

Real processes on this machine's CPU, whose stand-in for the cards honours
CUDA_VISIBLE_DEVICES as a GPU would; the SSH backend also against a loopback sshd."""

from __future__ import annotations

import json
import os
import runpy
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from provisioning.backends import LocalBackend, StepFailed
from provisioning.ssh import SshBackend, run_to_end
from reservations.models import Host
from tests.provisioning.shipped import BENCHMARK
from tests.sshd import Sshd, start_sshd

DEVICE_MISMATCH = 3  # the benchmark's documented exit status (EXIT_DEVICE_MISMATCH)
FOUR_LOTS = Host(name="four-lots", address="127.0.0.1")
"""A host whose cards 0..7 are four lots; nothing here needs it in the database."""


def local_report(backend: LocalBackend, name: str, cards: str, *args: str) -> dict[str, Any]:
    path = backend.run_validation(FOUR_LOTS, name, list(args), cards=cards)
    report: dict[str, Any] = json.loads(Path(path).read_text())
    return report


def forcing_wrapper(folder: Path, cards: str) -> Path:
    """An environment's interpreter launcher that forces its own cards over the caller's,
    as an activation script or a host-wide profile might."""
    wrapper = folder / "python-forcing-cards"
    python = shlex.quote(sys.executable)
    wrapper.write_text(f'#!/bin/sh\nexport CUDA_VISIBLE_DEVICES={cards}\nexec {python} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def assert_nothing_measured(report: dict[str, Any]) -> None:
    assert not {"stack", "essentials", "split", "per_card", "collectives", "verdict"} & set(report)
    assert report["error"] == report["devices"]["problem"]  # the page's "did not finish" line


@pytest.fixture(scope="module")
def lots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The benchmark of two lots on one host, through the local backend, started by a
    worker whose own environment shows other cards (a host-wide default)."""
    backend = LocalBackend(tmp_path_factory.mktemp("hosts"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
        patch.setenv("ROCR_VISIBLE_DEVICES", "0,1")
        return {cards: local_report(backend, f"lot-{cards}", cards) for cards in ("0,1", "2,3")}


@pytest.mark.parametrize("cards", ["0,1", "2,3"])
def test_each_lots_benchmark_sees_its_own_cards_and_only_them(
    lots: dict[str, dict[str, Any]], cards: str
) -> None:
    devices = lots[cards]["devices"]
    own = [int(card) for card in cards.split(",")]
    assert devices["ok"] is True, devices["problem"]
    assert (devices["cards"], devices["expected"], devices["visible"]) == (own, 2, 2)
    assert devices["variable"] == {"CUDA_VISIBLE_DEVICES": cards}
    assert [device["card"] for device in devices["list"]] == own
    assert devices["problem"] == ""
    assert devices["stand_in"].startswith("CPU stand-in")  # labelled, not passed off as GPUs
    assert devices["list"][0]["uuid"] == "not measured: no GPU (CPU stand-in)"
    # Then it measured, on those two.
    assert lots[cards]["essentials"]["all_reduce"]["correct"] is True
    assert lots[cards]["split"]["two_cards"]["mode"] == "data_parallel"


def test_fewer_visible_cards_than_expected_measure_nothing_and_the_report_is_kept(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "smoke-ran"
    report = local_report(
        LocalBackend(tmp_path / "hosts"),
        "one-card-shown",
        "3",
        "--expect-devices",
        "2",
        "--smoke",
        f"touch {marker}",
    )
    devices = report["devices"]
    assert devices["ok"] is False
    assert (devices["expected"], devices["visible"], devices["cards"]) == (2, 1, [3])
    assert devices["problem"] == (
        "2 device(s) expected, 1 visible (CUDA_VISIBLE_DEVICES=3). Nothing was measured."
    )
    assert_nothing_measured(report)  # the benchmark's report, not a crash report over it
    assert not marker.exists()  # not even the researcher's smoke command ran


def test_an_environment_forcing_other_cards_exits_with_the_mismatch_status(
    tmp_path: Path,
) -> None:
    out = tmp_path / "report.json"
    python = str(forcing_wrapper(tmp_path, "0,1"))
    done = subprocess.run(
        [python, str(BENCHMARK), "--out", str(out), "--quick", "--cards", "2,3"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "2,3"},  # what the backend exports
    )
    assert done.returncode == DEVICE_MISMATCH, done.stderr[-2000:]
    report = json.loads(out.read_text())
    devices = report["devices"]
    assert devices["ok"] is False
    assert devices["variable"] == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert [device["card"] for device in devices["list"]] == [0, 1]  # what it saw, recorded
    assert devices["problem"] == (
        "The visible-device variable (CUDA_VISIBLE_DEVICES=0,1) shows card(s) 0,1, "
        "but this lot's cards are 2,3. Nothing was measured."
    )
    assert devices["problem"] in done.stderr
    assert_nothing_measured(report)


def test_each_independent_experiment_runs_in_a_process_that_sees_only_its_card(
    tmp_path: Path,
) -> None:
    report = local_report(
        LocalBackend(tmp_path / "hosts"), "independent", "2,3", "--usage-mode", "independent"
    )
    assert report["devices"]["ok"] is True
    runs = report["split"]["independent"]
    assert [run["card"] for run in runs] == [2, 3]
    for run in runs:
        assert run["variable"] == {"CUDA_VISIBLE_DEVICES": str(run["card"])}
        assert run["visible"] == 1
        assert run["device"]["card"] == run["card"]
        assert run["fits"] is True
        assert run["median_step_ms"] > 0


def test_the_rocm_variables_are_read_as_hip_reads_them() -> None:
    visible_cards = runpy.run_path(str(BENCHMARK))["visible_cards"]

    def seen(rocm: bool = True, **environ: str) -> tuple[list[int] | None, str]:
        _variable, cards, problem = visible_cards(environ, rocm)
        return cards, problem

    assert seen(HIP_VISIBLE_DEVICES="2,3") == ([2, 3], "")
    assert seen(CUDA_VISIBLE_DEVICES="2,3") == ([2, 3], "")  # HIP honours it in HIP's place
    assert seen(ROCR_VISIBLE_DEVICES="2,3") == ([2, 3], "")
    assert seen(ROCR_VISIBLE_DEVICES="1,2,3", HIP_VISIBLE_DEVICES="1,2") == ([2, 3], "")
    cards, problem = seen(ROCR_VISIBLE_DEVICES="2,3", HIP_VISIBLE_DEVICES="2,3")  # no card
    assert cards is None
    assert "has no position 3" in problem
    cards, problem = seen(rocm=False, HIP_VISIBLE_DEVICES="2,3")  # CUDA does not read it
    assert (cards, problem) == (
        None,
        "No visible-device variable is set (CUDA_VISIBLE_DEVICES): every card shows.",
    )
    assert seen(rocm=False, CUDA_VISIBLE_DEVICES="GPU-5c4d")[1] == (
        "CUDA_VISIBLE_DEVICES is 'GPU-5c4d', not a list of card indices."
    )


# --------------------------------------------------------------------------- the SSH backend


@dataclass
class Done:
    exit_status: int
    stdout: str = ""
    stderr: str = ""


@dataclass
class RecordingSession:
    """Stands for the SSH session: records each command; the benchmark exits with
    ``benchmark_exit`` and leaves ``written`` as its report."""

    benchmark_exit: int = 0
    written: str = ""
    commands: list[tuple[str, str | None]] = field(default_factory=list)

    async def run(self, command: str, **options: Any) -> Done:
        self.commands.append((command, options.get("input")))
        if command.startswith("test -s "):
            return Done(1)  # no report yet: a first run
        if command.startswith("env "):
            return Done(self.benchmark_exit, stderr="benchmark output")
        if command.startswith("cat ") and not options.get("input"):
            return Done(0 if self.written else 1, stdout=self.written)
        return Done(0)


def recorded_ssh_backend(monkeypatch: pytest.MonkeyPatch, session: RecordingSession) -> SshBackend:
    key = asyncssh.generate_private_key("ssh-ed25519").export_private_key().decode()
    backend = SshBackend(
        client_key=key,
        remote_dir="/var/lib/gpulots",
        remote_root="/",
        real_accounts=True,
        python="/opt/envs/pytorch-2.9/bin/python",
        benchmark_args=[],
        connect_timeout=5,
    )
    monkeypatch.setattr(
        backend, "_with_session", lambda host, steps: run_to_end(lambda: steps(session))
    )
    return backend


def test_the_ssh_command_shows_the_benchmark_the_lots_cards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = RecordingSession()
    report = recorded_ssh_backend(monkeypatch, session).run_validation(
        FOUR_LOTS, "job-7", ["--usage-mode", "distributed"], cards="2,3"
    )
    (benchmark,) = [command for command, _input in session.commands if command.startswith("env")]
    words = shlex.split(benchmark)
    assert words[:7] == [
        "env",
        "-u",
        "ROCR_VISIBLE_DEVICES",  # HIP would read the other two as positions in its list
        "CUDA_DEVICE_ORDER=PCI_BUS_ID",  # the host's numbering, as nvidia-smi shows it
        "CUDA_VISIBLE_DEVICES=2,3",
        "HIP_VISIBLE_DEVICES=2,3",
        "timeout",
    ]
    assert words[-4:] == ["--usage-mode", "distributed", "--cards", "2,3"]
    assert report == "/var/lib/gpulots/reports/job-7.json"


@pytest.mark.parametrize(
    ("written", "crash_stored"),
    [('{"version": 1, "devices": {"ok": false}, "error": "..."}', False), ("", True)],
    ids=["its-own-report-kept", "a-crash-report-written"],
)
def test_a_failed_ssh_benchmark_keeps_the_report_it_wrote(
    monkeypatch: pytest.MonkeyPatch, written: str, crash_stored: bool
) -> None:
    session = RecordingSession(benchmark_exit=DEVICE_MISMATCH if written else 1, written=written)
    recorded_ssh_backend(monkeypatch, session).run_validation(FOUR_LOTS, "job-7", [], cards="2")
    stored = [
        json.loads(text) for command, text in session.commands if "reports/" in command and text
    ]
    assert bool(stored) is crash_stored
    assert all(report["error"] == "benchmark output" for report in stored)


@pytest.mark.parametrize("cards", ["2;reboot", "2,3\n", "", "2,,3", "-1", "GPU-5c4d", "$(id)"])
def test_both_backends_refuse_anything_but_card_indices_before_running(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cards: str
) -> None:
    session = RecordingSession()
    with pytest.raises(StepFailed, match="not a list of card indices"):
        recorded_ssh_backend(monkeypatch, session).run_validation(FOUR_LOTS, "j", [], cards=cards)
    assert session.commands == []
    local = LocalBackend(tmp_path / "hosts")
    with pytest.raises(StepFailed, match="not a list of card indices"):
        local.run_validation(FOUR_LOTS, "j", [], cards=cards)
    assert not (tmp_path / "hosts" / FOUR_LOTS.name / "reports").exists()


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    yield from start_sshd(tmp_path_factory.mktemp("sshd"))


def test_over_ssh_the_benchmark_sees_the_lots_cards_and_a_forced_set_is_reported(
    loopback: Sshd, tmp_path: Path
) -> None:
    host = Host(
        name="ssh-four-lots",
        address="127.0.0.1",
        ssh_port=loopback.port,
        ssh_user=loopback.user,
        ssh_host_key=loopback.host_key,
    )

    def report(python: str, name: str) -> dict[str, Any]:
        backend = SshBackend(
            client_key=loopback.client_key,
            remote_dir=str(tmp_path / "var-lib-gpulots"),
            remote_root=str(tmp_path / "host-root"),
            real_accounts=False,
            python=python,
            benchmark_args=["--quick"],
        )
        return backend.fetch_report(host, backend.run_validation(host, name, [], cards="2,3"))

    devices = report(sys.executable, "lot-2-3")["devices"]
    assert devices["ok"] is True, devices["problem"]
    assert devices["variable"] == {"CUDA_VISIBLE_DEVICES": "2,3"}
    assert [device["card"] for device in devices["list"]] == [2, 3]

    forced = report(str(forcing_wrapper(tmp_path, "0,1")), "lot-2-3-forced")
    assert forced["devices"]["ok"] is False
    assert forced["devices"]["variable"] == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert_nothing_measured(forced)  # kept, not replaced by a crash report
