"""The cards together: all_reduce, all_gather and reduce_scatter swept over sizes, in and
out of place, each result checked, their bus bandwidth as nccl-tests defines it; the copy
bandwidth from card to card; the transports NCCL says it used."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from .percard import timed
from .ranks import FAULT
from .report import STAND_IN, not_measured, significant


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
