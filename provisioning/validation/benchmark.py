#!/usr/bin/env python
"""The validation benchmark: the seed's split test, run on the delivered lot.

Standalone: the Python standard library and PyTorch, nothing else (no Django), so it is
copied to a host and run there. On two GPUs it uses NCCL (RCCL on ROCm); on a CPU, two
processes with gloo stand in for the two cards (tests, development).

    python benchmark.py --out report.json --cards 2,3 [--expect-devices 2]
        [--hypothesis shorter_step] [--expected-arch sm_90] [--params-billion 0.05]
        [--precision bf16] [--usage-mode distributed] [--extensions flash_attn,apex]
        [--smoke "python -c 'import mylib'"] [--quick]

It measures the lot's cards and only them. ``--cards`` names them (host device indices);
whoever starts the benchmark shows it just those cards through the visible-device variable
(CUDA_VISIBLE_DEVICES; HIP_VISIBLE_DEVICES on ROCm, where CUDA_VISIBLE_DEVICES means the
same and a ROCR_VISIBLE_DEVICES narrows the list first). Before anything is measured, the
cards that variable exposes must be ``--cards`` and exactly ``--expect-devices`` devices
(default: as many as ``--cards`` names) must be visible; on a CPU the stand-in counts the
variable's entries. Otherwise the report says what was seen, nothing is measured, and the
exit status is 3 (EXIT_DEVICE_MISMATCH; 2 is a usage error, 1 a crash). In usage mode
"independent" each card's one-card run is a process of its own that sees that card only.

It writes one versioned JSON report:

* devices: the cards expected and the devices seen (host index, name, memory, UUID, PCI
  bus id: on ROCm the bus id is what identifies a card), and whether they match;
* stack: PyTorch, CUDA or HIP version, driver, devices, compute capability / gfx name,
  the build's architecture list and whether the card's architecture is in it, the named
  compiled extensions imported, and a small op run on each card ("no kernel image is
  available" is caught and reported, not raised);
* essentials: matrix product rate, attention forward and backward, device memory copy
  bandwidth, an all-reduce between the two cards checked for correctness and timed over
  sizes (bus bandwidth as nccl-tests defines it: algbw × 2(n-1)/n), the smoke command;
* split test: the same synthetic data set (fixed seed), same precision, same samples, on
  one card and then on two — data parallel with the gradient exchange timed on its own, or
  sharded (FSDP2) when the model does not fit one card (an out-of-memory on one card is a
  result, not a crash): peak memory per card, median step time after warm-up, samples per
  second, share of the step spent in the exchange, imbalance between the cards flagged;
* verdict: the answer to the hypothesis written at booking, and what was held constant.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import socket
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

REPORT_VERSION = 1
NOT_MEASURED = "not measured: no GPU"
STAND_IN = "not measured: no GPU (CPU stand-in)"
EXIT_DEVICE_MISMATCH = 3
"""The visible devices are not the lot's cards: the report says what was seen; nothing ran."""
CARD_LIST = re.compile(r"[0-9]+(,[0-9]+)*")
PCI_PARTS = ("domain", "bus", "device")
ALL_REDUCE_SIZES = [2**10, 2**14, 2**18, 2**20, 2**22, 2**24]  # bytes
IMBALANCE_RATIO = 0.5
"""Peak memory of the emptier card below half the fuller one's: an unbalanced split."""


# --------------------------------------------------------------------------- devices


def accelerator() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def device_for(rank: int) -> torch.device:
    return torch.device("cuda", rank) if accelerator() == "cuda" else torch.device("cpu")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def arch_name(index: int) -> str:
    """sm_90, sm_100 on NVIDIA; the gfx name (gfx942) on ROCm, whose capability numbers
    are not NVIDIA's and are not turned into an sm_ string."""
    properties = torch.cuda.get_device_properties(index)
    if torch.version.hip:
        return str(getattr(properties, "gcnArchName", "gfx?")).split(":")[0]
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm_{major}{minor}"


def peak_memory_gb(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9, "cuda_max_allocated"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9, "process_peak_rss"


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


# --------------------------------------------------------------------------- the device set


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
            **dict.fromkeys(["name", "memory_gb", "uuid", "pci_bus_id"], STAND_IN),
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


# --------------------------------------------------------------------------- stack


def stack_check(expected_arch: str, extensions: list[str]) -> dict[str, Any]:
    devices = []
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            properties = torch.cuda.get_device_properties(index)
            devices.append(
                {
                    "index": index,
                    "name": properties.name,
                    "capability": list(torch.cuda.get_device_capability(index)),
                    "arch": arch_name(index),
                    "memory_gb": round(properties.total_memory / 1e9, 1),
                }
            )
    arch_list = torch.cuda.get_arch_list() if torch.cuda.is_available() else []
    found_archs = {d["arch"] for d in devices}
    supported = None
    if expected_arch and devices:
        supported = expected_arch in found_archs and any(
            a == expected_arch or a.replace("compute_", "sm_") == expected_arch for a in arch_list
        )
    imported = []
    for name in extensions:
        try:
            __import__(name)
            imported.append({"name": name, "imported": True, "error": ""})
        except Exception as exc:  # any import failure is the finding
            imported.append(
                {"name": name, "imported": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
            )
    kernels = []
    for rank in range(max(1, len(devices))):
        device = device_for(rank)
        try:
            x = torch.randn(64, 64, device=device)
            (x @ x).sum().item()
            kernels.append({"device": str(device), "ok": True, "error": ""})
        except RuntimeError as exc:  # "no kernel image is available for execution on the device"
            kernels.append({"device": str(device), "ok": False, "error": str(exc)[:300]})
    gpu = torch.cuda.is_available()
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda if gpu or torch.version.cuda else NOT_MEASURED,
        "hip": torch.version.hip,
        "driver": _driver() or NOT_MEASURED,
        "accelerator": accelerator(),
        "devices": devices,
        "arch_list": arch_list if gpu else NOT_MEASURED,
        "expected_arch": expected_arch,
        "arch_supported": supported if gpu else NOT_MEASURED,
        "extensions": imported,
        "kernel_check": kernels,
        "python": platform.python_version(),
    }


def _driver() -> str:
    for command in (
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
        ["rocm-smi", "--showdriverversion"],
    ):
        try:
            found = subprocess.run(command, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if found.returncode == 0 and found.stdout.strip():
            return found.stdout.strip().splitlines()[0][:120]
    return ""


# --------------------------------------------------------------------------- essentials


def timed(device: torch.device, fn: Any, repeat: int) -> float:
    """Median seconds of ``fn`` after one warm-up call."""
    fn()
    synchronize(device)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def essentials(device: torch.device, quick: bool) -> dict[str, Any]:
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    n = 1024 if quick else (8192 if device.type == "cuda" else 2048)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    seconds = timed(device, lambda: a @ b, 3 if quick else 10)
    batch, heads, length, dim = (2, 4, 256, 64) if quick else (8, 16, 1024, 128)
    q = torch.randn(batch, heads, length, dim, device=device, dtype=dtype, requires_grad=True)
    forward = timed(device, lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True), 3)

    def forward_backward() -> None:
        F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()

    backward = timed(device, forward_backward, 3) - forward
    size = (64 if quick else 512) * 2**20
    source = torch.empty(size, dtype=torch.uint8, device=device)
    copy = timed(device, lambda: source.clone(), 3 if quick else 10)
    return {
        "matmul": {
            "dtype": str(dtype).replace("torch.", ""),
            "n": n,
            "tflops": round(2 * n**3 / seconds / 1e12, 3),
        },
        "attention": {
            "shape": [batch, heads, length, dim],
            "forward_ms": round(forward * 1000, 3),
            "backward_ms": round(max(backward, 0.0) * 1000, 3),
        },
        "copy_bandwidth_gbps": round(2 * size / copy / 1e9, 2),  # read + write
    }


def all_reduce_test(rank: int, world: int, device: torch.device, quick: bool) -> dict[str, Any]:
    correct = True
    sizes = []
    for size in ALL_REDUCE_SIZES[: 4 if quick else None]:
        count = size // 4
        tensor = torch.full((count,), float(rank + 1), device=device)
        dist.all_reduce(tensor)
        expected = world * (world + 1) / 2
        correct = correct and bool(torch.allclose(tensor, torch.full_like(tensor, expected)))
        payload = torch.ones(count, device=device)
        seconds = timed(
            device, lambda payload=payload: dist.all_reduce(payload), 3 if quick else 10
        )
        algbw = size / seconds / 1e9
        sizes.append(
            {
                "bytes": size,
                "ms": round(seconds * 1000, 4),
                "algorithm_bandwidth_gbps": significant(algbw),
                "bus_bandwidth_gbps": significant(algbw * 2 * (world - 1) / world),
            }
        )
    return {"correct": correct, "world_size": world, "sizes": sizes}


def significant(value: float, digits: int = 4) -> float:
    """Small and large figures alike keep their first digits (1 KB all-reduces are slow)."""
    return float(f"{value:.{digits}g}")


def smoke(command: str) -> dict[str, Any] | None:
    if not command:
        return None
    started = time.perf_counter()
    try:
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=600)  # noqa: S602 (the researcher's own command, on their lot)
        code, output = done.returncode, (done.stdout + done.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        code, output = None, "timed out after 600 s"
    return {
        "command": command,
        "returncode": code,
        "seconds": round(time.perf_counter() - started, 2),
        "output_tail": output,
    }


# --------------------------------------------------------------------------- the split test


def model_shape(params_billion: float | None, quick: bool) -> tuple[int, int]:
    """(layers, hidden) of an MLP of about the researcher's size, within what the run allows."""
    if quick or params_billion is None:
        return 4, 256
    params = params_billion * 1e9
    layers = 8
    hidden = max(256, int((params / layers) ** 0.5))
    return layers, hidden


def build_model(layers: int, hidden: int, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(hidden, hidden), torch.nn.GELU()]
    return torch.nn.Sequential(*blocks, torch.nn.Linear(hidden, 1)).to(device)


def dataset(samples: int, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, hidden, generator=generator)
    y = x[:, :1].clone()
    return x, y


def train(
    rank: int, world: int, device: torch.device, config: dict[str, Any], sharded: bool
) -> dict[str, Any]:
    """One run: the same samples in the same order, split over ``world`` cards."""
    layers, hidden = config["layers"], config["hidden"]
    global_batch, steps, warmup = config["global_batch"], config["steps"], config["warmup"]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(config["precision"])
    reset_peak(device)
    model = build_model(layers, hidden, device)
    if sharded:
        from torch.distributed.fsdp import fully_shard

        for block in model.children():
            if isinstance(block, torch.nn.Linear):
                fully_shard(block)
        fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = dataset(global_batch * steps, hidden)
    per_card = global_batch // world
    step_times, exchange_times = [], []
    for step in range(steps):
        rows = slice(
            step * global_batch + rank * per_card, step * global_batch + (rank + 1) * per_card
        )
        inputs, targets = x[rows].to(device), y[rows].to(device)
        synchronize(device)
        started = time.perf_counter()
        with torch.autocast(
            device.type, dtype=dtype, enabled=dtype is not None and device.type == "cuda"
        ):
            loss = F.mse_loss(model(inputs).float(), targets)
        loss.backward()
        synchronize(device)
        exchange = 0.0
        if world > 1 and not sharded:
            exchange_started = time.perf_counter()
            for parameter in model.parameters():
                if parameter.grad is not None:
                    dist.all_reduce(parameter.grad)
                    parameter.grad /= world
            synchronize(device)
            exchange = time.perf_counter() - exchange_started
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        if step >= warmup:
            step_times.append(time.perf_counter() - started)
            exchange_times.append(exchange)
    peak, source = peak_memory_gb(device)
    median = statistics.median(step_times)
    return {
        "median_step_ms": round(median * 1000, 3),
        "samples_per_s": round(global_batch / median, 1),
        "exchange_share": round(statistics.median(exchange_times) / median, 4)
        if world > 1
        else 0.0,
        "peak_memory_gb": round(peak, 3),
        "memory_source": source,
        "final_loss": round(float(loss.detach()), 6),
    }


def one_card(config: dict[str, Any]) -> dict[str, Any]:
    device = device_for(0)
    try:
        result = train(0, 1, device, config, sharded=False)
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return {"fits": False, "error": "out of memory"}
    return {"fits": True, "error": "", **result, "peak_memory_gb": [result["peak_memory_gb"]]}


def _worker(
    rank: int, world: int, port: int, config: dict[str, Any], sharded: bool, out: Any
) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    backend = "nccl" if accelerator() == "cuda" else "gloo"
    device = device_for(rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        result: dict[str, Any] = {"rank": rank}
        if config.get("essentials"):
            result["all_reduce"] = all_reduce_test(rank, world, device, config["quick"])
        if not config.get("independent"):
            result["train"] = train(rank, world, device, config, sharded)
        out.put(result)
    except Exception:  # reported by the parent, with the traceback
        out.put({"rank": rank, "error": traceback.format_exc()[-2000:]})
    finally:
        dist.barrier()
        dist.destroy_process_group()


def two_cards(
    config: dict[str, Any], sharded: bool, essentials_too: bool = False
) -> list[dict[str, Any]]:
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    processes = [
        context.Process(
            target=_worker,
            args=(rank, 2, port, {**config, "essentials": essentials_too}, sharded, queue),
        )
        for rank in range(2)
    ]
    for process in processes:
        process.start()
    results = [queue.get() for _ in processes]
    for process in processes:
        process.join(timeout=60)
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError(errors[0])
    return sorted(results, key=lambda r: r["rank"])


def cards() -> int:
    """How many cards the two-card part can use: the visible GPUs, or on a CPU one process
    per entry of CUDA_VISIBLE_DEVICES (the stand-in honours the variable as a GPU would)."""
    if torch.cuda.is_available():
        return torch.cuda.device_count()
    value = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return len(value.split(",")) if value else 0


def _independent_worker(card: int, config: dict[str, Any], out: Any) -> None:
    """One of the two independent experiments: this process sees its own card, no other."""
    if torch.cuda.is_initialized():  # too late: the runtime read the variables already
        out.put({"card": card, "crash": "CUDA was initialised before narrowing to the card"})
        return
    os.environ.update(CUDA_VISIBLE_DEVICES=str(card), HIP_VISIBLE_DEVICES=str(card))
    os.environ.pop("ROCR_VISIBLE_DEVICES", None)  # HIP would read ours as positions in it
    try:
        variable, _seen, _problem = visible_cards(os.environ, rocm=bool(torch.version.hip))
        if (visible := cards()) != 1:
            raise RuntimeError(f"the run for card {card} sees {visible} devices, not 1")
        identity = device_identity(0, card)
        result = one_card(config)
        out.put(
            {"card": card, "variable": variable, "visible": visible, "device": identity, **result}
        )
    except Exception:  # reported by the parent, with the traceback
        out.put({"card": card, "crash": traceback.format_exc()[-2000:]})


def independent_runs(config: dict[str, Any], host_cards: list[int]) -> list[dict[str, Any]]:
    """Each card's one-card run, at the same time, each in a process that sees only its
    card: as the two accounts of "two independent experiments" will use the lot."""
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    processes = [
        context.Process(target=_independent_worker, args=(card, config, queue))
        for card in host_cards
    ]
    for process in processes:
        process.start()
    results = [queue.get() for _ in processes]
    for process in processes:
        process.join(timeout=60)
    crashes = [r["crash"] for r in results if "crash" in r]  # "error" is one_card's own
    if crashes:
        raise RuntimeError(crashes[0])
    return sorted(results, key=lambda r: r["card"])


def split_test(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | str]:
    single = one_card(config)
    if cards() < 2:
        skipped = "skipped: only one GPU is visible"
        return {"one_card": single, "two_cards": {"mode": skipped}}, skipped
    sharded = not single["fits"] or config.get("force_sharded", False)
    ranks = two_cards(config, sharded=sharded, essentials_too=True)
    trains = [r["train"] for r in ranks]
    peaks = [t["peak_memory_gb"] for t in trains]
    pair = {
        "mode": "sharded" if sharded else "data_parallel",
        "median_step_ms": max(t["median_step_ms"] for t in trains),
        "samples_per_s": min(t["samples_per_s"] for t in trains),
        "exchange_share": max(t["exchange_share"] for t in trains),
        "peak_memory_gb": peaks,
        "memory_source": trains[0]["memory_source"],
        "imbalanced": min(peaks) < IMBALANCE_RATIO * max(peaks),
    }
    return {"one_card": single, "two_cards": pair}, ranks[0]["all_reduce"]


# --------------------------------------------------------------------------- verdict


HELD_CONSTANT = [
    "the same synthetic data set (fixed seed) in the same order",
    "the same precision",
    "the same number of samples and the same global batch",
    "the same model and optimizer",
]


def verdict(hypothesis: str, split: dict[str, Any]) -> dict[str, Any]:
    single, pair = split["one_card"], split["two_cards"]
    answer: str
    speedup = None
    if "median_step_ms" not in pair:
        return {
            "hypothesis": hypothesis,
            "answer": f"Not answered: the two-card part was {pair['mode']}.",
            "speedup": None,
            "held_constant": HELD_CONSTANT,
        }
    if not single["fits"]:
        answer = "Does not fit one card; fits sharded on two."
    else:
        speedup = round(single["median_step_ms"] / pair["median_step_ms"], 2)
        if hypothesis == "shorter_step":
            answer = (
                f"Step time {speedup}× shorter on two cards."
                if speedup > 1.05
                else f"Step time not shorter on two cards ({speedup}× of one card's)."
            )
        elif hypothesis == "bigger_batch":
            ratio = round(pair["samples_per_s"] / single["samples_per_s"], 2)
            answer = (
                f"Two cards process {ratio}× the samples per second of one "
                "at the same global batch."
            )
        else:
            answer = "Already fits one card: the second card is not needed to run it."
    if pair.get("imbalanced"):
        answer += " The two cards' memory is unbalanced: check the split."
    return {
        "hypothesis": hypothesis,
        "answer": answer,
        "speedup": speedup,
        "held_constant": HELD_CONSTANT,
    }


# --------------------------------------------------------------------------- main


def header(args: argparse.Namespace, devices: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": REPORT_VERSION,
        "created_at": datetime.now(UTC).isoformat(),
        "host": socket.gethostname(),
        "usage_mode": args.usage_mode,
        "devices": devices,
    }


def run(args: argparse.Namespace, devices: dict[str, Any]) -> dict[str, Any]:
    layers, hidden = model_shape(args.params_billion, args.quick)
    config = {
        "layers": layers,
        "hidden": hidden,
        "global_batch": 64 if args.quick else 256,
        "steps": 8 if args.quick else 40,
        "warmup": 3 if args.quick else 10,
        "precision": args.precision,
        "quick": args.quick,
        "force_sharded": args.force_sharded,
    }
    stack = stack_check(args.expected_arch, [e for e in args.extensions.split(",") if e])
    basics = essentials(device_for(0), args.quick)
    split, all_reduce = split_test(config)
    if args.usage_mode == "independent":
        split["independent"] = independent_runs(config, devices["cards"])
    basics["all_reduce"] = all_reduce
    basics["smoke"] = smoke(args.smoke)
    params = sum(p.numel() for p in build_model(layers, hidden, torch.device("cpu")).parameters())
    split.update(
        precision=args.precision,
        # Autocast runs on the GPUs only: a CPU stand-in computes in fp32, and says so.
        precision_applied=args.precision if accelerator() == "cuda" else "fp32",
        samples=config["global_batch"] * config["steps"],
        global_batch=config["global_batch"],
        steps=config["steps"],
        warmup_steps=config["warmup"],
        model={"layers": layers, "hidden": hidden, "params": params},
    )
    return {
        **header(args, devices),
        "stack": stack,
        "essentials": basics,
        "split_test": split,
        "verdict": verdict(args.hypothesis, split),
    }


def main(argv: list[str] | None = None) -> int:
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
    parser.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    parser.add_argument("--extensions", default="")
    parser.add_argument("--smoke", default="")
    parser.add_argument("--quick", action="store_true", help="small sizes, for tests")
    parser.add_argument(
        "--force-sharded", action="store_true", help="shard even when one card fits"
    )
    args = parser.parse_args(argv)
    expected = len(args.cards) if args.expect_devices is None else args.expect_devices
    if expected < 1:
        parser.error("--expect-devices: at least one device")
    devices = check_devices(args.cards, expected)
    if not devices["ok"]:  # the report says what was seen; nothing runs on those cards
        with open(args.out, "w") as handle:
            json.dump({**header(args, devices), "error": devices["problem"]}, handle, indent=1)
        print(devices["problem"], file=sys.stderr)
        return EXIT_DEVICE_MISMATCH
    report = run(args, devices)
    with open(args.out, "w") as handle:
        json.dump(report, handle, indent=1)
    print(report["verdict"]["answer"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
