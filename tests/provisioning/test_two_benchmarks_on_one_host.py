"""Two benchmarks at once on one host (two lots being validated), each with its collectives:
neither may take the port the other's ranks meet at.

The race is made certain rather than waited for: a helper holds every port of the kernel's
ephemeral range of the parity that ``bind(port 0)`` tries first (odd ones on Linux) except
one (and that one on IPv6), so that a port chosen by binding 0 and closing the probe is that
one port for both benchmarks, which then both try to listen on it (IPv4 only: EADDRINUSE in
one of them, the lot held; else the two lots' ranks would meet at one store, cross-wired).
Connections (gloo's, the store's clients) take even ports, which stay free. And the two
start their collectives together: their first telemetry read (a fake nvidia-smi) waits
until both have made it."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.provisioning.shipped import BENCHMARK

RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
NVIDIA_SMI = Path(__file__).resolve().parent / "fakes" / "nvidia-smi"
MEETING = """#!/bin/sh
# The benchmarks' nvidia-smi: each call leaves a mark; none answers before two are left.
mktemp -p "$GPULOTS_TEST_MEETING" >/dev/null
for _ in $(seq 600); do
    [ "$(ls "$GPULOTS_TEST_MEETING" | wc -l)" -ge 2 ] && exec {fake} "$@"
    sleep 0.1
done
exit 1
"""
SQUATTER = textwrap.dedent(
    """
    import resource, socket, sys
    low, high = map(int, open(sys.argv[1]).read().split())
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = []
    for port in range(low | 1, high + 1, 2):
        probe = socket.socket()
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:  # in use already: held by someone else, just as well
            probe.close()
            continue
        held.append(probe)
    left = held.pop(len(held) // 2)
    port = left.getsockname()[1]
    left.close()
    if socket.has_ipv6:  # the store listens on IPv6 first: there, the port is taken too
        six = socket.socket(socket.AF_INET6)
        six.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        six.bind(("::", port))
        held.append(six)
    print(port, len(held), flush=True)
    sys.stdin.read()  # held until the test closes its end
    """
)


@pytest.fixture
def one_odd_port_left() -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """Every odd ephemeral port held but one: the one a bind-to-0 probe gets."""
    if not RANGE.exists():
        pytest.skip("no Linux ephemeral port range to narrow")
    low, high = map(int, RANGE.read_text().split())
    needed = (high - low) // 2 + 200
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < needed:
        pytest.skip(f"holding the odd ports takes {needed} open files")
    squatter = subprocess.Popen(
        [sys.executable, "-c", SQUATTER, str(RANGE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert squatter.stdout is not None
        port, _count = map(int, squatter.stdout.readline().split())
        yield port, squatter
    finally:
        if squatter.stdin is not None:
            squatter.stdin.close()
        squatter.wait(timeout=30)


def probed_port() -> int:
    """A port chosen as the old benchmark chose it: bound to 0, read, closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def meeting_point(folder: Path) -> Path:
    """An nvidia-smi that answers once two benchmarks have called it (marks in ``folder``)."""
    folder.mkdir()
    tool = folder.parent / "nvidia-smi-meeting"
    tool.write_text(MEETING.replace("{fake}", str(NVIDIA_SMI)))
    tool.chmod(0o755)
    return tool


def start(folder: Path, cards: str, tool: Path) -> subprocess.Popen[str]:
    folder.mkdir()
    environment = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": cards,
        "GPULOTS_TEST_MEETING": str(tool.parent / "meeting"),
    }
    environment.pop("GPULOTS_BENCH_FAULT", None)
    return subprocess.Popen(
        [
            *(sys.executable, str(BENCHMARK), "--out", str(folder / "report.json"), "--quick"),
            *("--cards", cards, "--skip", "per_card,split", "--nvidia-smi", str(tool)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        cwd=folder,
    )


def test_two_benchmarks_at_once_both_measure_their_collectives(
    tmp_path: Path, one_odd_port_left: tuple[int, subprocess.Popen[str]]
) -> None:
    port, squatter = one_odd_port_left
    assert probed_port() == port  # the old way of choosing gives both benchmarks this one

    tool = meeting_point(tmp_path / "meeting")
    started = time.monotonic()
    runs = {cards: start(tmp_path / f"lot-{cards}", cards, tool) for cards in ("0,1", "2,3")}
    reports: dict[str, dict[str, Any]] = {}
    for cards, process in runs.items():
        _out, err = process.communicate(timeout=300)
        reports[cards] = json.loads((tmp_path / f"lot-{cards}" / "report.json").read_text())
        assert process.returncode == 0, err[-3000:]
    assert squatter.poll() is None  # the ports were held the whole time
    assert time.monotonic() - started < 300

    assert len(list((tmp_path / "meeting").iterdir())) >= 2  # they met before measuring
    for cards, report in reports.items():
        assert report["telemetry"]["source"] == "nvidia-smi"
        section = report["sections"]["collectives"]
        assert section["status"] == "ok", (cards, section.get("error"))
        collectives = report["collectives"]
        assert collectives["world_size"] == 2
        for name in ("all_reduce", "all_gather", "reduce_scatter"):
            assert collectives[name], (cards, name)
            assert all(row["correct"] for row in collectives[name]), (cards, name)
        assert report["essentials"]["all_reduce"]["correct"] is True
        assert report["devices"]["cards"] == [int(card) for card in cards.split(",")]
