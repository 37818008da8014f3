"""The vendor's tools read (nvidia-smi, amd-smi) and the kernel's XID lines: what the
acceptance benchmark's telemetry reads, and the health probe a host runs during the window.

The standard library only and no import of the package: the acceptance benchmark imports it
from its zipapp (``from .smi import ...``), and the health check sends this very file to a
host on standard input and runs it there, once per lot and reading, with no PyTorch, no
process on the cards and nothing written (provisioning.health):

    python3 - ROOT CARDS SINCE UNTIL < smi.py        (prints one JSON reading)

ROOT is the host's root ("/" on a real host; a folder on a sandbox or test host, whose
``usr/bin/nvidia-smi`` and ``var/log/kernel.log`` stand for the host's own); CARDS the
lot's host indices ("2,3"); SINCE and UNTIL the epoch seconds of the previous reading and
of this one, by the server's clock (the XID lines stamped in between: each line is read by
exactly one reading). A host with neither tool is a *stand-in* (the CPU machines that run the
tests and the demo): the reading says so, lists the lot's indices with nothing measured,
and still reads the kernel log.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Any

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
HEALTH_FIELDS = [
    "index",
    "uuid",
    "pci.bus_id",
    "temperature.gpu",
    "clocks_event_reasons.active",
    "ecc.errors.uncorrected.volatile.total",
    "ecc.errors.corrected.volatile.total",
    "power.draw",
    "utilization.gpu",
]
"""What a health reading asks of nvidia-smi: a few fields, one call (well under a second)."""
MEMORY_FIELDS = ["index", "remapped_rows.pending", "remapped_rows.failure", "retired_pages.pending"]
"""Asked apart: drivers and cards that know neither row remapping nor page retirement refuse
the whole query, and the reading then says "not measured" for these alone."""
THROTTLE = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
XID_LINE = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})[^)]*\): (\d+)"
)


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


def nvidia_query(
    tool: str, cards: list[int], fields: list[str] | None = None
) -> tuple[list[dict[str, Any]], str]:
    """The lot's cards as nvidia-smi reports them (rows by host index), or why not. The
    throttle mask, whichever name the driver knows, is the row's ``throttle_reasons``."""
    fields = list(fields or NVIDIA_FIELDS)
    for attempt in range(2):
        command = [
            tool,
            "--query-gpu=" + ",".join(fields),
            "--format=csv,noheader,nounits",
            "-i",
            ",".join(str(card) for card in cards),
        ]
        code, out, err = run_tool(command)
        if code == 0:
            rows = []
            for line in out.strip().splitlines():
                values = [part.strip() for part in line.split(",")]
                if len(values) != len(fields):
                    continue
                row = {field: _number(value) for field, value in zip(fields, values)}
                for text in ("name", "uuid", "pci.bus_id", "driver_version"):
                    if text in row:
                        row[text] = values[fields.index(text)]
                if isinstance(row["index"], float):
                    row["index"] = int(row["index"])
                for name in THROTTLE:
                    if name in row:
                        row["throttle_reasons"] = row.pop(name)
                rows.append(row)
            return rows, ""
        if attempt == 0 and THROTTLE[0] in fields and THROTTLE[0] in (out + err):
            fields[fields.index(THROTTLE[0])] = THROTTLE[1]  # drivers before R535
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


# --------------------------------------------------------------------------- health probe


def _tool(root: str, name: str) -> str:
    """The host's ``name``: on a sandbox or test host its root's usr/bin, else PATH."""
    if root.rstrip("/"):
        own = os.path.join(root, "usr", "bin", name)
        return own if os.access(own, os.X_OK) else ""
    return shutil.which(name) or ""


def kernel_lines(root: str, since: float, until: float) -> tuple[list[tuple[float, str]], str]:
    """The kernel log's lines stamped in (``since``, ``until``], as (epoch second, text),
    and where they came from (or why not): ``journalctl -k -o short-unix`` on a host, the root's
    var/log/kernel.log (the same format) on a sandbox or test host."""
    if root.rstrip("/"):
        path = os.path.join(root, "var", "log", "kernel.log")
        if not os.path.exists(path):
            return [], "kernel.log"
        with open(path, encoding="utf-8", errors="replace") as handle:
            text, source = handle.read(), "kernel.log"
    else:
        command = ["journalctl", "-k", "-o", "short-unix", "--no-pager", f"--since=@{since:.0f}"]
        command.append(f"--until=@{until + 1:.0f}")
        code, text, err = run_tool(command, timeout=15)
        if code != 0:
            why = (err or text).strip()[:160]
            return [], f"not measured: the kernel log is not readable ({why})"
        source = "journalctl"
    lines = []
    for line in text.splitlines():
        stamp, _space, rest = line.partition(" ")
        try:
            at = float(stamp)
        except ValueError:
            continue
        if since < at <= until:
            lines.append((at, rest))
    return lines, source


def xid_events(lines: list[tuple[float, str]], buses: list[str]) -> list[dict[str, Any]]:
    """The XID lines of the lot's cards (by PCI bus id: the driver names a card
    "PCI:0000:18:00", nvidia-smi "00000000:18:00.0"): when, which card, which code."""
    wanted = {bus.lower()[-12:].rsplit(".", 1)[0]: bus for bus in buses if bus}
    events = []
    for at, text in lines:
        match = XID_LINE.search(text)
        if not match:
            continue
        bus = match.group(1).lower()
        if wanted and bus not in wanted:
            continue  # another tenant's card on the same host
        events.append({"at": at, "bus": bus, "code": int(match.group(2)), "line": text[-300:]})
    return events


def reading(root: str, cards: list[int], since: float, until: float) -> dict[str, Any]:
    """One health reading of the lot's ``cards``: what the vendor's tool says of each, the
    XID lines stamped in (``since``, ``until``], and what could not be read."""
    started = time.monotonic()
    found: dict[str, Any] = {"version": 1, "at": time.time(), "cards": [], "errors": []}
    nvidia, amd = _tool(root, "nvidia-smi"), _tool(root, "amd-smi")
    if nvidia:
        found["tool"] = "nvidia-smi"
        rows, why = nvidia_query(nvidia, cards, HEALTH_FIELDS)
        if not rows and len(cards) > 1:  # one card off the bus fails the query: ask each
            for card in cards:
                one, why_card = nvidia_query(nvidia, [card], HEALTH_FIELDS)
                rows += one
                why = why_card if why_card else why
        memory, why_memory = nvidia_query(nvidia, cards, MEMORY_FIELDS) if rows else ([], "")
        extra = {row["index"]: row for row in memory}
        for row in rows:
            row.update({k: v for k, v in extra.get(row["index"], {}).items() if k != "index"})
            if why_memory:
                row["memory_rows"] = "not measured: " + why_memory[:200]
    elif amd:
        found["tool"] = "amd-smi"
        rows, why = amd_query(amd, cards)
    else:
        found["tool"], rows, why = "stand-in", [{"index": card} for card in cards], ""
    found["stand_in"] = found["tool"] == "stand-in"
    if why:
        found["errors"].append(why)
    found["cards"] = rows
    lines, source = kernel_lines(root, since, until)
    found["kernel_log"] = source
    found["xid"] = xid_events(lines, [str(row.get("pci.bus_id", "")) for row in rows])
    found["seconds"] = round(time.monotonic() - started, 3)
    return found


def main(argv: list[str]) -> int:
    root, cards = argv[0], [int(card) for card in argv[1].split(",")]
    print(json.dumps(reading(root, cards, float(argv[2]), float(argv[3]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
