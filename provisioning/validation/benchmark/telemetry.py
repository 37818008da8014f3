"""Telemetry: the lot's cards as the vendor's tool reports them (nvidia-smi or amd-smi),
before, during and after the load, and the kernel log's XID lines for those cards."""

from __future__ import annotations

import argparse
import shutil
import time
from typing import Any

import torch

from .report import not_measured
from .smi import amd_query, nvidia_query, run_tool


def xid_lines(buses: list[str]) -> tuple[Any, str]:
    """NVRM XID lines in the kernel log for the lot's cards (their PCI bus ids), or why not.

    nvidia-smi writes a bus id as "00000000:18:00.0"; the driver's XID lines name the card
    without the function: "NVRM: Xid (PCI:0000:18:00): 79, ..." (older: "Xid (0000:18:00)")."""
    code, out, err = run_tool(["dmesg"], timeout=15)
    if code != 0:
        return not_measured(
            f"the kernel log is not readable here ({(err or out).strip()[:120]})"
        ), ""
    wanted = [bus.lower()[-12:].rsplit(".", 1)[0] for bus in buses if bus]
    hits = [
        line
        for line in out.splitlines()
        if "Xid" in line and (not wanted or any(bus in line.lower() for bus in wanted))
    ]
    return len(hits), "\n".join(hits[-5:])


class Telemetry:
    """Reads the lot's cards from the vendor's tool."""

    def __init__(self, args: argparse.Namespace, cards: list[int]) -> None:
        self.cards = cards
        self.kind = ""
        self.tool = ""
        self.why = ""
        nvidia = shutil.which("nvidia-smi")
        amd = shutil.which("amd-smi")
        if args.nvidia_smi:
            self.kind, self.tool = "nvidia-smi", args.nvidia_smi
        elif args.amd_smi:
            self.kind, self.tool = "amd-smi", args.amd_smi
        elif amd and torch.version.hip:
            self.kind, self.tool = "amd-smi", amd
        elif nvidia:
            self.kind, self.tool = "nvidia-smi", nvidia
        elif amd:
            self.kind, self.tool = "amd-smi", amd
        else:
            self.why = "not measured: neither nvidia-smi nor amd-smi is on PATH"

    def read(self) -> tuple[list[dict[str, Any]], str]:
        if not self.tool:
            return [], self.why
        if self.kind == "nvidia-smi":
            return nvidia_query(self.tool, self.cards)
        return amd_query(self.tool, self.cards)

    def sample(self) -> dict[str, Any]:
        rows, why = self.read()
        keep = (
            "index",
            "clocks.sm",
            "clocks.mem",
            "throttle_reasons",
            "power.draw",
            "temperature.gpu",
            "utilization.gpu",
        )
        return {
            "t": round(time.time(), 2),
            "cards": [{key: row.get(key) for key in keep if key in row} for row in rows],
            **({"error": why} if why else {}),
        }
