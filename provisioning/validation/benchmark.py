#!/usr/bin/env python
"""The acceptance benchmark (report v2): hardware acceptance and the researcher's split test.

Standalone: the Python standard library (3.9+) and PyTorch, nothing else (no Django), one
file, copied to a host and run there in the booked environment's interpreter. On GPUs it
uses NCCL (RCCL on ROCm); on a CPU, processes with gloo stand in for the cards and the
report says ``"stand_in": true``.

    python benchmark.py --out report.json --cards 2,3 [--expect-devices 2]
        [--thresholds '{"sku": "H200", "memory_gib": 141, ...}'] [--require-gpu]
        [--hypothesis shorter_step|bigger_batch|make_possible] [--usage-mode distributed]
        [--params-billion 7] [--precision bf16] [--seq-len 2048] [--micro-batch 1]
        [--workload training] [--expected-arch sm_90] [--extensions flash_attn]
        [--smoke "python -c 'import mylib'"] [--timeout 900] [--nvidia-smi PATH]
        [--amd-smi PATH] [--section-budgets '{"collectives": 30}'] [--quick]

Sections, each isolated (one that fails records its error, the others still run; the
report is rewritten atomically to --out after each, ``"complete": false`` until the end):

* devices: the lot's cards and only them (the visible-device variables, as v1), exactly
  the expected count; on a mismatch nothing is measured (exit 3);
* stack: PyTorch, CUDA/HIP, NCCL, driver, Python and the interpreter, the arch list;
* telemetry: nvidia-smi (``--query-gpu ... --format=csv,noheader,nounits -i CARDS``) or
  amd-smi (``static --json``, ``metric --json``) before and after, sampled during the
  per-card load; ECC counters and XID lines from the kernel log before and after;
* per_card: on each card at the same time, in its own process: a kernel check, dense matmul
  (bf16; fp8 through ``torch._scaled_mm`` where the kind has an fp8 peak and the card can),
  HBM bandwidth (device copy), a memory pattern test over most of free memory (time
  bounded), a sustained load;
* collectives: P2P copy bandwidth both directions, all_reduce / all_gather /
  reduce_scatter swept over sizes, in- and out-of-place, nccl-tests' busbw, each checked;
* split: the hypothesis test, transformer blocks sized from the order, built on the meta
  device and materialised per rank, DDP (exposed communication = DDP step - no_sync step)
  or FSDP2 when the model does not fit one card;
* verdict: the answer, what was measured, what was held constant, in plain words.

Exit codes: 0 accepted, 1 crash or a failed section (report written with "error"), 2 usage
error, 3 device mismatch, 4 acceptance failed, 5 timeout (a section or the whole run),
6 no GPU visible while --require-gpu.

Test-only fault injection (never set on a host): GPULOTS_BENCH_FAULT=wrong_all_reduce
(rank 0's all-reduce result is perturbed), rank_raises (rank 1 raises in the collectives
section), rank_hangs (rank 1 sleeps forever in the collectives section), oom_two_cards
(rank 1 runs out of memory in the two-card split run).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import queue as _queue
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

REPORT_VERSION = 2
GIB = 2**30
NOT_MEASURED = "not measured: no GPU"
STAND_IN = "not measured: no GPU (CPU stand-in)"
EXIT_OK = 0
EXIT_CRASH = 1
EXIT_USAGE = 2
EXIT_DEVICE_MISMATCH = 3
"""The visible devices are not the lot's cards: the report says what was seen; nothing ran."""
EXIT_ACCEPTANCE = 4
EXIT_TIMEOUT = 5
EXIT_NO_GPU = 6
CARD_LIST = re.compile(r"[0-9]+(,[0-9]+)*")
PCI_PARTS = ("domain", "bus", "device")
IMBALANCE_RATIO = 0.5
"""Peak memory of the emptier card below half the fuller one's: an unbalanced split."""
COMPUTE_IMBALANCE = 1.15
"""One rank's compute time over 1.15x the other's: an unbalanced split."""
FAULT = os.environ.get("GPULOTS_BENCH_FAULT", "")
HW_THROTTLE = {0x8: "hw_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake"}
SW_THROTTLE = {0x4: "sw_power_cap", 0x20: "sw_thermal_slowdown"}
DEFAULT_BUDGETS = {  # seconds, on GPUs (full / --quick); the CPU stand-in uses the quick ones
    "per_card": (240, 90),
    "collectives": (240, 90),
    "split_one_card": (180, 90),
    "split_two_cards": (240, 120),
    "independent": (180, 90),
}
SKIPPABLE = ("per_card", "collectives", "split", "independent", "smoke")
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


def now() -> str:
    # timezone.utc, not the UTC alias ruff's UP017 suggests: that one is 3.11+, and the
    # hosts may run 3.9 or 3.10
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


def not_measured(why: str) -> str:
    return why if why.startswith("not measured: ") else f"not measured: {why}"


def significant(value: float, digits: int = 4) -> float:
    """Small and large figures alike keep their first digits."""
    return float(f"{value:.{digits}g}")


def version_tuple(text: Any) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"[0-9]+", str(text))[:3])


def at_least(found: Any, minimum: Any) -> bool:
    have, need = version_tuple(found), version_tuple(minimum)
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


# --------------------------------------------------------------------------- devices


def accelerator() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def device_for(rank: int) -> torch.device:
    return torch.device("cuda", rank) if accelerator() == "cuda" else torch.device("cpu")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def arch_name(index: int) -> str:
    """sm_90, sm_100 on NVIDIA; the gfx name (gfx942) on ROCm."""
    properties = torch.cuda.get_device_properties(index)
    if torch.version.hip:
        return str(getattr(properties, "gcnArchName", "gfx?")).split(":")[0]
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm_{major}{minor}"


def card_list(text: str) -> list[int]:
    """``--cards``: host device indices, "2,3" (or "3"), each once."""
    found = [int(card) for card in text.split(",")] if CARD_LIST.fullmatch(text) else []
    if not found or len(set(found)) != len(found):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of distinct card indices")
    return found


def visible_cards(
    environ: Mapping[str, str], rocm: bool
) -> tuple[dict[str, str | None], list[int] | None, str]:
    """The host cards the runtime exposes, as its visible-device variables say: the
    variables it reads (None: unset), the cards (None: the variables do not say which), and
    what is wrong ("" when nothing).

    CUDA, and the CPU stand-in, read CUDA_VISIBLE_DEVICES. HIP reads HIP_VISIBLE_DEVICES (or
    CUDA_VISIBLE_DEVICES in its place) as positions in the list ROCR_VISIBLE_DEVICES exposes
    when that one is set: ROCR_VISIBLE_DEVICES=2,3 with HIP_VISIBLE_DEVICES=2,3 is no card.
    """
    names = ["HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"]
    variable = {name: environ.get(name) for name in (names if rocm else names[1:2])}
    lists: dict[str, list[int]] = {}
    for name, value in variable.items():
        if value is not None and not CARD_LIST.fullmatch(value):
            return variable, None, f"{name} is {value!r}, not a list of card indices."
        if value is not None:
            lists[name] = [int(card) for card in value.split(",")]
    if not lists:
        unset = ", ".join(variable)
        return variable, None, f"No visible-device variable is set ({unset}): every card shows."
    chosen = next((name for name in names[:2] if name in lists), "")
    base = lists.get("ROCR_VISIBLE_DEVICES")
    if base is None or not chosen:
        return variable, lists[chosen or "ROCR_VISIBLE_DEVICES"], ""
    if max(lists[chosen]) >= len(base):
        return (
            variable,
            None,
            f"{chosen} picks by position among the {len(base)} cards ROCR_VISIBLE_DEVICES "
            f"exposes and has no position {max(lists[chosen])} there.",
        )
    return variable, [base[position] for position in lists[chosen]], ""


def device_identity(index: int, card: int | None) -> dict[str, Any]:
    """What says which physical card visible device ``index`` is; ``card`` is its host
    index. Read, not measured: no kernel runs."""
    if accelerator() != "cuda":
        return {
            "index": index,
            "card": card,
            **dict.fromkeys(["name", "memory_gb", "memory_gib", "uuid", "pci_bus_id"], STAND_IN),
        }
    try:
        properties = torch.cuda.get_device_properties(index)
    except RuntimeError as exc:  # a device the variable names but the runtime cannot open
        return {"index": index, "card": card, "error": str(exc)[:300]}
    unknown = "not measured: this PyTorch build does not report it"
    uuid = getattr(properties, "uuid", None)
    domain, bus, slot = (getattr(properties, f"pci_{part}_id", None) for part in PCI_PARTS)
    return {
        "index": index,
        "card": card,
        "name": properties.name,
        "memory_gb": round(properties.total_memory / 1e9, 1),
        "memory_gib": round(properties.total_memory / GIB, 2),
        "uuid": unknown if uuid is None else str(uuid),
        "pci_bus_id": unknown
        if None in (domain, bus, slot)
        else f"{domain:04x}:{bus:02x}:{slot:02x}.0",
    }


def check_devices(cards: list[int], expected: int) -> dict[str, Any]:
    """Whether this process sees the lot's ``cards``, ``expected`` devices, and nothing else."""
    variable, seen, problem = visible_cards(os.environ, rocm=bool(torch.version.hip))
    gpu = accelerator() == "cuda"
    visible = torch.cuda.device_count() if gpu else len(seen or [])
    shown = ", ".join(f"{name}={value}" for name, value in variable.items() if value is not None)
    if not problem and seen != cards:
        problem = (
            f"The visible-device variable ({shown}) shows card(s) {joined(seen or [])}, "
            f"but this lot's cards are {joined(cards)}."
        )
    elif not problem and visible != expected:
        problem = f"{expected} device(s) expected, {visible} visible ({shown})."
    if problem:
        problem += " Nothing was measured."
    hosts = seen or []
    return {
        "ok": not problem,
        "expected": expected,
        "cards": cards,
        "visible": visible,
        "variable": variable,
        "problem": problem,
        "stand_in": ""
        if gpu
        else "CPU stand-in, no GPU: one process per entry of CUDA_VISIBLE_DEVICES",
        "list": [
            device_identity(index, hosts[index] if index < len(hosts) else None)
            for index in range(visible)
        ],
    }


def joined(cards: list[int]) -> str:
    return ",".join(str(card) for card in cards)


# --------------------------------------------------------------------------- telemetry


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


# --------------------------------------------------------------------------- report


class Report:
    """The JSON report, rewritten atomically to ``path`` whenever ``save`` is called."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "version": REPORT_VERSION,
            "complete": False,
            "started_at": now(),
            "finished_at": None,
            "exit_code": None,
            "sections": {},
            "acceptance": {"passed": None, "checks": [], "failed": []},
        }

    def save(self) -> None:
        folder = os.path.dirname(os.path.abspath(self.path))
        handle, temporary = tempfile.mkstemp(prefix=".report-", suffix=".json", dir=folder)
        try:
            with os.fdopen(handle, "w") as out:
                json.dump(self.data, out, indent=1, default=str)
            os.replace(temporary, self.path)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise

    def check(
        self,
        check_id: str,
        value: Any,
        passed: bool | None,
        *,
        card: int | None = None,
        unit: str = "",
        reference: Any = None,
        threshold: Any = None,
        note: str = "",
    ) -> None:
        self.data["acceptance"]["checks"].append(
            {
                "id": check_id,
                "card": card,
                "value": value,
                "unit": unit,
                "reference": reference,
                "threshold": threshold,
                "passed": passed,
                "note": note,
            }
        )

    def summarise(self, stand_in: bool) -> None:
        checks = self.data["acceptance"]["checks"]
        failed = []
        for c in checks:
            if c["passed"] is False:
                where = "" if c["card"] is None else f" (card {c['card']})"
                failed.append(f"{c['id']}{where}: {c['note'] or 'failed'}")
        passed: bool | None
        if failed:
            passed = False
        elif any(c["passed"] is True for c in checks) and not stand_in:
            passed = True
        else:
            passed = None  # nothing on real hardware could be checked
        self.data["acceptance"].update(passed=passed, failed=failed)


class SectionFailed(Exception):
    def __init__(self, message: str, trace: str = "") -> None:
        super().__init__(message)
        self.trace = trace


class SectionTimeout(Exception):
    pass


class Terminated(BaseException):
    """SIGTERM (the host's `timeout`, the operator): the report is written, exit 5."""


# --------------------------------------------------------------------------- ranks


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _rank_main(
    rank: int,
    world: int,
    port: int,
    target: str,
    payload: dict[str, Any],
    out: Any,
    group_seconds: float,
    environment: dict[str, str],
) -> None:
    """One rank: its own process, its own card. It sends back a result or its traceback;
    no barrier after an exception (the other rank may be gone)."""
    grouped = False
    try:
        os.environ.update(environment)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        device = device_for(rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        else:  # each stand-in process its share of the cores, as a card is its own
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        if payload.get("group", world > 1):
            dist.init_process_group(
                "nccl" if device.type == "cuda" else "gloo",
                rank=rank,
                world_size=world,
                timeout=_dt.timedelta(seconds=group_seconds),
            )
            grouped = True
        started = time.perf_counter()
        result = globals()[target](rank, world, device, payload)
        if isinstance(result, dict):
            result["rank_seconds"] = round(time.perf_counter() - started, 2)
        out.put({"rank": rank, "result": result})
    except BaseException:  # sent back whole: the parent records it
        out.put({"rank": rank, "error": traceback.format_exc()[-4000:]})
        return
    if grouped:
        # the result is in; the parent ends this process if this hangs
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def run_ranks(
    name: str,
    world: int,
    target: str,
    payload: dict[str, Any],
    budget: float,
    tick: Callable[[], None] | None = None,
    environment: dict[str, str] | None = None,
) -> list[Any]:
    """``target`` on ``world`` ranks, each in a spawned process; their results by rank.
    A rank that raises: SectionFailed with its traceback, the others ended at once. A rank
    still running at ``budget`` seconds: SectionTimeout, all ended."""
    context = mp.get_context("spawn")
    out = context.Queue()
    port = free_port()
    group_seconds = max(10.0, budget)
    processes = [
        context.Process(
            target=_rank_main,
            args=(rank, world, port, target, payload, out, group_seconds, environment or {}),
            daemon=True,
        )
        for rank in range(world)
    ]
    for process in processes:
        process.start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + budget
    dead_since: dict[int, float] = {}
    try:
        while len(results) < world:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = [rank for rank in range(world) if rank not in results]
                raise SectionTimeout(
                    f"{name}: rank(s) {joined(missing)} still running after {budget:.0f} s "
                    "(the section's budget); ended"
                )
            try:
                message = out.get(timeout=min(1.0, remaining))
            except _queue.Empty:
                if tick is not None:
                    tick()
                for rank, process in enumerate(processes):
                    if rank in results or process.exitcode is None:
                        continue
                    first = dead_since.setdefault(rank, time.monotonic())
                    if time.monotonic() - first > 3:  # its message had time to arrive
                        raise SectionFailed(
                            f"{name}: rank {rank} exited with status {process.exitcode} "
                            "without a result"
                        ) from None
                continue
            if "error" in message:
                raise SectionFailed(
                    f"{name}: rank {message['rank']} raised: "
                    f"{message['error'].strip().splitlines()[-1][:300]}",
                    message["error"],
                )
            results[message["rank"]] = found = message["result"]
            if isinstance(found, dict) and found.get("fits") is False and world > 1:
                # out of memory on one rank: the others wait in a collective for it (NCCL
                # until the group's timeout); end them now, the run's answer is known
                for rank in range(world):
                    results.setdefault(
                        rank,
                        {
                            "fits": False,
                            "error": f"ended: rank {message['rank']} ran out of memory",
                        },
                    )
    finally:
        done = len(results) == world
        for process in processes:
            process.join(timeout=10 if done else 0.1)
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join(timeout=3)
            if process.is_alive():
                process.kill()
                process.join(timeout=3)
        out.close()
    return [results[rank] for rank in range(world)]


# --------------------------------------------------------------------------- per card


def timed(device: torch.device, fn: Callable[[], Any], repeat: int, warmup: int = 1) -> float:
    """Median seconds of ``fn`` after ``warmup`` calls (CUDA events on a GPU)."""
    for _ in range(warmup):
        fn()
    synchronize(device)
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000)
        else:
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def _part(results: dict[str, Any], name: str, fn: Callable[[], Any]) -> None:
    """One measurement of a section: its error is recorded, the next one still runs."""
    started = time.perf_counter()
    try:
        results[name] = fn()
    except Exception as exc:
        results[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
    if isinstance(results[name], dict):
        results[name]["seconds"] = round(time.perf_counter() - started, 2)
    found = results[name]
    out_of_memory = str(found.get("error", "")).startswith("OutOfMemoryError")
    if isinstance(found, dict) and out_of_memory and device_is_cuda():
        torch.cuda.empty_cache()


def device_is_cuda() -> bool:
    return torch.cuda.is_available()


def matmul_rate(device: torch.device, dtype: torch.dtype, n: int, repeat: int) -> dict[str, Any]:
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    seconds = timed(device, lambda: a @ b, repeat, warmup=2)
    return {
        "dtype": str(dtype).replace("torch.", ""),
        "n": n,
        "tflops": significant(2 * n**3 / seconds / 1e12),
    }


def fp8_matmul(device: torch.device, n: int, fp8: torch.dtype) -> Callable[[], Any]:
    """One n x n x n fp8 product through ``torch._scaled_mm`` as cuBLASLt takes it: the first
    operand row-major, the second column-major, n a multiple of 16, tensor-wise float32
    scales, a bf16 result."""
    if n % 16:
        raise ValueError(f"fp8 matmul: {n} is not a multiple of 16")
    a = torch.randn(n, n, device=device).to(fp8)
    b = torch.randn(n, n, device=device).to(fp8).t()  # column-major, as _scaled_mm wants
    one = torch.tensor(1.0, dtype=torch.float32, device=device)  # tensor-wise: 0-dim float32
    # use_fast_accum: the datasheet's fp8 peak is the tensor cores' own accumulation; without
    # it cuBLAS promotes partial sums to fp32 every few k-steps and runs well under the peak
    return lambda: torch._scaled_mm(
        a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
    )


def fp8_rate(device: torch.device, n: int, repeat: int) -> dict[str, Any]:
    if device.type != "cuda":
        return {"tflops": STAND_IN}
    fp8 = getattr(torch, "float8_e4m3fnuz" if torch.version.hip else "float8_e4m3fn", None)
    if fp8 is None or not hasattr(torch, "_scaled_mm"):
        return {"tflops": not_measured(f"torch {torch.__version__} has no fp8 matmul")}
    if not torch.version.hip and torch.cuda.get_device_capability(device) < (8, 9):
        return {"tflops": not_measured("this card has no fp8 tensor cores (before sm_89)")}
    seconds = timed(device, fp8_matmul(device, n, fp8), repeat, warmup=2)
    return {
        "dtype": str(fp8).replace("torch.", ""),
        "n": n,
        "tflops": significant(2 * n**3 / seconds / 1e12),
    }


def copy_bandwidth(device: torch.device, size: int, repeat: int) -> dict[str, Any]:
    source = torch.empty(size, dtype=torch.uint8, device=device)
    source.fill_(7)
    target = torch.empty_like(source)
    seconds = timed(device, lambda: target.copy_(source), repeat, warmup=2)
    return {"bytes": size, "gbps": significant(2 * size / seconds / 1e9)}  # read + write


def memory_pattern(
    device: torch.device, fraction: float, cap: int, seconds: float
) -> dict[str, Any]:
    """Write and verify patterns over most of free memory, chunk by chunk, within
    ``seconds``: all-zeros, all-ones, 0x55/0xAA and each word's own index."""
    if device.type == "cuda":
        # the caching allocator still holds the earlier parts' blocks: given back first, or
        # the driver's free figure leaves them out of the test (and of its coverage)
        torch.cuda.empty_cache()
        free, _total = torch.cuda.mem_get_info(device)
    else:
        free = cap
    target = min(int(free * fraction), cap)
    chunk = max(2**20, min(GIB, target // 4) // 4 * 4)
    chunks: list[torch.Tensor] = []
    try:
        while sum(c.numel() * 4 for c in chunks) + chunk <= target:
            chunks.append(torch.empty(chunk // 4, dtype=torch.int32, device=device))
    except RuntimeError:  # out of memory a little early: test what was allocated
        pass
    if device.type == "cuda":
        torch.cuda.empty_cache()
    patterns = [0, -1, 0x55555555, -0x55555556]  # 0xAAAAAAAA as int32
    errors = 0
    passes = 0
    started = time.perf_counter()
    stopped = ""
    for pattern in [*patterns, None]:
        for offset, block in enumerate(chunks):
            if time.perf_counter() - started > seconds:
                stopped = f"stopped at its time limit ({seconds:.0f} s)"
                break
            if pattern is None:
                expected = torch.arange(block.numel(), dtype=torch.int32, device=device) + offset
                block.copy_(expected)
                errors += int((block != expected).sum())
                del expected
            else:
                block.fill_(pattern)
                errors += int((block != pattern).sum())
        if stopped:
            break
        passes += 1
    synchronize(device)
    tested = sum(c.numel() * 4 for c in chunks)
    del chunks
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {
        "free_bytes": int(free),
        "tested_bytes": tested,
        "coverage": round(tested / free, 3) if free else 0.0,
        "patterns_completed": passes,
        "patterns": len(patterns) + 1,
        "errors": errors,
        "note": stopped,
    }


def sustained(device: torch.device, dtype: torch.dtype, n: int, seconds: float) -> dict[str, Any]:
    """Back-to-back matmuls for ``seconds``: the rate in one-second windows."""
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    windows: list[float] = []
    started_at = time.time()
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        window = time.perf_counter()
        count = 0
        while time.perf_counter() - window < min(1.0, seconds):
            a @ b
            count += 1
            if device.type == "cuda" and count % 8 == 0:
                synchronize(device)
        synchronize(device)
        windows.append(2 * n**3 * count / (time.perf_counter() - window) / 1e12)
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "from": started_at,
        "to": time.time(),
        "dtype": str(dtype).replace("torch.", ""),
        "windows_tflops": [significant(w) for w in windows],
        "first_tflops": significant(windows[0]),
        "last_tflops": significant(windows[-1]),
        "min_tflops": significant(min(windows)),
        "drop": round(1 - min(windows) / max(windows), 3) if max(windows) else 0.0,
    }


def per_card_worker(
    rank: int, world: int, device: torch.device, config: dict[str, Any]
) -> dict[str, Any]:
    gpu = device.type == "cuda"
    quick = config["quick"]
    results: dict[str, Any] = {"rank": rank, "device": str(device)}

    def kernel() -> dict[str, Any]:
        x = torch.randn(64, 64, device=device)
        (x @ x).sum().item()
        return {"ok": True, "error": ""}

    _part(results, "kernel_check", kernel)
    dtype = torch.bfloat16 if gpu else torch.float32
    n = (4096 if quick else 8192) if gpu else (256 if quick else 512)
    repeat = (10 if quick else 30) if gpu else 3
    _part(results, "matmul_bf16", lambda: matmul_rate(device, dtype, n, repeat))
    if config.get("fp8"):
        _part(results, "matmul_fp8", lambda: fp8_rate(device, n, repeat))
    size = ((512 if quick else 2048) if gpu else 32) * 2**20
    _part(results, "hbm", lambda: copy_bandwidth(device, size, repeat))
    _part(
        results,
        "memory_pattern",
        lambda: memory_pattern(
            device,
            0.85,
            (1 << 62) if gpu else 64 * 2**20,
            (10 if quick else 30) if gpu else 2,
        ),
    )
    _part(
        results,
        "sustained",
        lambda: sustained(device, dtype, n, (5 if quick else 60) if gpu else (1.5 if quick else 3)),
    )
    return results


# --------------------------------------------------------------------------- collectives


def _collective_row(
    size: int, place: str, seconds: float, bus_factor: float, correct: bool
) -> dict[str, Any]:
    """One size of a collective sweep: algorithm bandwidth (bytes / time) and bus bandwidth
    (algbw × the collective's factor, as nccl-tests defines it)."""
    algbw = size / seconds / 1e9
    return {
        "bytes": size,
        "place": place,
        "ms": significant(seconds * 1000),
        "algbw_gbps": significant(algbw),
        "busbw_gbps": significant(algbw * bus_factor),
        "correct": correct,
    }


def _timed_collective(device: torch.device, fn: Callable[[], Any], repeat: int) -> float:
    """Median seconds of a collective, each call ended by a barrier-free sync on this rank;
    the slowest rank's time is what counts (max over ranks)."""
    seconds = timed(device, fn, repeat, warmup=1)
    slowest = torch.tensor([seconds], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(slowest.item())


def collectives_worker(
    rank: int, world: int, device: torch.device, config: dict[str, Any]
) -> dict[str, Any]:
    if FAULT == "rank_raises" and rank == 1:
        raise RuntimeError("injected fault: rank 1 raises (GPULOTS_BENCH_FAULT=rank_raises)")
    if FAULT == "rank_hangs" and rank == 1:
        time.sleep(10**6)
    quick, gpu = config["quick"], device.type == "cuda"
    top = (26 if quick else 30) if gpu else (20 if quick else 22)  # GPU: 64 MiB / 1 GiB
    sizes = [2**p for p in range(10 if not gpu else 13, top + 1, 2 if gpu else 5)]
    if sizes[-1] != 2**top:
        sizes.append(2**top)
    results: dict[str, Any] = {"all_reduce": [], "all_gather": [], "reduce_scatter": []}
    for size in sizes:
        count = size // 4
        repeat = 3 if not gpu else (5 if size >= 2**28 else 20)
        # all_reduce: in place only (torch.distributed has no out-of-place all_reduce)
        tensor = torch.full((count,), float(rank + 1), device=device)
        dist.all_reduce(tensor)
        if FAULT == "wrong_all_reduce" and rank == 0:
            tensor[count // 2] += 1.0  # what a broken link or a bad card would return
        expected = world * (world + 1) / 2
        correct = bool(torch.equal(tensor, torch.full_like(tensor, expected)))
        seconds = _timed_collective(
            device,
            lambda t=tensor: dist.all_reduce(t),  # type: ignore[misc]
            repeat,
        )
        # nccl-tests' bus bandwidth: all_reduce moves 2(n-1)/n of the buffer per rank.
        results["all_reduce"].append(
            _collective_row(size, "in", seconds, 2 * (world - 1) / world, correct)
        )
        del tensor
        # all_gather / reduce_scatter: ``size`` is the whole (gathered) buffer, as nccl-tests
        part = count // world
        for place in ("out", "in"):
            whole = torch.zeros(part * world, device=device)
            if place == "out":
                mine = torch.full((part,), float(rank + 1), device=device)
            else:
                mine = whole[rank * part : (rank + 1) * part]
                mine.fill_(float(rank + 1))
            dist.all_gather_into_tensor(whole, mine)
            wanted = torch.arange(1, world + 1, device=device, dtype=whole.dtype).repeat_interleave(
                part
            )
            correct = bool(torch.equal(whole, wanted))
            seconds = _timed_collective(
                device,
                lambda w=whole, m=mine: dist.all_gather_into_tensor(w, m),  # type: ignore[misc]
                repeat,
            )
            results["all_gather"].append(
                _collective_row(size, place, seconds, (world - 1) / world, correct)
            )
            source = torch.full((part * world,), float(rank + 1), device=device)
            if place == "out":
                result = torch.zeros(part, device=device)
            else:
                result = source[rank * part : (rank + 1) * part]
            dist.reduce_scatter_tensor(result, source)
            correct = bool(torch.equal(result, torch.full_like(result, expected)))
            source.fill_(1.0)
            seconds = _timed_collective(
                device,
                lambda r=result, s=source: dist.reduce_scatter_tensor(r, s),  # type: ignore[misc]
                repeat,
            )
            results["reduce_scatter"].append(
                _collective_row(size, place, seconds, (world - 1) / world, correct)
            )
            del whole, mine, source, result
    results["p2p"] = p2p_bandwidth(rank, device, quick) if rank == 0 else None
    return results


def p2p_bandwidth(rank: int, device: torch.device, quick: bool) -> dict[str, Any]:
    """Copy bandwidth card 0 -> card 1 and back, from rank 0 (both cards visible to it)."""
    if device.type != "cuda":
        return {
            "0_to_1_gbps": not_measured("CPU stand-in (no device-to-device link)"),
            "1_to_0_gbps": not_measured("CPU stand-in (no device-to-device link)"),
            "peer_access": STAND_IN,
        }
    if torch.cuda.device_count() < 2:
        return {
            "0_to_1_gbps": not_measured("one device visible"),
            "1_to_0_gbps": not_measured("one device visible"),
        }
    size = (256 if quick else 1024) * 2**20
    here, there = torch.device("cuda", 0), torch.device("cuda", 1)
    a = torch.empty(size, dtype=torch.uint8, device=here)
    b = torch.empty(size, dtype=torch.uint8, device=there)

    def one_way(source: torch.Tensor, target: torch.Tensor) -> float:
        for _ in range(2):
            target.copy_(source, non_blocking=True)
        torch.cuda.synchronize(here)
        torch.cuda.synchronize(there)
        started = time.perf_counter()
        for _ in range(5):
            target.copy_(source, non_blocking=True)
        torch.cuda.synchronize(here)
        torch.cuda.synchronize(there)
        return significant(5 * size / (time.perf_counter() - started) / 1e9)

    return {
        "bytes": size,
        "0_to_1_gbps": one_way(a, b),
        "1_to_0_gbps": one_way(b, a),
        "peer_access": bool(torch.cuda.can_device_access_peer(0, 1)),
    }


def nccl_transport(folder: str) -> str:
    """The transports NCCL's INFO lines name ("via P2P/CUMEM", "via NVLS", "via NET/IB")."""
    found: dict[str, int] = {}
    for name in os.listdir(folder):
        try:
            with open(os.path.join(folder, name), errors="replace") as handle:
                for line in handle:
                    match = re.search(r"\bvia (\S+)", line)
                    if match:
                        found[match.group(1)] = found.get(match.group(1), 0) + 1
        except OSError:
            continue
    if not found:
        return not_measured("NCCL's INFO log named no transport")
    return ", ".join(f"{name} ({count} channels)" for name, count in sorted(found.items()))


# --------------------------------------------------------------------------- the split test


class Block(torch.nn.Module):
    """A pre-norm transformer block: causal self-attention and a 4x MLP."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False)
        self.proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.norm2 = torch.nn.LayerNorm(hidden)
        self.up = torch.nn.Linear(hidden, 4 * hidden, bias=False)
        self.down = torch.nn.Linear(4 * hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        qkv = self.qkv(self.norm1(x)).view(batch, length, 3, self.heads, hidden // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, hidden))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Transformer(torch.nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


SHAPES = [  # (up to this many parameters, hidden, heads): common model widths
    (0.25e9, 768, 12),
    (0.7e9, 1024, 16),
    (2e9, 2048, 16),
    (5e9, 3072, 24),
    (11e9, 4096, 32),
    (25e9, 5120, 40),
    (50e9, 6656, 52),
    (float("inf"), 8192, 64),
]


def block_params(hidden: int) -> int:
    return 12 * hidden * hidden + 4 * hidden


def shape_for(params: float) -> tuple[int, int, int]:
    """(layers, hidden, heads) of transformer blocks of about ``params`` parameters."""
    hidden, heads = next((h, n) for limit, h, n in SHAPES if params <= limit)
    return max(1, round(params / block_params(hidden))), hidden, heads


def memory_needed(
    layers: int, hidden: int, config: dict[str, Any], world: int, sharded: bool
) -> float:
    """Bytes per card, estimated: fp32 weights, gradients and AdamW's two moments (16 B a
    parameter; weights only for inference), what a training step holds for a moment on top
    (autocast's 16-bit copy of the weights, 2 B, and the foreach AdamW's temporaries, about
    4 B: 22 B a parameter at the peak), activations (34 B a token and width per layer in
    16 bit, as Korthikanti et al.), a workspace."""
    params = layers * block_params(hidden) + 2 * hidden
    if config["workload"] == "inference":
        per_param = 2
    else:
        per_param = 16 + 4 + (0 if config["measured_precision"] == "fp32" else 2)
    state = per_param * params
    if sharded:
        state = state // world + 2 * 4 * block_params(hidden)  # two blocks gathered at a time
    tokens = config["micro_batch"] * config["seq_len"]
    width = 2 if config["measured_precision"] == "fp32" else 1
    activations = (
        34 * tokens * hidden * layers * width
        if config["workload"] != "inference"
        else 4 * tokens * hidden * 4
    )
    return state + activations + 1.5 * GIB


def largest_fitting(
    hidden: int, config: dict[str, Any], memory: float, world: int, sharded: bool
) -> int:
    layers = 0
    while (
        memory_needed(layers + 1, hidden, config, world, sharded) <= 0.9 * memory
        and layers < 10_000
    ):
        layers += 1
    return layers


def materialise(model: torch.nn.Module, device: torch.device, seed: int) -> None:
    """Parameters made on ``device`` (each rank its own shard under FSDP2) and initialised
    there: the full model never exists on the host."""
    model.to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
            if local.ndim >= 2:
                local.normal_(0.0, 0.02, generator=generator)
            elif name.endswith("weight"):
                local.fill_(1.0)
            else:
                local.zero_()


def _fully_shard() -> Any:
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard  # type: ignore[no-redef,unused-ignore]
    return fully_shard


def peak_memory(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / GIB, "cuda_max_allocated_gib"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, "process_peak_rss_gib"


def split_worker(
    rank: int, world: int, device: torch.device, config: dict[str, Any]
) -> dict[str, Any]:
    """One rank of a run: ``mode`` single (one card), ddp (DDP steps, then no_sync steps) or
    fsdp (FSDP2). ``accumulation`` micro-steps of ``micro_batch`` each make one step."""
    layers, hidden, heads = config["layers"], config["hidden"], config["heads"]
    mode, accumulation = config["mode"], config["accumulation"]
    micro, length = config["micro_batch"], config["seq_len"]
    training = config["workload"] != "inference"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config["measured_precision"])
    autocast = dtype is not None and device.type == "cuda"
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    try:
        with torch.device("meta"):
            model: torch.nn.Module = Transformer(layers, hidden, heads)
        if mode == "fsdp":
            fully_shard = _fully_shard()
            for block in model.blocks:  # type: ignore[union-attr]
                fully_shard(block)
            fully_shard(model)
        materialise(model, device, seed=1234 + rank)
        wrapped = model
        if mode == "ddp":
            wrapped = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None
            )
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4) if training else None
        generator = torch.Generator(device="cpu").manual_seed(42 + rank)
        batches = [
            torch.randn(micro, length, hidden, generator=generator).to(device) for _ in range(2)
        ]
    except torch.cuda.OutOfMemoryError as exc:
        return {"fits": False, "error": f"out of memory building the model: {str(exc)[:200]}"}

    def step(sync: bool) -> tuple[float, float]:
        """(seconds of the step, seconds of its forward/backward compute)."""
        synchronize(device)
        started = time.perf_counter()
        for index in range(accumulation):
            x = batches[index % len(batches)]
            quiet = mode == "ddp" and not sync
            context: Any = getattr(wrapped, "no_sync")() if quiet else _nothing()  # noqa: B009
            if mode == "fsdp" and hasattr(model, "set_requires_gradient_sync"):
                getattr(model, "set_requires_gradient_sync")(sync or index == accumulation - 1)  # noqa: B009
            cast = torch.autocast(device.type, dtype=dtype or torch.bfloat16, enabled=autocast)
            with context:  # noqa: SIM117 (one manager a statement: 3.9 has no parenthesised ones)
                with cast:
                    if training:
                        out = wrapped(x)
                        loss = F.mse_loss(out.float(), x.roll(1, dims=1).float()) / accumulation
                        loss.backward()
                    else:
                        with torch.no_grad():
                            wrapped(x)
        synchronize(device)
        compute = time.perf_counter() - started
        if optimizer is not None:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        return time.perf_counter() - started, compute

    def phase(sync: bool) -> tuple[list[float], list[float]]:
        steps, computes = [], []
        for index in range(config["warmup"] + config["steps"]):
            seconds, compute = step(sync)
            if index >= config["warmup"]:
                steps.append(seconds)
                computes.append(compute)
        return steps, computes

    try:
        if FAULT == "oom_two_cards" and mode != "single" and rank == 1:
            raise torch.cuda.OutOfMemoryError("injected fault: rank 1 out of memory")
        steps, computes = phase(True)
        quiet: list[float] = []
        if mode == "ddp":
            quiet, computes = phase(False)  # no exchange at all: the compute alone
    except torch.cuda.OutOfMemoryError as exc:
        return {"fits": False, "error": f"out of memory in a step: {str(exc)[:200]}"}
    peak, source = peak_memory(device)
    median = statistics.median(steps)
    result = {
        "fits": True,
        "error": "",
        "median_step_ms": round(median * 1000, 3),
        "compute_ms": round(statistics.median(computes) * 1000, 3),
        "samples_per_s": round(micro * accumulation * world / median, 3),
        "tokens_per_s": round(micro * accumulation * world * length / median, 1),
        "peak_memory_gib": round(peak, 3),
        "memory_source": source,
    }
    if quiet:
        result["no_sync_step_ms"] = round(statistics.median(quiet) * 1000, 3)
    return result


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _independent_worker(card: int, config: dict[str, Any], out: Any) -> None:
    """One of the two independent experiments: this process sees its own card, no other."""
    if torch.cuda.is_initialized():  # too late: the runtime read the variables already
        out.put({"card": card, "crash": "CUDA was initialised before narrowing to the card"})
        return
    os.environ.update(CUDA_VISIBLE_DEVICES=str(card), HIP_VISIBLE_DEVICES=str(card))
    os.environ.pop("ROCR_VISIBLE_DEVICES", None)  # HIP would read ours as positions in it
    try:
        variable, _seen, _problem = visible_cards(os.environ, rocm=bool(torch.version.hip))
        visible = torch.cuda.device_count() if torch.cuda.is_available() else 1
        if visible != 1:
            raise RuntimeError(f"the run for card {card} sees {visible} devices, not 1")
        identity = device_identity(0, card)
        result = split_worker(0, 1, device_for(0), {**config, "mode": "single"})
        out.put(
            {"card": card, "variable": variable, "visible": visible, "device": identity, **result}
        )
    except Exception:  # reported by the parent, with the traceback
        out.put({"card": card, "crash": traceback.format_exc()[-2000:]})


def independent_runs(
    config: dict[str, Any], host_cards: list[int], budget: float
) -> list[dict[str, Any]]:
    """Each card's one-card run, at the same time, each in a process that sees only its
    card: as the two accounts of "two independent experiments" will use the lot."""
    context = mp.get_context("spawn")
    out = context.Queue()
    processes = [
        context.Process(target=_independent_worker, args=(card, config, out), daemon=True)
        for card in host_cards
    ]
    for process in processes:
        process.start()
    results: list[dict[str, Any]] = []
    deadline = time.monotonic() + budget
    try:
        while len(results) < len(processes):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SectionTimeout(f"independent: still running after {budget:.0f} s; ended")
            try:
                results.append(out.get(timeout=min(1.0, remaining)))
            except _queue.Empty:
                if all(p.exitcode is not None for p in processes) and out.empty():
                    raise SectionFailed("independent: a run exited without a result") from None
    finally:
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
                process.join(timeout=3)
    crashes = [r["crash"] for r in results if "crash" in r]
    if crashes:
        raise SectionFailed("independent: " + crashes[0].strip().splitlines()[-1], crashes[0])
    return sorted(results, key=lambda r: r["card"])


# --------------------------------------------------------------------------- verdict


def verdict(
    hypothesis: str, split: dict[str, Any], model: dict[str, Any], stand_in: bool
) -> dict[str, Any]:
    """The answer to the researcher's hypothesis, with what was measured and held constant."""
    single, pair = split.get("one_card", {}), split.get("two_cards", {})
    held = [
        "the same synthetic data (fixed seed)",
        f"the same model ({model.get('params', '?')} parameters, {model.get('layers')} blocks "
        f"of width {model.get('hidden')})",
        f"the same precision ({model.get('measured_precision')})",
        f"the same sequence length ({model.get('seq_len')}) and micro-batch per card "
        f"({model.get('micro_batch')})",
        "the same optimizer (AdamW)",
    ]
    result: dict[str, Any] = {
        "hypothesis": hypothesis,
        "answer": "not_answered",
        "code": "",
        "measured": "",
        "held_constant": held,
        "scaled_down": bool(model.get("scaled_down")),
        "stand_in": stand_in,
        "speedup": None,
    }
    caveats = []
    if model.get("scaled_down"):
        caveats.append(f"Measured on a scaled-down model: {model.get('why')}")
    if stand_in:
        caveats.append(
            "Measured on a CPU stand-in (gloo processes), not on the cards: "
            "the figures show the method, not the lot's speed."
        )
    if model.get("measured_precision") != model.get("precision"):
        caveats.append(
            f"Ordered in {model.get('precision')}, measured in {model.get('measured_precision')}: "
            f"{model.get('precision_why')}"
        )
    tail = (" " + " ".join(caveats)) if caveats else ""
    if "median_step_ms" not in pair and hypothesis != "make_possible":
        if pair.get("error"):
            why = f"the two-card run failed: {pair['error']}"
        else:
            why = f"the two-card part was {pair.get('mode') or 'not run'}"
        result.update(code="two_cards_not_run", measured=f"Not answered: {why}.{tail}")
        return result
    if hypothesis == "shorter_step":
        held.append(f"the same global batch ({2 * model.get('micro_batch', 1)} samples a step)")
        if not single.get("fits"):
            result.update(
                answer="not_answered",
                code="one_card_does_not_fit",
                measured=f"The model does not fit one card ({single.get('error')}); "
                f"no step time to compare.{tail}",
            )
            return result
        speedup = round(single["median_step_ms"] / pair["median_step_ms"], 2)
        result["speedup"] = speedup
        yes = speedup >= 1.1
        result.update(
            answer="yes" if yes else "no",
            code="shorter" if yes else "not_shorter",
            measured=(
                f"Step time {single['median_step_ms']:.1f} ms on one card (two micro-batches "
                f"accumulated) and {pair['median_step_ms']:.1f} ms on two ({pair['mode']}): "
                f"{speedup}x {'shorter' if yes else 'of one card (not shorter: under 1.1x)'}."
                + _exchange_words(pair)
                + tail
            ),
        )
    elif hypothesis == "bigger_batch":
        held.append(
            f"the same batch per card ({model.get('micro_batch')}): "
            "the global batch doubles on two cards"
        )
        if not single.get("fits"):
            result.update(
                code="one_card_does_not_fit",
                measured=f"The model does not fit one card ({single.get('error')}).{tail}",
            )
            return result
        ratio = round(pair["median_step_ms"] / single["median_step_ms"], 2)
        throughput = round(pair["samples_per_s"] / single["samples_per_s"], 2)
        result["speedup"] = throughput
        yes = ratio <= 1.25
        result.update(
            answer="yes" if yes else "no",
            code="bigger_batch" if yes else "bigger_batch_slower",
            measured=(
                f"Twice the global batch on two cards takes {ratio}x one card's step time "
                f"({pair['median_step_ms']:.1f} against {single['median_step_ms']:.1f} ms): "
                f"{throughput}x the samples per second."
                + ("" if yes else " Over 1.25x: the exchange eats the gain.")
                + _exchange_words(pair)
                + tail
            ),
        )
    else:  # make_possible
        possible = split.get("make_possible", {})
        fits_one = bool(single.get("fits"))
        fits_two = bool(pair.get("fits", "median_step_ms" in pair))
        if fits_one:
            result.update(
                answer="no",
                code="already_fits_one_card",
                measured="The model already fits one card "
                f"(peak {single.get('peak_memory_gib')} GiB): "
                f"the second card is not needed to run it. {_possible_words(possible)}{tail}",
            )
        elif fits_two:
            result.update(
                answer="yes",
                code="fits_two_cards_only",
                measured=f"The model does not fit one card ({single.get('error')}) "
                "and runs sharded (FSDP2) "
                f"on two, peak {pair.get('peak_memory_gib')} GiB per card. "
                f"{_possible_words(possible)}{tail}",
            )
        else:
            result.update(
                answer="no",
                code="fits_neither",
                measured="The model fits neither one card nor two "
                f"({pair.get('error') or pair.get('mode')}). "
                f"{_possible_words(possible)}{tail}",
            )
    if pair.get("imbalanced"):
        result["measured"] += " The two cards are unbalanced: check the split."
    return result


def _exchange_words(pair: dict[str, Any]) -> str:
    exposed = pair.get("exposed_exchange_seconds")
    if isinstance(exposed, (int, float)):
        share = pair.get("exchange_share", 0) * 100
        return f" Exposed exchange {exposed * 1000:.1f} ms a step ({share:.0f} %)."
    return ""


def _possible_words(possible: dict[str, Any]) -> str:
    if not possible:
        return ""
    return (
        f"Largest that fits one card: about {possible.get('one_card_max_params')} parameters; "
        f"two cards sharded: about {possible.get('two_cards_max_params')} ({possible.get('how')})."
    )


# --------------------------------------------------------------------------- main program


class Benchmark:
    def __init__(self, args: argparse.Namespace, thresholds: dict[str, Any]) -> None:
        self.args = args
        self.thresholds = thresholds
        self.report = Report(args.out)
        self.data = self.report.data
        self.started = time.monotonic()
        self.deadline = self.started + args.timeout
        self.timed_out = False
        self.failed_sections: list[str] = []
        self.budgets = json.loads(args.section_budgets) if args.section_budgets else {}
        self.gpu = torch.cuda.is_available()
        self.stand_in = not self.gpu
        self.data.update(
            stand_in=self.stand_in,
            host=socket.gethostname(),
            usage_mode=args.usage_mode,
            thresholds=thresholds,
            order={
                "hypothesis": args.hypothesis,
                "params_billion": args.params_billion,
                "precision": args.precision,
                "seq_len": args.seq_len,
                "micro_batch": args.micro_batch,
                "workload": args.workload,
            },
        )
        self.telemetry: Telemetry | None = None
        self.rows_before: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self.current = ""
        self.config: dict[str, Any] = {}
        self.skip = {name for name in args.skip.split(",") if name}

    # -- the frame

    def budget(self, name: str) -> float:
        full, quick = DEFAULT_BUDGETS.get(name, (120, 60))
        wanted = float(self.budgets.get(name, quick if (self.args.quick or not self.gpu) else full))
        return max(1.0, min(wanted, self.deadline - time.monotonic() - 5))

    def section(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run one section: its outcome and seconds are recorded, the report rewritten."""
        self.current = name
        record: dict[str, Any] = {"status": "ok", "seconds": 0.0, "error": ""}
        self.data["sections"][name] = record
        if name in self.skip:
            record.update(status="skipped", error="skipped: --skip")
            self.report.save()
            return None
        if time.monotonic() > self.deadline - 5:
            record.update(
                status="timeout", error="not run: the run's overall budget (--timeout) was spent"
            )
            self.timed_out = True
            self.report.save()
            return None
        record["status"] = "running"  # a partial report says where the run was
        self.report.save()
        record["status"] = "ok"
        started = time.perf_counter()
        value = None
        try:
            value = fn()
        except SectionTimeout as exc:
            record.update(status="timeout", error=str(exc))
            self.timed_out = True
        except SectionFailed as exc:
            record.update(status="failed", error=str(exc), traceback=exc.trace)
            self.failed_sections.append(name)
        except Terminated:
            record.update(status="timeout", error="terminated (SIGTERM) during this section")
            raise
        except Exception as exc:
            record.update(
                status="failed",
                error=f"{type(exc).__name__}: {exc}"[:500],
                traceback=traceback.format_exc()[-4000:],
            )
            self.failed_sections.append(name)
        record["seconds"] = round(time.perf_counter() - started, 2)
        self.report.save()
        return value

    def check(self, *args: Any, **kwargs: Any) -> None:
        self.report.check(*args, **kwargs)

    def section_missing(self, ids: list[str], section: str) -> None:
        """Checks a failed or cut section could not make: failed, with the reason."""
        record = self.data["sections"].get(section, {})
        if record.get("status") in ("failed", "timeout"):
            for check_id in ids:
                self.check(
                    check_id,
                    not_measured(f"the {section} section {record['status']}"),
                    False,
                    note=f"not measured: the {section} section {record['status']}: "
                    f"{record.get('error', '')[:200]}",
                )

    # -- sections

    def run(self) -> int:
        args = self.args
        devices = self.section("devices", self.devices)
        self.report.save()
        if devices is None or not devices["ok"]:
            problem = devices["problem"] if devices else self.data["sections"]["devices"]["error"]
            self.data["error"] = problem
            self.check(
                "device_count",
                devices["visible"] if devices else None,
                False,
                unit="devices",
                reference=devices["expected"] if devices else None,
                note=problem,
            )
            self.section("telemetry_before", self.telemetry_before)
            return self.finish(EXIT_DEVICE_MISMATCH)
        self.section("stack", self.stack)
        self.section("telemetry_before", self.telemetry_before)
        if not self.gpu and args.require_gpu:
            self.check(
                "gpu_visible",
                0,
                False,
                unit="devices",
                reference=len(args.cards),
                note=self.no_gpu_reason(),
            )
            self.data["error"] = self.no_gpu_reason()
            return self.finish(EXIT_NO_GPU)
        if not self.gpu and self.rows_before:  # a stand-in on a host whose tool lists GPUs
            self.data["devices"]["gpu_tool_lists"] = len(self.rows_before)
            self.check("gpu_visible", 0, None, unit="devices", note=self.no_gpu_reason())
        self.acceptance_static()
        per_card = self.section("per_card", self.per_card)
        self.acceptance_per_card(per_card)
        if len(args.cards) >= 2:
            collectives = self.section("collectives", self.collectives)
            self.acceptance_collectives(collectives)
        else:
            self.data["collectives"] = {"skipped": "one card: no collectives"}
            self.one_card_unmeasured()
        self.section("split", self.split)
        if args.usage_mode == "independent":
            self.section("independent", self.independent)
        self.section("smoke", self.smoke)
        self.section("telemetry_after", self.telemetry_after)
        self.section("verdict", self.make_verdict)
        code = EXIT_OK
        self.report.summarise(self.stand_in)
        if self.data["acceptance"]["passed"] is False:
            code = EXIT_ACCEPTANCE
        if self.failed_sections and code == EXIT_OK:
            code = EXIT_CRASH
            first = self.failed_sections[0]
            self.data["error"] = f"section {first} failed: {self.data['sections'][first]['error']}"
        if self.timed_out:
            code = EXIT_TIMEOUT
        return self.finish(code)

    def finish(self, code: int) -> int:
        self.report.summarise(self.stand_in)
        if code == EXIT_OK and self.data["acceptance"]["passed"] is False:
            code = EXIT_ACCEPTANCE
        self.data.update(
            complete=True,
            finished_at=now(),
            exit_code=code,
            seconds=round(time.monotonic() - self.started, 1),
        )
        self.report.save()
        return code

    def devices(self) -> dict[str, Any]:
        expected = (
            len(self.args.cards) if self.args.expect_devices is None else self.args.expect_devices
        )
        found = check_devices(self.args.cards, expected)
        self.data["devices"] = found
        if found["ok"]:
            self.check(
                "device_count",
                found["visible"],
                True,
                unit="devices",
                reference=expected,
                note="CPU stand-in: the visible-device variable's entries" if self.stand_in else "",
            )
        return found

    def no_gpu_reason(self) -> str:
        rows = self.rows_before
        build = f"torch {torch.__version__} (CUDA {torch.version.cuda}, HIP {torch.version.hip})"
        tool = self.telemetry.kind if self.telemetry else "the GPU tool"
        if rows:
            names = ", ".join(sorted({str(r.get("name")) for r in rows}))
            driver = rows[0].get("driver_version", "?")
            if torch.version.cuda is None and torch.version.hip is None:
                detail = "this PyTorch is a CPU-only build"
            else:
                detail = (
                    f"this wheel (CUDA {torch.version.cuda or torch.version.hip}) needs a newer "
                    f"driver than {driver}, or has no kernels for these cards"
                )
            return (
                f"no GPU visible to PyTorch: {tool} lists {len(rows)} GPU(s) ({names}, "
                f"driver {driver}) but {build} cannot use them (torch.cuda.is_available() is "
                f"false): the wheel does not match the driver ({detail})"
            )
        return f"no GPU visible: {build} sees no device and no GPU tool lists one"

    def stack(self) -> dict[str, Any]:
        args = self.args
        gpu = self.gpu
        devices = []
        if gpu:
            for index in range(torch.cuda.device_count()):
                properties = torch.cuda.get_device_properties(index)
                devices.append(
                    {
                        "index": index,
                        "name": properties.name,
                        "capability": list(torch.cuda.get_device_capability(index)),
                        "arch": arch_name(index),
                        "memory_gb": round(properties.total_memory / 1e9, 1),
                        "memory_gib": round(properties.total_memory / GIB, 2),
                    }
                )
        arch_list = torch.cuda.get_arch_list() if gpu else []
        expected_arch = self.thresholds.get("arch") or args.expected_arch
        supported: Any = not_measured("no expected arch given") if gpu else STAND_IN
        if gpu and expected_arch:
            in_list = any(
                a == expected_arch or a.replace("compute_", "sm_") == expected_arch
                for a in arch_list
            )
            supported = in_list and all(d["arch"] == expected_arch for d in devices)
        nccl: Any = NOT_MEASURED
        if gpu:
            try:
                found = torch.cuda.nccl.version()
                nccl = ".".join(str(p) for p in found) if isinstance(found, tuple) else str(found)
            except Exception as exc:
                nccl = not_measured(f"{type(exc).__name__}: {exc}")
        imported = []
        for name in [e for e in args.extensions.split(",") if e]:
            try:
                __import__(name)
                imported.append({"name": name, "imported": True, "error": ""})
            except Exception as exc:  # any import failure is the finding
                imported.append(
                    {"name": name, "imported": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
                )
        driver_cuda: Any = NOT_MEASURED
        if gpu and not torch.version.hip:
            try:
                raw = torch._C._cuda_getDriverVersion()  # type: ignore[attr-defined]
                driver_cuda = f"{raw // 1000}.{raw % 1000 // 10}"
            except Exception as exc:
                driver_cuda = not_measured(str(exc)[:100])
        result = {
            "torch": torch.__version__,
            "cuda": torch.version.cuda
            if torch.version.cuda
            else not_measured("a CPU build of PyTorch (no CUDA)"),
            "hip": torch.version.hip,
            "nccl": nccl,
            "driver": NOT_MEASURED,
            "driver_cuda": driver_cuda,
            "accelerator": accelerator(),
            "devices": devices,
            "arch_list": arch_list if gpu else NOT_MEASURED,
            "expected_arch": expected_arch,
            "arch_supported": supported if gpu else NOT_MEASURED,
            "extensions": imported,
            "kernel_check": [],
            "python": platform.python_version(),
            "interpreter": sys.executable,
        }
        self.data["stack"] = result
        return result

    def telemetry_before(self) -> dict[str, Any]:
        self.telemetry = Telemetry(self.args, self.args.cards)
        rows, why = self.telemetry.read()
        self.rows_before = rows
        buses = [str(r.get("pci.bus_id", "")) for r in rows]
        xids, lines = xid_lines(buses)
        found = {
            "source": self.telemetry.kind
            if rows
            else (why or not_measured("the tool listed no card")),
            "before": {"cards": rows, "xid_count": xids, "xid_lines": lines, "at": now()},
            "after": not_measured("the run did not get that far"),
            "samples": [],
        }
        self.data["telemetry"] = found
        stack = self.data.get("stack")
        if rows and isinstance(stack, dict):
            stack["driver"] = rows[0].get("driver_version") or NOT_MEASURED
        if why and self.telemetry.tool:
            raise SectionFailed(why)
        return found

    def telemetry_after(self) -> dict[str, Any]:
        telemetry = self.data.get("telemetry", {})
        if self.telemetry is None or not self.telemetry.tool:
            self.check("ecc_errors", not_measured("no GPU tool"), None)
            self.check("xid_errors", not_measured("no GPU tool"), None)
            return telemetry
        rows, why = self.telemetry.read()
        buses = [str(r.get("pci.bus_id", "")) for r in rows]
        xids, lines = xid_lines(buses)
        telemetry["after"] = {
            "cards": rows,
            "xid_count": xids,
            "xid_lines": lines,
            "at": now(),
            **({"error": why} if why else {}),
        }
        before = {r.get("index"): r for r in self.rows_before}
        for row in rows:
            card = row.get("index")
            old = before.get(card, {})
            new_u, old_u = (
                row.get("ecc.errors.uncorrected.volatile.total"),
                old.get("ecc.errors.uncorrected.volatile.total"),
            )
            if isinstance(new_u, float) and isinstance(old_u, float):
                self.check(
                    "ecc_errors",
                    new_u - old_u,
                    new_u == old_u,
                    card=int(card or 0),
                    unit="uncorrected errors during the run",
                    reference=0,
                    threshold=0,
                    note=""
                    if new_u == old_u
                    else f"{new_u - old_u:.0f} uncorrected ECC error(s) during the run",
                )
            else:
                self.check(
                    "ecc_errors",
                    not_measured(f"the tool reports {new_u!r}"),
                    None,
                    card=card if isinstance(card, int) else None,
                )
        before_x = (
            telemetry["before"].get("xid_count")
            if isinstance(telemetry.get("before"), dict)
            else None
        )
        if isinstance(xids, int) and isinstance(before_x, int):
            self.check(
                "xid_errors",
                xids - before_x,
                xids == before_x,
                unit="XID lines during the run",
                reference=0,
                note=""
                if xids == before_x
                else f"{xids - before_x} XID line(s) in the kernel log during the run",
            )
        else:
            self.check(
                "xid_errors",
                xids if isinstance(xids, str) else not_measured("no XID count before"),
                None,
            )
        return telemetry

    def acceptance_static(self) -> None:
        """The checks that read the cards and the stack: SKU, memory, MIG, ECC, persistence,
        the versions."""
        t = self.thresholds
        rows = self.rows_before
        names = [(r.get("index"), str(r.get("name"))) for r in rows]
        if not names and self.gpu:
            names = [
                (
                    self.args.cards[d["index"]]
                    if d["index"] < len(self.args.cards)
                    else d["index"],
                    d["name"],
                )
                for d in self.data.get("stack", {}).get("devices", [])
            ]
        sku = t.get("sku")
        for card, name in names:
            if sku:
                ok = str(sku).lower() in name.lower()
                self.check(
                    "sku",
                    name,
                    ok,
                    card=card,
                    reference=sku,
                    note="" if ok else f"the card is {name}; the kind expects {sku}",
                )
        if sku and not names:
            self.check("sku", not_measured("no GPU and no GPU tool"), None, reference=sku)
        nameplate = t.get("memory_gib")
        share = float(t.get("memory_share_min", 0.9))
        usable: list[tuple[Any, float | None]] = []
        for row in rows:
            total = row.get("memory.total")
            usable.append(
                (row.get("index"), total / 1024 if isinstance(total, float) else None)
            )  # MiB
        if not rows and self.gpu:
            usable = [
                (self.args.cards[d["index"]], d["memory_gib"])
                for d in self.data.get("stack", {}).get("devices", [])
            ]
        for card, gib in usable:
            if gib is None:
                continue
            passed = None if not nameplate else gib >= share * float(nameplate)
            self.check(
                "memory",
                round(gib, 2),
                passed,
                card=card,
                unit="GiB usable",
                reference=nameplate,
                threshold=round(share * float(nameplate), 2) if nameplate else None,
                note=(
                    f"usable {gib:.1f} GiB against a nameplate of {nameplate} GiB (GiB = 2**30)"
                    + ("" if passed is not False else f": under {share:.0%}")
                ),
            )
        for row in rows:
            card = row.get("index")
            mig = str(row.get("mig.mode.current", "[N/A]"))
            mig_on = mig.lower() == "enabled"
            self.check(
                "mig",
                mig,
                (not mig_on) or bool(t.get("mig_allowed")),
                card=card,
                reference="Disabled",
                note="MIG is on: the card is split into instances"
                if mig_on and not t.get("mig_allowed")
                else "",
            )
            ecc = str(row.get("ecc.mode.current", "[N/A]"))
            required = t.get("ecc_required", True)
            ecc_ok: bool | None = ecc.lower() == "enabled"
            if "n/a" in ecc.lower():
                ecc_ok = None
            self.check(
                "ecc",
                ecc,
                ecc_ok if required else None,
                card=card,
                reference="Enabled",
                note="ECC is off" if ecc_ok is False and required else "",
            )
            persistence = str(row.get("persistence_mode", "[N/A]"))
            on = persistence.lower() == "enabled"
            self.check(
                "persistence",
                persistence,
                True if on else (False if t.get("persistence_required") else None),
                card=card,
                reference="Enabled",
                note="" if on else "persistence mode is off",
            )
        stack = self.data.get("stack", {})
        if t.get("min_torch"):
            ok = at_least(torch.__version__, t["min_torch"])
            self.check(
                "stack_torch",
                torch.__version__,
                ok,
                reference=t["min_torch"],
                note="" if ok else f"torch {torch.__version__} is older than {t['min_torch']}",
            )
        if t.get("min_cuda"):
            cuda = torch.version.cuda
            if cuda:
                ok = at_least(cuda, t["min_cuda"])
                self.check(
                    "stack_cuda",
                    cuda,
                    ok,
                    reference=t["min_cuda"],
                    note="" if ok else f"CUDA {cuda} is older than {t['min_cuda']}",
                )
            else:
                self.check(
                    "stack_cuda",
                    not_measured("a PyTorch build without CUDA"),
                    None if self.stand_in else False,
                    reference=t["min_cuda"],
                    note="this PyTorch has no CUDA",
                )
        if t.get("min_rocm"):
            hip = torch.version.hip
            self.check(
                "stack_rocm",
                hip or not_measured("a PyTorch build without HIP"),
                at_least(hip, t["min_rocm"]) if hip else (None if self.stand_in else False),
                reference=t["min_rocm"],
                note=""
                if hip and at_least(hip, t["min_rocm"])
                else "HIP missing or older than required",
            )
        if t.get("min_driver"):
            driver = stack.get("driver")
            if rows and isinstance(driver, str) and not driver.startswith("not measured"):
                ok = at_least(driver, t["min_driver"])
                self.check(
                    "stack_driver",
                    driver,
                    ok,
                    reference=t["min_driver"],
                    note="" if ok else f"driver {driver} is older than R{t['min_driver']}",
                )
            else:
                self.check(
                    "stack_driver",
                    not_measured("no GPU tool to read it"),
                    None,
                    reference=t["min_driver"],
                )
        arch = t.get("arch") or self.args.expected_arch
        if arch:
            if self.gpu:
                ok = stack.get("arch_supported") is True
                self.check(
                    "stack_arch",
                    ", ".join(d["arch"] for d in stack.get("devices", [])),
                    ok,
                    reference=arch,
                    note=""
                    if ok
                    else f"{arch} is not this card's arch or not in torch's arch list "
                    f"{stack.get('arch_list')}",
                )
            else:
                self.check("stack_arch", NOT_MEASURED, None, reference=arch)
        self.report.summarise(self.stand_in)
        self.report.save()

    def sample_telemetry(self) -> None:
        if self.telemetry is None or not self.telemetry.tool:
            return
        interval = 2.0
        last = self.samples[-1]["t"] if self.samples else 0
        if time.time() - last >= interval and len(self.samples) < 400:
            self.samples.append(self.telemetry.sample())

    def per_card(self) -> list[dict[str, Any]]:
        config = {"quick": self.args.quick, "fp8": bool(self.thresholds.get("fp8_tflops"))}
        results = run_ranks(
            "per_card",
            len(self.args.cards),
            "per_card_worker",
            {**config, "group": False},
            self.budget("per_card"),
            tick=self.sample_telemetry,
        )
        self.data["per_card"] = results
        telemetry = self.data.get("telemetry")
        if isinstance(telemetry, dict):
            telemetry["samples"] = self.samples
        first = results[0] if results else {}
        self.data.setdefault("essentials", {}).update(  # v1's figures, from card 0
            matmul=first.get("matmul_bf16"),
            copy_bandwidth_gbps=first.get("hbm", {}).get("gbps", not_measured("no figure")),
            attention=not_measured("v2 times attention inside the split test's blocks"),
        )
        stack = self.data.get("stack")
        if isinstance(stack, dict):
            stack["kernel_check"] = [
                {"device": r["device"], **r.get("kernel_check", {})} for r in results
            ]
        return results

    def acceptance_per_card(self, results: list[dict[str, Any]] | None) -> None:
        if results is None:
            self.section_missing(["matmul_bf16", "hbm", "memory_pattern", "sustained"], "per_card")
            return
        t = self.thresholds
        share_min = float(t.get("matmul_share_min", 0.6))
        hbm_min = float(t.get("hbm_share_min", 0.7))
        stand = "CPU stand-in: no datasheet comparison"
        for rank, result in enumerate(results):
            card = self.args.cards[rank]
            for key, peak_key in (("matmul_bf16", "bf16_tflops"), ("matmul_fp8", "fp8_tflops")):
                if key not in result:
                    continue
                found = result[key]
                value = found.get("tflops", not_measured(found.get("error", "?")))
                peak = t.get(peak_key)
                if isinstance(value, float) and peak and not self.stand_in:
                    share = value / float(peak)
                    self.check(
                        key,
                        value,
                        share >= share_min,
                        card=card,
                        unit="TFLOP/s",
                        reference=peak,
                        threshold=round(share_min * float(peak), 1),
                        note=f"{share:.0%} of the datasheet peak"
                        + ("" if share >= share_min else f", under {share_min:.0%}"),
                    )
                else:
                    failed = "error" in found
                    self.check(
                        key,
                        value,
                        False if failed and not self.stand_in else None,
                        card=card,
                        unit="TFLOP/s",
                        reference=peak,
                        note=stand
                        if self.stand_in
                        else (found.get("error") or "no datasheet peak given"),
                    )
            hbm = result.get("hbm", {})
            value = hbm.get("gbps", not_measured(hbm.get("error", "?")))
            peak = t.get("hbm_tbps")
            if isinstance(value, float) and peak and not self.stand_in:
                share = value / (float(peak) * 1000)
                self.check(
                    "hbm",
                    value,
                    share >= hbm_min,
                    card=card,
                    unit="GB/s",
                    reference=float(peak) * 1000,
                    threshold=round(hbm_min * float(peak) * 1000),
                    note=f"{share:.0%} of the datasheet bandwidth (device copy, read + write)"
                    + ("" if share >= hbm_min else f", under {hbm_min:.0%}"),
                )
            else:
                self.check(
                    "hbm",
                    value,
                    None if self.stand_in or "error" not in hbm else False,
                    card=card,
                    unit="GB/s",
                    reference=float(peak) * 1000 if peak else None,
                    note=stand if self.stand_in else hbm.get("error", ""),
                )
            pattern = result.get("memory_pattern", {})
            if "errors" in pattern:
                ok = pattern["errors"] == 0
                self.check(
                    "memory_pattern",
                    pattern["errors"],
                    ok,
                    card=card,
                    unit="mismatched words",
                    reference=0,
                    note=f"{pattern['tested_bytes'] / GIB:.2f} GiB tested "
                    f"({pattern['coverage']:.0%} of free), "
                    f"{pattern['patterns_completed']}/{pattern['patterns']} patterns"
                    + (f"; {pattern['note']}" if pattern["note"] else ""),
                )
            else:
                self.check(
                    "memory_pattern",
                    not_measured(pattern.get("error", "?")),
                    False,
                    card=card,
                    note=pattern.get("error", ""),
                )
            load = result.get("sustained", {})
            if "windows_tflops" in load:
                throttled = self.throttles(load, card)
                steady: bool | None = (
                    None if self.stand_in else (load["drop"] <= 0.15 and not throttled)
                )
                self.check(
                    "sustained",
                    load["min_tflops"],
                    steady,
                    card=card,
                    unit="TFLOP/s (lowest 1 s window)",
                    reference=load["first_tflops"],
                    threshold=0.85,
                    note=(
                        f"{load['seconds']} s; drop {load['drop']:.0%} from the best window"
                        + (f"; hardware throttling: {', '.join(throttled)}" if throttled else "")
                        + ("; " + stand if self.stand_in else "")
                    ),
                )
            else:
                self.check(
                    "sustained",
                    not_measured(load.get("error", "?")),
                    False if not self.stand_in else None,
                    card=card,
                    note=load.get("error", ""),
                )
        self.cards_match(results)
        self.report.summarise(self.stand_in)
        self.report.save()

    def throttles(self, load: dict[str, Any], card: int) -> list[str]:
        """The hardware throttle reasons the tool reported for ``card`` (its host index, as
        the tool's rows) during its sustained load; another card's are not this one's."""
        seen: set[str] = set()
        for sample in self.samples:
            if not (load["from"] <= sample["t"] <= load["to"] + 2):
                continue
            for row in sample.get("cards", []):
                if row.get("index") != card:
                    continue
                mask = row.get("throttle_reasons")
                if isinstance(mask, int):
                    seen.update(name for bit, name in HW_THROTTLE.items() if mask & bit)
        return sorted(seen)

    def cards_match(self, results: list[dict[str, Any]]) -> None:
        if len(results) < 2:
            return
        tolerance = float(self.thresholds.get("card_tolerance", 0.1))
        for key, field in (("matmul_bf16", "tflops"), ("hbm", "gbps")):
            values = [r.get(key, {}).get(field) for r in results]
            if not all(isinstance(v, float) and v > 0 for v in values):
                self.check(
                    "cards_match",
                    not_measured(f"{key} missing on a card"),
                    None if self.stand_in else False,
                    note=f"{key}: not measured on every card",
                )
                continue
            spread = (max(values) - min(values)) / max(values)
            self.check(
                "cards_match",
                round(spread, 3),
                None if self.stand_in else spread <= tolerance,
                unit=f"{key} spread",
                threshold=tolerance,
                note=f"{key}: "
                + " / ".join(str(v) for v in values)
                + ("; CPU stand-in: processes share one CPU" if self.stand_in else ""),
            )

    def collectives(self) -> dict[str, Any]:
        environment: dict[str, str] = {}
        folder = tempfile.mkdtemp(prefix="nccl-")
        if self.gpu and "NCCL_DEBUG" not in os.environ:
            environment = {
                "NCCL_DEBUG": "INFO",
                "NCCL_DEBUG_SUBSYS": "INIT,P2P,NET,GRAPH",
                "NCCL_DEBUG_FILE": os.path.join(folder, "nccl.%h.%p"),
            }
        try:
            ranks = run_ranks(
                "collectives",
                len(self.args.cards),
                "collectives_worker",
                {"quick": self.args.quick},
                self.budget("collectives"),
                environment=environment,
            )
            transport = (
                nccl_transport(folder)
                if environment
                else (
                    not_measured("gloo on CPU (no NCCL)")
                    if not self.gpu
                    else not_measured("NCCL_DEBUG was set by the caller")
                )
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        first = ranks[0]
        merged: dict[str, Any] = {
            "world_size": len(ranks),
            "transport": transport,
            "p2p": first["p2p"],
        }
        for name in ("all_reduce", "all_gather", "reduce_scatter"):
            rows = []
            for index, row in enumerate(first[name]):
                others = [r[name][index] for r in ranks]
                rows.append({**row, "correct": all(o["correct"] for o in others)})
            merged[name] = rows
        self.data["collectives"] = merged
        essentials = self.data.setdefault("essentials", {})
        essentials["all_reduce"] = {
            "correct": all(r["correct"] for r in merged["all_reduce"]),
            "world_size": len(ranks),
            "sizes": [
                {"bytes": r["bytes"], "busbw_gbps": r["busbw_gbps"]} for r in merged["all_reduce"]
            ],
        }
        return merged

    def one_card_unmeasured(self) -> None:
        """A one-card lot: what needs two cards is said, neither passed nor failed."""
        why = not_measured("one card in the lot (it takes two)")
        for check_id, unit in (
            ("collective_correct", "wrong results"),
            ("all_reduce", "GB/s busbw"),
            ("all_gather", "GB/s busbw"),
            ("reduce_scatter", "GB/s busbw"),
            ("p2p", "GB/s"),
            ("cards_match", ""),
        ):
            self.check(
                check_id,
                why,
                None,
                unit=unit,
                note="one card: no collectives, P2P copy, card-to-card comparison or two-card "
                "split; the acceptance covers this card alone",
            )

    def acceptance_collectives(self, merged: dict[str, Any] | None) -> None:
        if merged is None:
            self.section_missing(["collective_correct"], "collectives")
            return
        wrong = [
            f"{name} {row['bytes']} B {row['place']}-place"
            for name in ("all_reduce", "all_gather", "reduce_scatter")
            for row in merged[name]
            if not row["correct"]
        ]
        self.check(
            "collective_correct",
            len(wrong),
            not wrong,
            unit="wrong results",
            reference=0,
            note="" if not wrong else "wrong values from " + ", ".join(wrong[:6]),
        )
        minimum = self.thresholds.get("busbw_gbps_min")
        for name in ("all_reduce", "all_gather", "reduce_scatter"):
            top = max(merged[name], key=lambda r: (r["bytes"], r["busbw_gbps"]))
            if self.stand_in or not minimum or name != "all_reduce":
                self.check(
                    name,
                    top["busbw_gbps"],
                    None,
                    unit="GB/s busbw",
                    reference=minimum if name == "all_reduce" else None,
                    note=f"at {top['bytes'] / 2**20:.0f} MiB"
                    + ("; CPU stand-in (gloo)" if self.stand_in else ""),
                )
            else:
                ok = top["busbw_gbps"] >= float(minimum)
                self.check(
                    name,
                    top["busbw_gbps"],
                    ok,
                    unit="GB/s busbw",
                    reference=minimum,
                    threshold=minimum,
                    note=f"at {top['bytes'] / 2**20:.0f} MiB"
                    + ("" if ok else f": under {minimum} GB/s"),
                )
        p2p = merged.get("p2p") or {}
        value = p2p.get("0_to_1_gbps")
        self.check("p2p", value, None, unit="GB/s", note=f"1 to 0: {p2p.get('1_to_0_gbps')}")
        self.report.summarise(self.stand_in)
        self.report.save()

    # -- split

    def model_config(self) -> dict[str, Any]:
        args = self.args
        precision = args.precision
        measured = precision
        precision_why = ""
        if precision in ("fp8", "int8"):
            measured = "bf16"
            precision_why = (
                f"{precision} training needs a library this program does not carry "
                "(Transformer Engine, torchao); bf16 is the nearest precision PyTorch runs natively"
            )
        if not self.gpu and measured != "fp32":
            precision_why = (
                precision_why + "; " if precision_why else ""
            ) + "the CPU stand-in computes in fp32"
            measured = "fp32"
        params = (args.params_billion or 0.125) * 1e9
        layers, hidden, heads = shape_for(params)
        config: dict[str, Any] = {
            "workload": args.workload,
            "precision": precision,
            "measured_precision": measured,
            "precision_why": precision_why,
            "seq_len": args.seq_len,
            "micro_batch": args.micro_batch,
            "quick": args.quick,
        }
        ordered = {
            "layers": layers,
            "hidden": hidden,
            "heads": heads,
            "params": layers * block_params(hidden) + 2 * hidden,
        }
        why = ""
        if not self.gpu:
            small_hidden, small_layers = (64, 2) if args.quick else (128, 2)
            small_seq = min(args.seq_len, 32 if args.quick else 64)
            layers, hidden, heads = min(layers, small_layers), small_hidden, 4
            why = (
                f"CPU stand-in: the order's {ordered['params'] / 1e9:.2f}B-parameter model "
                f"({ordered['layers']} blocks of width {ordered['hidden']}, "
                f"sequence {args.seq_len}) "
                f"cannot run on this machine's CPU; measured {layers} blocks of width {hidden}, "
                f"sequence {small_seq}."
            )
            config["seq_len"] = small_seq
            config["micro_batch"] = min(args.micro_batch, 2)
        else:
            memory = torch.cuda.get_device_properties(0).total_memory
            world = max(1, len(args.cards))
            fit_two = largest_fitting(hidden, config, memory, world, sharded=True)
            if layers > fit_two:
                why = (
                    f"the order's {ordered['params'] / 1e9:.1f}B-parameter model needs about "
                    f"{memory_needed(layers, hidden, config, world, True) / GIB:.0f} GiB per card "
                    "even sharded over "
                    f"{world}; measured the largest that fits: {max(1, fit_two)} blocks"
                )
                layers = max(1, fit_two)
            peak = float(self.thresholds.get("bf16_tflops") or 300) * 1e12 * 0.4
            tokens = 2 * config["micro_batch"] * config["seq_len"]
            step = 6 * layers * block_params(hidden) * tokens / peak
            steps = 8 if args.quick else 20
            if step * steps * 3 > self.budget("split_two_cards") * 0.5:
                fewer = max(
                    1, int(layers * self.budget("split_two_cards") * 0.5 / (step * steps * 3))
                )
                if fewer < layers:
                    why = (why + "; " if why else "") + (
                        f"{layers} blocks would take about {step:.1f} s a step, over the "
                        f"time budget; measured {fewer} blocks"
                    )
                    layers = fewer
        config.update(
            layers=layers,
            hidden=hidden,
            heads=heads,
            warmup=(2 if args.quick else 3) if self.gpu else 1,
            steps=(5 if args.quick else 10) if self.gpu else 3,
        )
        self.config = config
        params_used = layers * block_params(hidden) + 2 * hidden
        self.data["model"] = {
            "params": params_used,
            "layers": layers,
            "hidden": hidden,
            "heads": heads,
            "seq_len": config["seq_len"],
            "micro_batch": config["micro_batch"],
            "precision": precision,
            "measured_precision": measured,
            "precision_why": precision_why,
            "workload": args.workload,
            "ordered": ordered,
            "scaled_down": bool(why),
            "why": why,
            "kind": "transformer blocks (causal attention + 4x MLP), built on the meta device, "
            "materialised per rank",
        }
        return config

    def split(self) -> dict[str, Any]:
        config = self.model_config()
        self.report.save()
        hypothesis = self.args.hypothesis
        world = len(self.args.cards)
        split: dict[str, Any] = {}
        self.data["split"] = split
        # One card: the same global batch as two (two micro-batches accumulated) for
        # shorter_step; one micro-batch (the per-card batch) for bigger_batch.
        one_accumulation = 2 if hypothesis == "shorter_step" else 1
        try:
            (single,) = run_ranks(
                "split_one_card",
                1,
                "split_worker",
                {**config, "mode": "single", "accumulation": one_accumulation, "group": False},
                self.budget("split_one_card"),
            )
        except SectionFailed as exc:
            single = {"fits": False, "error": str(exc)[:300]}
            split["one_card_traceback"] = exc.trace
        single["accumulation"] = one_accumulation
        single["global_batch"] = config["micro_batch"] * one_accumulation
        split["one_card"] = single
        self.report.save()
        if world < 2:
            split["two_cards"] = {"mode": "skipped: only one card in the lot"}
            return split
        sharded = not single.get("fits") or self.args.force_sharded
        mode = "fsdp" if sharded else "ddp"
        pair_list = run_ranks(
            "split_two_cards",
            world,
            "split_worker",
            {**config, "mode": mode, "accumulation": 1},
            self.budget("split_two_cards"),
        )
        fits = all(r.get("fits") for r in pair_list)
        pair: dict[str, Any] = {
            "mode": "sharded" if sharded else "data_parallel",
            "fits": fits,
            "global_batch": config["micro_batch"] * world,
            "per_rank": pair_list,
        }
        if fits:
            steps = [r["median_step_ms"] for r in pair_list]
            computes = [r["compute_ms"] for r in pair_list]
            peaks = [r["peak_memory_gib"] for r in pair_list]
            pair.update(
                median_step_ms=max(steps),
                samples_per_s=round(config["micro_batch"] * world / (max(steps) / 1000), 3),
                peak_memory_gib=peaks,
                memory_source=pair_list[0]["memory_source"],
                compute_ms=computes,
                compute_imbalance=round(max(computes) / min(computes), 3)
                if min(computes) > 0
                else None,
            )
            memory_imbalanced = (
                min(peaks) < IMBALANCE_RATIO * max(peaks) if not self.stand_in else False
            )
            pair["imbalanced"] = bool(
                memory_imbalanced or (pair["compute_imbalance"] or 1) > COMPUTE_IMBALANCE
            )
            if not sharded:
                quiet = max(r["no_sync_step_ms"] for r in pair_list)
                exposed = max(0.0, (max(steps) - quiet) / 1000)
                pair.update(
                    no_sync_step_ms=quiet,
                    exposed_exchange_seconds=round(exposed, 6),
                    exchange_share=round(exposed / (max(steps) / 1000), 4),
                )
            else:
                why = not_measured(
                    "FSDP2 overlaps its all-gathers and reduce-scatters with the compute; "
                    "there is no step without them to subtract"
                )
                pair.update(exposed_exchange_seconds=why, exchange_share=why)
        else:
            pair["error"] = next((r.get("error") for r in pair_list if r.get("error")), "")
        split["two_cards"] = pair
        for key in ("exposed_exchange_seconds", "exchange_share"):
            split[key] = pair.get(key, not_measured("the two-card run did not finish"))
        if hypothesis == "make_possible":
            split["make_possible"] = self.make_possible(config)
        split.update(
            precision=config["precision"],
            measured_precision=config["measured_precision"],
            steps=config["steps"],
            warmup_steps=config["warmup"],
        )
        return split

    def make_possible(self, config: dict[str, Any]) -> dict[str, Any]:
        """The largest model of this width that fits one card, then two sharded: estimated
        from the memory model, and on GPUs checked by running it."""
        hidden = config["hidden"]
        world = len(self.args.cards)
        if self.gpu:
            memory = float(torch.cuda.get_device_properties(0).total_memory)
            how = (
                "estimated from fp32 weights, gradients, AdamW and activations; checked by running"
            )
        elif self.thresholds.get("memory_gib"):
            memory = float(self.thresholds["memory_gib"]) * GIB
            how = (
                f"estimated against {self.thresholds['memory_gib']} GiB per card "
                "(CPU stand-in: not run)"
            )
        else:
            return {"how": not_measured("CPU stand-in and no card memory given")}
        ordered = self.data["model"]["ordered"]
        real = {**config, "seq_len": self.args.seq_len, "micro_batch": self.args.micro_batch}
        hidden = ordered["hidden"] if not self.gpu else hidden
        one = largest_fitting(hidden, real, memory, 1, sharded=False)
        two = largest_fitting(hidden, real, memory, world, sharded=True)
        result: dict[str, Any] = {
            "hidden": hidden,
            "one_card_max_layers": one,
            "one_card_max_params": one * block_params(hidden),
            "two_cards_max_layers": two,
            "two_cards_max_params": two * block_params(hidden),
            "how": how,
        }
        if self.gpu and one > 0 and time.monotonic() < self.deadline - 60:
            for label, world_n, layers, mode in (
                ("one_card_run", 1, one, "single"),
                ("two_cards_run", world, two, "fsdp"),
            ):
                try:
                    (first, *_rest) = run_ranks(
                        f"make_possible_{label}",
                        world_n,
                        "split_worker",
                        {
                            **config,
                            "layers": layers,
                            "mode": mode,
                            "accumulation": 1,
                            "warmup": 1,
                            "steps": 2,
                            "group": world_n > 1,
                        },
                        min(self.budget("split_two_cards"), 120),
                    )
                    result[label] = {
                        "layers": layers,
                        "fits": first.get("fits"),
                        "peak_memory_gib": first.get("peak_memory_gib"),
                        "error": first.get("error", ""),
                    }
                except (SectionFailed, SectionTimeout) as exc:
                    result[label] = {"layers": layers, "fits": False, "error": str(exc)[:300]}
        return result

    def independent(self) -> list[dict[str, Any]]:
        config = self.config or self.model_config()
        runs = independent_runs(
            {**config, "accumulation": 1}, self.args.cards, self.budget("independent")
        )
        self.data.setdefault("split", {})["independent"] = runs
        return runs

    def smoke(self) -> dict[str, Any] | None:
        command = self.args.smoke
        essentials = self.data.setdefault("essentials", {})
        if not command:
            essentials["smoke"] = None
            return None
        started = time.perf_counter()
        budget = max(1.0, min(600.0, self.deadline - time.monotonic() - 10))
        try:
            done = subprocess.run(  # noqa: S602 (the researcher's own command, on their lot)
                command, shell=True, capture_output=True, text=True, timeout=budget
            )
            code, output = done.returncode, (done.stdout + done.stderr)[-2000:]
        except subprocess.TimeoutExpired:
            code, output = None, f"timed out after {budget:.0f} s"
        essentials["smoke"] = {
            "command": command,
            "returncode": code,
            "seconds": round(time.perf_counter() - started, 2),
            "output_tail": output,
        }
        return essentials["smoke"]

    def make_verdict(self) -> dict[str, Any]:
        split = self.data.get("split", {})
        model = self.data.get("model", {})
        if "two_cards" not in split:
            record = self.data["sections"].get("split", {})
            split = {
                **split,
                "two_cards": {
                    "mode": f"not run ({record.get('status')}: {record.get('error', '')[:200]})"
                },
            }
        found = verdict(self.args.hypothesis, split, model, self.stand_in)
        self.data["verdict"] = found
        return found


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, dict[str, Any]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--cards", required=True, type=card_list, help="the lot's host device indices: 2,3"
    )
    parser.add_argument(
        "--expect-devices", type=int, help="devices that must be visible (default: --cards')"
    )
    parser.add_argument(
        "--hypothesis",
        default="shorter_step",
        choices=["shorter_step", "bigger_batch", "make_possible"],
    )
    parser.add_argument(
        "--usage-mode", default="distributed", choices=["distributed", "independent"]
    )
    parser.add_argument("--expected-arch", default="")
    parser.add_argument("--params-billion", type=float)
    parser.add_argument(
        "--precision", default="bf16", choices=["fp32", "bf16", "fp16", "fp8", "int8"]
    )
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument(
        "--workload", default="training", choices=["training", "finetune", "inference"]
    )
    parser.add_argument(
        "--thresholds", default="{}", help="the kind's acceptance references (JSON object)"
    )
    parser.add_argument(
        "--require-gpu",
        action="store_true",
        help="no visible GPU is an acceptance failure (exit 6)",
    )
    parser.add_argument(
        "--timeout", type=float, default=900, help="the whole run's budget, seconds"
    )
    parser.add_argument(
        "--section-budgets", default="", help='per-section seconds (JSON): {"collectives": 30}'
    )
    parser.add_argument("--nvidia-smi", default="", help="the nvidia-smi to read telemetry with")
    parser.add_argument("--amd-smi", default="", help="the amd-smi to read telemetry with")
    parser.add_argument(
        "--skip",
        default="",
        help="sections not to run (diagnosis, tests): per_card,collectives,split,independent,smoke",
    )
    parser.add_argument("--extensions", default="")
    parser.add_argument("--smoke", default="")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and short loads, for tests"
    )
    parser.add_argument(
        "--force-sharded", action="store_true", help="shard even when one card fits"
    )
    args = parser.parse_args(argv)
    if args.expect_devices is not None and args.expect_devices < 1:
        parser.error("--expect-devices: at least one device")
    unknown = set(args.skip.split(",")) - {"", *SKIPPABLE}
    if unknown:
        parser.error(f"--skip: no section {', '.join(sorted(unknown))}")
    if args.seq_len < 1 or args.micro_batch < 1 or args.timeout <= 0:
        parser.error("--seq-len, --micro-batch and --timeout must be positive")
    try:
        thresholds = json.loads(args.thresholds or "{}")
        budgets = json.loads(args.section_budgets) if args.section_budgets else {}
    except ValueError as exc:
        parser.error(f"--thresholds / --section-budgets: not JSON ({exc})")
    if not isinstance(thresholds, dict) or not isinstance(budgets, dict):
        parser.error("--thresholds / --section-budgets: a JSON object")
    return args, {k: v for k, v in thresholds.items() if v is not None}


def main(argv: list[str] | None = None) -> int:
    args, thresholds = parse(argv)  # a usage error exits 2 (argparse)
    bench = Benchmark(args, thresholds)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    code = EXIT_CRASH
    try:
        bench.report.save()
        code = bench.run()
    except Terminated:
        bench.data.update(
            error=f"terminated (SIGTERM) during section {bench.current}",
            exit_code=EXIT_TIMEOUT,
            finished_at=now(),
        )
        bench.report.summarise(bench.stand_in)
        bench.report.save()
        code = EXIT_TIMEOUT
    except Exception as exc:  # the crash is in the report, with its traceback
        bench.data.update(
            error=f"{type(exc).__name__}: {exc}"[:1000],
            traceback=traceback.format_exc()[-4000:],
            exit_code=EXIT_CRASH,
            finished_at=now(),
        )
        bench.report.save()
        code = EXIT_CRASH
    finally:
        signal.signal(signal.SIGTERM, previous)
    data = bench.data
    if data.get("error"):
        print(data["error"], file=sys.stderr)
    for failure in data["acceptance"].get("failed", []):
        print(f"acceptance failed: {failure}", file=sys.stderr)
    verdict_found = data.get("verdict")
    if isinstance(verdict_found, dict):
        print(verdict_found.get("measured", ""))
    return code


if __name__ == "__main__":
    sys.exit(main())
