"""Telemetry: the lot's cards as the vendor's tool reports them (nvidia-smi or amd-smi),
before, during and after the load, and the kernel log's XID lines for those cards."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import time
from typing import Any

import torch

from .devices import joined
from .report import not_measured

HW_THROTTLE = {0x8: "hw_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake"}
SW_THROTTLE = {0x4: "sw_power_cap", 0x20: "sw_thermal_slowdown"}
NVIDIA_FIELDS = [
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "driver_version",
    "persistence_mode",
    "mig.mode.current",
    "ecc.mode.current",
    "ecc.errors.corrected.volatile.total",
    "ecc.errors.uncorrected.volatile.total",
    "temperature.gpu",
    "power.draw",
    "power.limit",
    "clocks.sm",
    "clocks.max.sm",
    "clocks.mem",
    "clocks_event_reasons.active",
    "utilization.gpu",
]
"""nvidia-smi --query-gpu fields; older drivers call the throttle mask
clocks_throttle_reasons.active (tried when the newer name is refused)."""


def _number(text: Any) -> Any:
    """A tool's field as a number when it is one; "[N/A]", "N/A" and the like stay text."""
    value = str(text).strip()
    try:
        return int(value, 16) if value.startswith("0x") else float(value)
    except ValueError:
        return value


def run_tool(command: list[str], timeout: float = 30) -> tuple[int, str, str]:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return 127, "", f"{command[0]}: not found"
    except OSError as exc:
        return 126, "", f"{command[0]}: {exc}"
    except subprocess.TimeoutExpired:
        return 124, "", f"{command[0]} did not answer within {timeout:.0f} s"
    return done.returncode, done.stdout, done.stderr


def nvidia_query(tool: str, cards: list[int]) -> tuple[list[dict[str, Any]], str]:
    """The lot's cards as nvidia-smi reports them (rows by host index), or why not."""
    fields = list(NVIDIA_FIELDS)
    for attempt in range(2):
        command = [
            tool,
            "--query-gpu=" + ",".join(fields),
            "--format=csv,noheader,nounits",
            "-i",
            joined(cards),
        ]
        code, out, err = run_tool(command)
        if code == 0:
            rows = []
            for line in out.strip().splitlines():
                values = [part.strip() for part in line.split(",")]
                if len(values) != len(fields):
                    continue
                row = {field: _number(value) for field, value in zip(fields, values)}
                row["name"] = str(row["name"])
                if isinstance(row["index"], float):
                    row["index"] = int(row["index"])
                row["driver_version"] = str(values[fields.index("driver_version")])
                row["throttle_reasons"] = row.pop(fields[-2])
                rows.append(row)
            return rows, ""
        if attempt == 0 and "clocks_event_reasons" in (out + err):
            fields[-2] = "clocks_throttle_reasons.active"  # drivers before R535
            continue
        return [], f"{tool} exited {code}: {(err or out).strip()[:300]}"
    return [], f"{tool}: no answer"


def _amd_value(node: Any) -> Any:
    """amd-smi --json writes {"value": 196592, "unit": "MB"} (newer) or "196592 MB"."""
    if isinstance(node, dict) and "value" in node:
        return _number(node["value"])
    if isinstance(node, str):
        match = re.match(r"\s*(-?[0-9.]+)", node)
        return float(match.group(1)) if match else node
    return node


def _amd_list(text: str) -> list[dict[str, Any]]:
    data = json.loads(text)
    if isinstance(data, dict):
        data = data.get("gpu_data", [data])
    return [gpu for gpu in data if isinstance(gpu, dict)]


def amd_query(tool: str, cards: list[int]) -> tuple[list[dict[str, Any]], str]:
    """The lot's cards as amd-smi reports them: ``static --json`` and ``metric --json``."""
    selection = ["-g", *[str(card) for card in cards]]
    code, out, err = run_tool([tool, "static", *selection, "--json"])
    if code != 0:
        return [], f"{tool} static exited {code}: {(err or out).strip()[:300]}"
    code2, out2, _err2 = run_tool([tool, "metric", *selection, "--json"])
    try:
        statics = _amd_list(out)
        metrics = {gpu.get("gpu"): gpu for gpu in _amd_list(out2)} if code2 == 0 else {}
    except ValueError as exc:
        return [], f"{tool}: not JSON ({exc})"
    rows = []
    for gpu in statics:
        metric = metrics.get(gpu.get("gpu"), {})
        asic, vram = gpu.get("asic", {}), gpu.get("vram", {})
        size = _amd_value(vram.get("size"))
        unit = (
            vram.get("size", {}).get("unit", "MB") if isinstance(vram.get("size"), dict) else "MB"
        )
        ecc = metric.get("ecc", {})
        temperature = metric.get("temperature", {})
        power = metric.get("power", {})
        clock = metric.get("clock", {})
        gfx = clock.get("gfx_0", clock.get("gfx", {}))
        rows.append(
            {
                "index": gpu.get("gpu"),
                "name": str(asic.get("market_name", "")),
                "uuid": str(gpu.get("asic", {}).get("asic_serial", "")),
                "pci.bus_id": str(gpu.get("bus", {}).get("bdf", "")),
                # amd-smi's "MB" is MiB, as nvidia-smi's memory.total
                "memory.total": size * (1024 if unit == "GB" else 1)
                if isinstance(size, float)
                else size,
                "driver_version": str(gpu.get("driver", {}).get("version", "")),
                "mig.mode.current": "[N/A]",
                "ecc.mode.current": "Enabled"
                if str(gpu.get("ras", {}).get("ecc", gpu.get("ecc", {}).get("state", "")))
                .upper()
                .startswith("ENABLED")
                else str(gpu.get("ras", {}).get("ecc", "[N/A]")),
                "persistence_mode": "[N/A]",
                "ecc.errors.corrected.volatile.total": _amd_value(
                    ecc.get("total_correctable_count", "[N/A]")
                ),
                "ecc.errors.uncorrected.volatile.total": _amd_value(
                    ecc.get("total_uncorrectable_count", "[N/A]")
                ),
                "temperature.gpu": _amd_value(
                    temperature.get("hotspot", temperature.get("edge", "[N/A]"))
                ),
                "power.draw": _amd_value(power.get("socket_power", "[N/A]")),
                "clocks.sm": _amd_value(gfx.get("clk", "[N/A]")) if isinstance(gfx, dict) else gfx,
                "throttle_reasons": str(metric.get("throttle", metric.get("violation", "[N/A]")))[
                    :200
                ],
                "target_graphics_version": str(asic.get("target_graphics_version", "")),
            }
        )
    return rows, ""


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
