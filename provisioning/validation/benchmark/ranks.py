"""The ranks: each measurement that runs on the cards runs in one process per card (forked by
a fork server that has imported PyTorch once), and their results (or a rank's traceback)
come back by rank, within the section's budget.

Ranks that form a process group meet at a store this process serves: its port is granted by
the system when the store starts listening (port 0) and is held from then on, so two
benchmarks on one host, or anything else there, cannot take it between the choice and the
use (as a port probed, closed and passed on could be: EADDRINUSE in a rank)."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import queue as _queue
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .devices import device_for, joined
from .report import SectionFailed, SectionTimeout

FAULT = os.environ.get("GPULOTS_BENCH_FAULT", "")
"""Test-only fault injection (never set on a host): see the program's usage (__main__)."""
STORE_HOST = "127.0.0.1"

Worker = Callable[[int, int, torch.device, dict[str, Any]], Any]
"""A measurement on one rank: (rank, world, device, payload) -> its result (JSON-able)."""


PRELOAD = ("torch", "torch.distributed", "collectives", "model", "percard", "ranks", "split")
"""Imported once, by the fork server, before it forks a rank: the benchmark's own modules
by their names in this package."""


def rank_context() -> Any:
    """Where the ranks start: a fork server that has imported PyTorch (and nothing else) and
    forks each rank from there, so a rank starts in a fraction of a second instead of
    importing PyTorch anew (about 2 s of CPU each, seven ranks a run). The server never
    touches a card: a forked rank initialises CUDA (or HIP) itself, after its visible-device
    variables are set, as a spawned one would (PyTorch supports "spawn" and "forkserver"
    with CUDA, not "fork"). Where no fork server exists, spawned processes."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    package = __package__ or "benchmark"
    context.set_forkserver_preload(
        [name if name.startswith("torch") else f"{package}.{name}" for name in PRELOAD]
    )
    return context


def group_store(seconds: float) -> dist.TCPStore:
    """The store the ranks of one group meet at, served from here: listening on a port the
    system grants (``.port``), held until the store is dropped."""
    return dist.TCPStore(STORE_HOST, 0, is_master=True, timeout=_dt.timedelta(seconds=seconds))


def _rank_main(
    rank: int,
    world: int,
    port: int,
    target: Worker,
    payload: dict[str, Any],
    out: Any,
    group_seconds: float,
    environment: dict[str, str],
) -> None:
    """One rank: its own process, its own card. It sends back a result or its traceback;
    no barrier after an exception (the other rank may be gone). ``port``: the group's store
    (0: no group)."""
    grouped = False
    try:
        os.environ.update(environment)
        device = device_for(rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        else:  # each stand-in process its share of the cores, as a card is its own
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        if port:
            timeout = _dt.timedelta(seconds=group_seconds)
            dist.init_process_group(
                "nccl" if device.type == "cuda" else "gloo",
                store=dist.TCPStore(STORE_HOST, port, is_master=False, timeout=timeout),
                rank=rank,
                world_size=world,
                timeout=timeout,
            )
            grouped = True
        started = time.perf_counter()
        result = target(rank, world, device, payload)
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
    target: Worker,
    payload: dict[str, Any],
    budget: float,
    tick: Callable[[], None] | None = None,
    environment: dict[str, str] | None = None,
) -> list[Any]:
    """``target`` on ``world`` ranks, each in its own process (rank_context); their results by rank.
    A rank that raises: SectionFailed with its traceback, the others ended at once. A rank
    still running at ``budget`` seconds: SectionTimeout, all ended."""
    context = rank_context()
    out = context.Queue()
    group_seconds = max(10.0, budget)
    store = group_store(group_seconds) if payload.get("group", world > 1) else None
    port = int(store.port) if store is not None else 0
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
        del store  # its port is given back once no rank needs it
    return [results[rank] for rank in range(world)]
