"""The split test's runs: one rank of a one-card or two-card run (single, DDP then no_sync,
or FSDP2), and the two independent experiments, each in a process that sees its own card."""

from __future__ import annotations

import os
import queue as _queue
import statistics
import time
import traceback
from typing import Any

import torch
import torch.nn.functional as F

from .devices import device_for, device_identity, synchronize, visible_cards
from .model import Transformer, _fully_shard, materialise, peak_memory
from .ranks import FAULT, rank_context
from .report import SectionFailed, SectionTimeout


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
    context = rank_context()
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
