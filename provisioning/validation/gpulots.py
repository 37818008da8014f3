#!/usr/bin/env python3
"""gpulots split-test: your own training command on one card, then on two.

    gpulots split-test --global-batch 32 -- python train.py --batch-size {per_rank_batch}
    gpulots split-test --per-card-batch 8 --upload -- python train.py
    gpulots split-test --launcher none -- torchrun --nproc-per-node {nproc} train.py

It runs the command twice under torchrun (``python -m torch.distributed.run --standalone``):
once with one process on the account's first card, once with two processes on both cards
(CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES narrowed to them; NCCL or RCCL, whatever the
command initialises; on a machine without GPUs, gloo processes stand in and the report says
``"stand_in": true``). Between the runs only the number of cards and the per-process batch
change: the same command, precision and environment, the same number of warm-up, timed and
profiled steps.

The batch, as the hypothesis booked wants it:

* ``--global-batch N`` (shorter_step, make_possible): N samples a step in both runs, so N per
  process on one card and N/2 on two;
* ``--per-card-batch N`` (bigger_batch): N per process in both runs (2N a step on two cards);
* ``--script-batch global|per-card``: the command sets its batch itself and you say which it
  keeps fixed (samples per second are then "not measured").

The command receives the per-process batch as ``GPULOTS_PER_RANK_BATCH`` (and the global one as
``GPULOTS_GLOBAL_BATCH``, the step bound as ``GPULOTS_MAX_STEPS``), and ``{per_rank_batch}``,
``{global_batch}``, ``{nproc}`` and ``{max_steps}`` in its arguments are replaced.

What is measured, without changing your code (a ``sitecustomize`` on PYTHONPATH loads these
hooks into each process; any sitecustomize of your own still runs after it):

* steps: each ``optimizer.step()`` of the first optimizer that steps (PyTorch's global
  optimizer hook: plain loops, Lightning and the Hugging Face Trainer all call it); or, if you
  mark steps yourself, ``with gpulots.step():`` / ``gpulots.mark_step()`` /
  ``gpulots.lightning_callback()`` / ``gpulots.hf_callback()`` (these win over the automatic
  marks). The first ``--warmup`` steps are not timed; the next ``--steps`` are; the last
  ``--profile-steps`` run under torch.profiler;
* peak memory per card: ``torch.cuda.max_memory_allocated`` and ``max_memory_reserved`` of each
  process's card (``LOCAL_RANK``); on a CPU the process's peak resident memory, said so;
* the exchange, from the profiled steps: the collectives (NCCL/RCCL kernels on the card,
  gloo operations on a CPU) against the compute (the card's other kernels, or the job's own
  threads), each counted once where they overlap. The exposed exchange is the collectives'
  time no compute overlaps (``collective_busy_ms`` is all of it); the card that waits less
  gives the run's exchange and its share of the step, and each card's compute time gives the
  imbalance between the cards.

Once every process has made its steps, the run is ended (its process group stopped); a run
that outlives ``--timeout`` is cut and reported as such. An out-of-memory error is a result
("does not fit one card"), not a crash. The report (version 2, ``"kind": "split_test"``, the
acceptance benchmark's format) goes to ``--out``; ``--upload`` attaches it to your order with
your API token (``GPULOTS_TOKEN``, or ``--token-file``), where the order's validation report
shows it beside the acceptance result.

Exit codes: 0 both runs gave a result (an out-of-memory included), 1 a run failed, 2 usage
error, 5 a run timed out, 7 the report was written but the upload failed.

Python 3.9+ and the standard library; PyTorch only in the processes of your command.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import datetime as _dt
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import re
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any

VERSION = 1
REPORT_VERSION = 2
TOOL = f"gpulots split-test {VERSION}"
GIB = 2**30
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_TIMEOUT = 5
EXIT_UPLOAD = 7
SHORTER = 1.1
"""Two cards answer "shorter step" at 1.1x one card's step time or better."""
BIGGER_BATCH = 1.25
"""Twice the batch on two cards answers "bigger batch" at no more than 1.25x the step time."""
COMPUTE_IMBALANCE = 1.15
"""One process's compute time over 1.15x the other's: an unbalanced split."""
MEMORY_IMBALANCE = 0.5
"""The emptier card's peak under half the fuller one's: an unbalanced split (GPUs only)."""
OUT_OF_MEMORY = re.compile(
    r"OutOfMemoryError|CUDA out of memory|HIP out of memory|out of memory", re.IGNORECASE
)
HYPOTHESES = ("shorter_step", "bigger_batch", "make_possible")
LAUNCHERS = ("torchrun", "accelerate", "deepspeed", "mpirun", "srun")
"""Commands that start the processes themselves: run them with --launcher none."""
ORDER_FILE = os.path.join("~", ".gpulots", "order.json")
"""Written into each delivered account: the order's reference, lot job, hypothesis, API."""


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def not_measured(why: str) -> str:
    return f"not measured: {why}"


# --------------------------------------------------------------------------------------
# The hooks, in each process of the researcher's command


class _Recorder:
    """Step marks, the profiled window and the peak memory of one process."""

    def __init__(self, folder: str, rank: int, *, implicit: bool = False) -> None:
        self.folder = folder
        self.rank = rank
        self.implicit = implicit
        """No RANK in the environment (``--launcher none``): maybe the command's own
        launcher, which never replaces what a real rank 0 wrote."""
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0") or 0)
        self.warmup = int(os.environ.get("GPULOTS_WARMUP", "5"))
        self.steps = int(os.environ.get("GPULOTS_STEPS", "20"))
        self.profiled = int(os.environ.get("GPULOTS_PROFILE_STEPS", "3"))
        self.total = self.warmup + self.steps + (self.profiled + 1 if self.profiled else 0)
        self.marked_by = "optimizer.step (automatic)"
        self.explicit = False
        self.first_optimizer: int | None = None
        self.depth = 0
        self.ends: list[float] = []  # perf_counter at each step's end
        self.durations: list[float] = []  # seconds of each step
        self.began: float | None = None
        self.profiler: Any = None
        self.window: dict[str, Any] = {}
        self.written = False
        self.error: dict[str, Any] | None = None

    # -- marks

    def _torch(self) -> Any:
        return sys.modules.get("torch")

    def _cuda(self) -> Any:
        """torch, once this process uses CUDA (never initialising it); else None."""
        torch = self._torch()
        with contextlib.suppress(Exception):
            if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
                return torch
        return None

    def _capturing(self) -> bool:
        """Inside a CUDA graph capture: no synchronisation, no mark (a replay is no step
        PyTorch's hooks see)."""
        torch = self._cuda()
        with contextlib.suppress(Exception):
            if torch is not None:
                return bool(torch.cuda.is_current_stream_capturing())
        return False

    def _sync(self) -> None:
        torch = self._cuda()
        if torch is None or self._capturing():
            return
        with contextlib.suppress(Exception):
            torch.cuda.synchronize(self._device_index(torch))

    def _device_index(self, torch: Any) -> int:
        count = torch.cuda.device_count()
        return self.local_rank if self.local_rank < count else torch.cuda.current_device()

    def stepping(self) -> None:
        """Before an ``optimizer.step()``: a step within a step (a subclass calling
        ``super().step()``, ZeroRedundancyOptimizer's inner optimizer) is not a mark."""
        self.depth += 1

    def automatic(self, optimizer: Any) -> None:
        self.depth = max(0, self.depth - 1)
        if self.explicit or self.depth or self._capturing():
            return
        if self.first_optimizer is None:
            self.first_optimizer = id(optimizer)
        if id(optimizer) != self.first_optimizer:
            return  # a second optimizer (a GAN's): one mark an iteration
        self._end(None)

    def begin(self, by: str) -> None:
        self._explicit(by)
        self._sync()
        self.began = time.perf_counter()

    def end(self, by: str) -> None:
        self._explicit(by)
        self._end(self.began)
        self.began = None

    def _explicit(self, by: str) -> None:
        if not self.explicit:  # marks of your own replace the automatic ones from here on
            self.explicit = True
            self.marked_by = by
            self.ends, self.durations = [], []

    def _end(self, began: float | None) -> None:
        if self.written:
            return
        self._sync()
        stamp = time.perf_counter()
        previous = self.ends[-1] if self.ends else None
        start = began if began is not None else previous
        self.ends.append(stamp)
        self.durations.append(stamp - start if start is not None else float("nan"))
        done = len(self.ends)
        if self.profiler is not None:
            self.profiler.step()
        elif done == self.warmup + self.steps and self.profiled > 0:
            self._start_profiler()
        if done >= self.total:
            self.finish("done")

    # -- the profiled window

    def _start_profiler(self) -> None:
        """torch.profiler over the next 1 + ``profiled`` steps: the first is its warm-up
        (its start-up cost stays out of the figures), the others are recorded."""
        try:
            from torch.profiler import ProfilerActivity, profile, schedule

            activities = [ProfilerActivity.CPU]
            if self._cuda() is not None:
                activities.append(ProfilerActivity.CUDA)
            self.profiler = profile(
                activities=activities,
                schedule=schedule(wait=0, warmup=1, active=self.profiled, repeat=1),
                on_trace_ready=self._trace_ready,
            )
            self.profiler.__enter__()
            self.window["first_step"] = len(self.ends) + 1
        except Exception as exc:  # the figures without the exchange are still figures
            self.profiler = None
            self.window["error"] = f"the profiler did not start: {type(exc).__name__}: {exc}"

    def _trace_ready(self, profiler: Any) -> None:
        """The profiled steps' collectives and compute: on a GPU the NCCL/RCCL kernels
        against the other kernels on the card, on a CPU gloo's operations (on gloo's own
        threads) against the ops of the job's threads. The exposed exchange is the
        collectives' time that no compute overlaps; what overlaps is hidden under it."""
        try:
            collectives: list[tuple[float, float]] = []
            kernels: list[tuple[float, float]] = []
            host: list[tuple[Any, str, tuple[float, float]]] = []
            gloo_threads = set()
            source = ""
            for event in profiler.events():
                name = str(event.name)
                span = (float(event.time_range.start), float(event.time_range.end))
                on_device = "CUDA" in str(getattr(event, "device_type", "")).upper()
                if on_device:
                    if getattr(event, "is_user_annotation", False) or ":" in name.split("(")[0]:
                        continue  # an annotation on the card's timeline (nccl:all_reduce)
                    if "nccl" in name.lower():
                        collectives.append(span)
                        source = "profiler: NCCL/RCCL kernels"
                    else:
                        kernels.append(span)
                elif name.startswith("gloo:"):
                    collectives.append(span)
                    gloo_threads.add(getattr(event, "thread", None))
                    source = source or "profiler: gloo operations"
                elif not name.startswith("ProfilerStep"):
                    host.append((getattr(event, "thread", None), name, span))
            if kernels:  # a GPU: the card's own timeline
                compute = kernels
            else:  # a CPU: the job's threads (gloo works on threads of its own)
                compute = [span for thread, _name, span in host if thread not in gloo_threads]
            busy = merged(collectives)
            worked = merged(compute)
            hidden = overlap_seconds(busy, worked)
            first = self.window["first_step"]
            window = self.durations[first : first + self.profiled]
            self.window.update(
                steps=len(window),
                step_seconds=sum(window),
                collective_seconds=length(busy) / 1e6,
                exposed_seconds=(length(busy) - hidden) / 1e6,
                compute_seconds=length(worked) / 1e6,
                collectives=len(collectives),
                source=source,
            )
        except Exception as exc:
            self.window["error"] = f"the profile could not be read: {type(exc).__name__}: {exc}"

    def _stop_profiler(self) -> None:
        if self.profiler is None:
            return
        profiler, self.profiler = self.profiler, None
        with contextlib.suppress(Exception):
            profiler.__exit__(None, None, None)

    # -- the result

    def memory(self) -> dict[str, Any]:
        torch = self._cuda()
        if torch is not None:
            with contextlib.suppress(Exception):
                index = self._device_index(torch)
                free, total = torch.cuda.mem_get_info(index)
                return {
                    # the card's used memory when the run ends: the CUDA context, NCCL's
                    # buffers and the allocator's cache too (max_memory_allocated's not)
                    "device_used_gib": round((total - free) / GIB, 3),
                    "device": f"cuda:{index}",
                    "card_name": torch.cuda.get_device_name(index),
                    "peak_memory_gib": round(torch.cuda.max_memory_allocated(index) / GIB, 3),
                    "peak_reserved_gib": round(torch.cuda.max_memory_reserved(index) / GIB, 3),
                    "memory_source": "torch.cuda.max_memory_allocated",
                }
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
        return {
            "device": "cpu",
            "peak_memory_gib": round(rss, 3),
            "peak_reserved_gib": not_measured("no GPU"),
            "memory_source": "process_peak_rss_gib",
        }

    def result(self, status: str) -> dict[str, Any]:
        timed = [d for d in self.durations[self.warmup : self.warmup + self.steps] if d == d]
        torch = self._torch()
        found: dict[str, Any] = {
            "rank": self.rank,
            "local_rank": self.local_rank,
            "status": status,
            "steps_made": len(self.ends),
            "steps_timed": len(timed),
            "marked_by": self.marked_by,
            "median_step_ms": round(statistics.median(timed) * 1000, 3) if timed else None,
            "torch": getattr(torch, "__version__", None),
            "backend": _backend(),
            **self.memory(),
        }
        window = self.window
        if window.get("steps") and timed:
            # Shares within the profiled steps (the profiler slows a step, most on a CPU):
            # applied to the timed step, they give its milliseconds.
            step = window["step_seconds"]
            median = statistics.median(timed)

            def share(seconds: float) -> float:
                return min(1.0, seconds / step) if step > 0 else 0.0

            exposed, busy = share(window["exposed_seconds"]), share(window["collective_seconds"])
            computing = share(window["compute_seconds"])
            found.update(
                profiled_steps=window["steps"],
                profiled_step_ms=round(step / window["steps"] * 1000, 3),
                collective_share=round(exposed, 4),
                collective_ms=round(exposed * median * 1000, 3),
                collective_busy_ms=round(busy * median * 1000, 3),
                compute_ms=round(computing * median * 1000, 3),
                collectives_seen=window["collectives"],
                collective_source=window["source"] or not_measured("no collective was seen"),
            )
        elif window.get("error"):
            found["profile_error"] = window["error"]
        if window.get("hook_error"):
            found["hook_error"] = window["hook_error"]
        if self.error:
            found.update(self.error)
        return found

    def finish(self, status: str) -> None:
        """Write this process's figures (once); the runner ends the run when all have."""
        if self.written:
            return
        self._stop_profiler()
        if not self.ends and status != "oom" and self.error is None:
            return  # a process of the launcher, or a data-loader worker: nothing to say
        self.written = True
        group = _process_group() if self.implicit else None
        if group is not None:  # --launcher none: the rank its process group gives it
            self.rank, self.implicit = group.get_rank(), False
        path = os.path.join(self.folder, f"rank-{self.rank}.json")
        if self.implicit and os.path.exists(path):
            return
        handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=".rank-")
        with os.fdopen(handle, "w") as out:
            json.dump(self.result(status), out)
        os.replace(temporary, path)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()


def _process_group() -> Any:
    """torch.distributed once this process initialised it; else None (never imports it)."""
    dist = sys.modules.get("torch.distributed")
    with contextlib.suppress(Exception):
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    return None


def _backend() -> str | None:
    group = _process_group()
    return None if group is None else str(group.get_backend())


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``intervals`` as disjoint ones, in order (overlapping ones counted once)."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in intervals)


def overlap_seconds(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """The length of the intersection of two lists of disjoint, ordered intervals."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if end > start:
            total += end - start
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


_recorder: _Recorder | None = None


def step() -> Any:
    """``with gpulots.step(): ...`` around one training step (a no-op outside a split test)."""
    return _Step("gpulots.step()")


class _Step:
    def __init__(self, by: str) -> None:
        self.by = by

    def __enter__(self) -> None:
        if _recorder is not None:
            _recorder.begin(self.by)

    def __exit__(self, kind: Any, value: Any, trace: Any) -> None:
        if _recorder is not None and kind is None:
            _recorder.end(self.by)


def mark_step() -> None:
    """Call once at the end of each step, where a ``with`` block is awkward."""
    if _recorder is not None:
        _recorder._explicit("gpulots.mark_step()")
        _recorder._end(None)


def lightning_callback() -> Any:
    """A Lightning callback marking each training batch: ``Trainer(callbacks=[...])``."""
    try:
        from lightning.pytorch import Callback
    except ImportError:
        from pytorch_lightning import Callback

    class SplitTestSteps(Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, index: int) -> None:
            if _recorder is not None:
                _recorder.begin("Lightning callback")

        def on_train_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
            if _recorder is not None:
                _recorder.end("Lightning callback")

    return SplitTestSteps()


def hf_callback() -> Any:
    """A Hugging Face Trainer callback marking each optimizer step: ``callbacks=[...]``."""
    from transformers import TrainerCallback

    class SplitTestSteps(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if _recorder is not None:
                _recorder.begin("Hugging Face Trainer callback")

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if _recorder is not None:
                _recorder.end("Hugging Face Trainer callback")

    return SplitTestSteps()


def _attach(torch: Any) -> None:
    """Once torch is imported: the automatic step marks."""
    recorder = _recorder
    if recorder is None:
        return
    try:  # never at the cost of the job's own `import torch`
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: recorder.stepping())
        register_optimizer_step_post_hook(
            lambda optimizer, args, kwargs: recorder.automatic(optimizer)
        )
    except Exception as exc:  # torch before 2.0: mark steps with gpulots.step()
        recorder.window["hook_error"] = f"no automatic step marks: {type(exc).__name__}: {exc}"


class _WhenTorchLoads(importlib.abc.MetaPathFinder):
    """Attaches the hooks right after ``import torch`` (never importing it first)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _attach(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _autostart() -> None:
    """From the sitecustomize the runner puts on PYTHONPATH: record this process's steps if
    it is one of the run's (torchrun sets RANK; the launcher itself records nothing)."""
    global _recorder
    folder = os.environ.get("GPULOTS_SPLIT_DIR")
    if not folder or _recorder is not None:
        return
    rank = os.environ.get("RANK")
    owner = os.environ.get("GPULOTS_OWNER_PID")
    if owner and owner != str(os.getpid()):
        return  # a child of a rank (a data-loader worker, a compiler): not a rank itself
    if rank is None and os.environ.get("GPULOTS_LAUNCHER") != "none":
        return
    if rank is not None:
        os.environ["GPULOTS_OWNER_PID"] = str(os.getpid())
    _recorder = _Recorder(folder, int(rank or 0), implicit=rank is None)
    recorder = _recorder
    previous = sys.excepthook

    def excepthook(kind: Any, value: Any, trace: Any) -> None:
        text = f"{kind.__name__}: {value}"
        status = "oom" if OUT_OF_MEMORY.search(text) else "failed"
        recorder.error = {"error": text[:500]}
        recorder.finish(status)
        previous(kind, value, trace)

    sys.excepthook = excepthook
    atexit.register(lambda: recorder.finish("ended"))
    if "torch" in sys.modules:
        _attach(sys.modules["torch"])
    else:
        sys.meta_path.insert(0, _WhenTorchLoads())


SITECUSTOMIZE = '''"""Written by gpulots split-test: records this process's steps, then runs any
sitecustomize of the environment's own."""
import importlib.machinery, importlib.util, os, sys

import gpulots

gpulots._autostart()
_here = os.path.dirname(os.path.abspath(__file__))
_others = [p for p in sys.path if os.path.abspath(p or ".") != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _others)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
'''


# --------------------------------------------------------------------------------------
# The runner


class UsageError(Exception):
    pass


def order_file() -> dict[str, Any]:
    """The delivered account's order facts (reference, job, hypothesis, api), if any."""
    path = os.path.expanduser(os.environ.get("GPULOTS_ORDER_FILE", ORDER_FILE))
    try:
        with open(path) as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def account_cards(explicit: str) -> list[str]:
    """The cards to use: --cards, else the account's visible devices, else 0,1."""
    text = (
        explicit
        or os.environ.get("CUDA_VISIBLE_DEVICES")
        or os.environ.get("HIP_VISIBLE_DEVICES", "")
    )
    cards = [c.strip() for c in text.split(",") if c.strip()]
    return cards or ["0", "1"]


def launch(command: list[str], nproc: int, launcher: str) -> list[str]:
    """The command under torchrun with ``nproc`` processes (``--launcher none``: as given)."""
    if launcher == "none":
        return command
    program = os.path.basename(command[0])
    module = command[2] if command[1:2] == ["-m"] and len(command) > 2 else ""
    if program in LAUNCHERS or module in ("torch.distributed.run", "torch.distributed.launch"):
        raise UsageError(
            f"{program if program in LAUNCHERS else module} launches the processes itself: "
            "use --launcher none, with {nproc} where it takes the number of processes"
        )
    torchrun = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    if re.fullmatch(r"python[0-9.]*", program):
        rest = command[1:]
        if rest[:1] == ["-m"] and len(rest) >= 2:
            return [command[0], *torchrun, "-m", *rest[1:]]
        if not rest or rest[0].startswith("-"):
            raise UsageError(
                f"{shlex.join(command)}: give the script first (python train.py ...) "
                "or use --launcher none"
            )
        return [command[0], *torchrun, *rest]
    python = os.environ.get("GPULOTS_PYTHON") or shutil.which("python3") or sys.executable
    return [python, *torchrun, "--no-python", *command]


class Plan:
    """What the two runs hold constant and what they change (the batch per process)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.hypothesis = args.hypothesis
        given = [
            name
            for name, value in (
                ("--global-batch", args.global_batch),
                ("--per-card-batch", args.per_card_batch),
                ("--script-batch", args.script_batch),
            )
            if value
        ]
        if len(given) != 1:
            raise UsageError(
                "say how the batch is set, once: --global-batch N (the same samples a step on "
                "one card and two), --per-card-batch N (the same per card), or --script-batch "
                "global|per-card (your command sets it; say which it keeps fixed)"
            )
        self.keeps = "global" if args.global_batch or args.script_batch == "global" else "per-card"
        wanted = "per-card" if self.hypothesis == "bigger_batch" else "global"
        if self.keeps != wanted:
            raise UsageError(
                f"{self.hypothesis} compares "
                + (
                    "the same batch per card (the global batch doubles on two cards): use "
                    "--per-card-batch or --script-batch per-card"
                    if wanted == "per-card"
                    else "the same global batch on one card and two: use --global-batch or "
                    "--script-batch global"
                )
            )
        if args.global_batch and args.global_batch % 2:
            raise UsageError("--global-batch: an even number (it is split over two cards)")
        self.global_batch = args.global_batch
        self.per_card_batch = args.per_card_batch

    def batches(self, world: int) -> tuple[int | None, int | None]:
        """(global batch, batch per process) of a run on ``world`` cards; None: the script's."""
        if self.global_batch:
            return self.global_batch, self.global_batch // world
        if self.per_card_batch:
            return self.per_card_batch * world, self.per_card_batch
        return None, None

    def held_constant(self, args: argparse.Namespace, threads: str) -> list[str]:
        held = [
            "the same command and arguments (only the batch per process changes)",
            "the same environment and interpreter",
            f"the same steps: {args.warmup} warm-up, {args.steps} timed, "
            f"{args.profile_steps} profiled",
            f"the same CPU threads per process (OMP_NUM_THREADS={threads})",
        ]
        if args.precision:
            held.append(f"the same precision ({args.precision}, as GPULOTS_PRECISION)")
        else:
            held.append("the precision your command sets (the same command in both runs)")
        if self.global_batch:
            held.append(f"the same global batch ({self.global_batch} samples a step)")
        elif self.per_card_batch:
            held.append(f"the same batch per card ({self.per_card_batch})")
        else:
            held.append(f"the batch as your command sets it (it keeps the {self.keeps} batch)")
        return held


def _substitute(command: list[str], values: dict[str, Any]) -> list[str]:
    out = []
    for part in command:
        for key, value in values.items():
            part = part.replace("{" + key + "}", "" if value is None else str(value))
        out.append(part)
    return out


def run_once(
    args: argparse.Namespace,
    plan: Plan,
    name: str,
    world: int,
    cards: list[str],
    threads: str,
    work: str,
) -> dict[str, Any]:
    """One run of the command on ``world`` cards: its status and figures per process."""
    global_batch, per_rank = plan.batches(world)
    steps = args.warmup + args.steps + (args.profile_steps + 1 if args.profile_steps else 0)
    values = {
        "per_rank_batch": per_rank,
        "global_batch": global_batch,
        "nproc": world,
        "max_steps": steps,
    }
    if "{per_rank_batch}" in " ".join(args.command) and per_rank is None:
        raise UsageError("{per_rank_batch} in the command needs --global-batch or --per-card-batch")
    folder = os.path.join(work, name)
    hooks = os.path.join(work, "hooks")
    os.makedirs(folder, exist_ok=True)
    shown = ",".join(cards[:world])
    environment = dict(os.environ)
    # The account's device order and ROCR list stay as they are: the cards are its indices.
    path = [hooks, environment.get("PYTHONPATH", "")]
    environment.update(
        {
            "CUDA_VISIBLE_DEVICES": shown,
            "HIP_VISIBLE_DEVICES": shown,
            "OMP_NUM_THREADS": threads,
            "PYTHONPATH": os.pathsep.join(p for p in path if p),
            "GPULOTS_SPLIT_DIR": folder,
            "GPULOTS_RUN": name,
            "GPULOTS_LAUNCHER": args.launcher,
            "GPULOTS_NPROC": str(world),
            "GPULOTS_WARMUP": str(args.warmup),
            "GPULOTS_STEPS": str(args.steps),
            "GPULOTS_PROFILE_STEPS": str(args.profile_steps),
            "GPULOTS_MAX_STEPS": str(steps),
        }
    )
    if args.precision:
        environment["GPULOTS_PRECISION"] = args.precision
    for key, value in (
        ("GPULOTS_PER_RANK_BATCH", per_rank),
        ("GPULOTS_GLOBAL_BATCH", global_batch),
    ):
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = str(value)
    command = launch(_substitute(args.command, values), world, args.launcher)
    log_path = os.path.join(args.logs, f"split-test-{name}.log")
    run: dict[str, Any] = {
        "world": world,
        "cards": shown,
        "global_batch": global_batch,
        "per_rank_batch": per_rank,
        "command": command,
        "log": os.path.abspath(log_path),
    }
    print(f"{name}: {world} card(s) [{shown}], log {log_path}", file=sys.stderr, flush=True)
    started = time.monotonic()
    ended_by_us = timed_out = False
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,  # its own process group: torchrun and every worker
        )
        while process.poll() is None:
            if all_done(folder, world):
                ended_by_us = True  # every process made its steps: the rest is not measured
                break
            if time.monotonic() - started > args.timeout:
                timed_out = True
                break
            time.sleep(0.1)
        # Always: what torchrun left behind goes too, and the next run starts only once
        # nothing of this one holds a card.
        stop_group(process)
    run["seconds"] = round(time.monotonic() - started, 2)
    run["exit_code"] = None if ended_by_us or timed_out else process.returncode
    ranks = read_ranks(folder)
    run["per_rank"] = ranks
    tail = log_tail(log_path)
    return summarise(run, ranks, world, steps, tail, timed_out=timed_out, args=args)


def all_done(folder: str, world: int) -> bool:
    """Every process wrote that it made its steps (a failure lets torchrun end the run,
    so that its traceback and exit status reach the log)."""
    for rank in range(world):
        try:
            with open(os.path.join(folder, f"rank-{rank}.json")) as handle:
                if json.load(handle).get("status") != "done":
                    return False
        except (OSError, ValueError):
            return False
    return True


def group_alive(group: int) -> bool:
    """Whether a process of process group ``group`` still runs (Linux: /proc)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return False
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
            return True
    return False


def stop_group(process: subprocess.Popen[bytes], patience: float = 30) -> None:
    """End the run's process group (torchrun and its workers): TERM, then KILL; then wait,
    bounded, until none of it is left (a killed worker may hold its card a moment)."""
    group = process.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    process.wait()
    until = time.monotonic() + patience
    while group_alive(group) and time.monotonic() < until:
        time.sleep(0.1)


def read_ranks(folder: str) -> list[dict[str, Any]]:
    ranks = []
    for name in sorted(os.listdir(folder)):
        if re.fullmatch(r"rank-[0-9]+\.json", name):
            with contextlib.suppress(OSError, ValueError), open(os.path.join(folder, name)) as f:
                ranks.append(json.load(f))
    return sorted(ranks, key=lambda r: r.get("rank", 0))


def log_tail(path: str, size: int = 4000) -> str:
    with open(path, "rb") as handle:
        handle.seek(max(0, os.path.getsize(path) - size))
        return handle.read().decode("utf-8", "replace")


def last_error_line(tail: str) -> str:
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.search(r"(Error|Exception)\b", line) and not line.startswith("File "):
            return line[:300]
    return lines[-1][:300] if lines else ""


def summarise(
    run: dict[str, Any],
    ranks: list[dict[str, Any]],
    world: int,
    steps: int,
    tail: str,
    *,
    timed_out: bool,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The run's status and figures from its processes' files."""
    done = [r for r in ranks if r.get("status") == "done"]
    oom = [r for r in ranks if r.get("status") == "oom"]
    if oom or (not done and OUT_OF_MEMORY.search(tail) and not timed_out):
        error = (oom[0].get("error") if oom else "") or last_error_line(tail)
        run.update(status="oom", fits=False, error=f"out of memory: {error}"[:400])
        return run
    if timed_out and len(done) < world:
        run.update(
            status="timeout",
            fits=None,
            error=f"cut after {args.timeout:g} s (--timeout): {len(done)} of {world} "
            f"process(es) had made their {steps} steps",
        )
        return run
    if len(done) < world:
        made = max((r.get("steps_made", 0) for r in ranks), default=0)
        if ranks and all(r.get("status") == "ended" for r in ranks):
            why = (
                f"the command ended after {made} steps; the test needs {steps} "
                f"(--warmup {args.warmup}, --steps {args.steps}, --profile-steps "
                f"{args.profile_steps}): let it run longer (GPULOTS_MAX_STEPS)"
            )
        elif not ranks and run.get("exit_code") == 0:
            why = (
                "no step was seen: the command never called optimizer.step() "
                "(mark steps with gpulots.step() or gpulots.mark_step())"
            )
        else:
            failed = next((r.get("error") for r in ranks if r.get("error")), "")
            why = f"exit {run.get('exit_code')}: {failed or last_error_line(tail)}"
        run.update(status="failed", fits=None, error=why[:500])
        return run
    steps_ms = [r["median_step_ms"] for r in done if isinstance(r.get("median_step_ms"), float)]
    peaks = [r.get("peak_memory_gib") for r in done]
    reserved = [r.get("peak_reserved_gib") for r in done]
    median = max(steps_ms) if steps_ms else None  # the slower process sets the step
    run.update(
        status="ok",
        fits=True,
        error="",
        median_step_ms=median,
        steps_measured=min(r.get("steps_timed", 0) for r in done),
        marked_by=done[0].get("marked_by"),
        memory_source=done[0].get("memory_source"),
        device=done[0].get("device"),
        backend=done[0].get("backend"),
        peak_memory_gib=peaks[0] if world == 1 else peaks,
        peak_reserved_gib=reserved[0] if world == 1 else reserved,
    )
    if median and run["global_batch"]:
        run["samples_per_s"] = round(run["global_batch"] / (median / 1000), 3)
    else:
        run["samples_per_s"] = not_measured("the batch is set by your command (--script-batch)")
    if world > 1:
        collective = [r.get("collective_ms") for r in done]
        compute = [r.get("compute_ms") for r in done]
        if all(isinstance(c, (int, float)) for c in collective) and all(
            r.get("collectives_seen") for r in done
        ):
            # The faster card waits in the collective for the slower one: the shorter exposed
            # time is the exchange itself, the difference the imbalance.
            share = min(r["collective_share"] for r in done)
            exchange = round(share * median, 3) if median else None
            run.update(
                exchange_ms=exchange,
                exchange_share=share,
                collective_ms=collective,
                collective_busy_ms=[r.get("collective_busy_ms") for r in done],
                compute_ms=compute,
                compute_imbalance=round(max(compute) / min(compute), 3)  # type: ignore[type-var,operator]
                if min(compute) > 0  # type: ignore[type-var,operator]
                else None,
                collective_source=done[0].get("collective_source"),
                profiled_steps=min(r.get("profiled_steps", 0) for r in done),
            )
        else:
            why = next(
                (r.get("profile_error") or r.get("collective_source") for r in done), ""
            ) or not_measured("no collective was seen in the profiled steps")
            why = why if str(why).startswith("not measured") else not_measured(str(why))
            run.update(exchange_ms=why, exchange_share=why, compute_imbalance=None)
        numbers = [p for p in peaks if isinstance(p, (int, float))]
        memory_unbalanced = (
            run["device"] != "cpu"
            and len(numbers) == world
            and min(numbers) < MEMORY_IMBALANCE * max(numbers)
        )
        run["imbalanced"] = bool(
            memory_unbalanced or (run.get("compute_imbalance") or 1) > COMPUTE_IMBALANCE
        )
    return run


def verdict(
    hypothesis: str, one: dict[str, Any], two: dict[str, Any], stand_in: bool
) -> dict[str, Any]:
    """The answer to the hypothesis booked, from the researcher's own job."""
    result: dict[str, Any] = {
        "hypothesis": hypothesis,
        "answer": "not_answered",
        "code": "",
        "measured": "",
        "speedup": None,
        "stand_in": stand_in,
    }
    tail = (
        " Measured on a CPU stand-in (gloo processes), not on the cards: the figures show the "
        "method, not the cards' speed."
        if stand_in
        else ""
    )
    for run, label in ((one, "one card"), (two, "two cards")):
        if run.get("status") in ("timeout", "failed"):
            code = "timeout" if run["status"] == "timeout" else "error"
            result.update(
                code=code,
                measured=f"Not answered: the run on {label} {run['status']}: "
                f"{run.get('error')}.{tail}",
            )
            return result
    if hypothesis == "make_possible":
        if one.get("fits"):
            result.update(
                answer="no",
                code="already_fits_one_card",
                measured=f"Your job already runs on one card (peak {one.get('peak_memory_gib')} "
                f"GiB): the second card is not needed to run it.{tail}",
            )
        elif two.get("fits"):
            result.update(
                answer="yes",
                code="fits_two_cards_only",
                measured=f"Your job does not fit one card ({one.get('error')}) and runs on two, "
                f"peak {two.get('peak_memory_gib')} GiB per card.{tail}",
            )
        else:
            result.update(
                answer="no",
                code="fits_neither",
                measured=f"Your job fits neither one card nor two ({two.get('error')}).{tail}",
            )
        return result
    if not one.get("fits"):
        result.update(
            code="one_card_does_not_fit",
            measured=f"Your job does not fit one card ({one.get('error')}); "
            f"no one-card step to compare.{tail}",
        )
        return result
    if not two.get("fits"):
        result.update(
            code="two_cards_not_run",
            measured=f"Not answered: the two-card run did not fit ({two.get('error')}).{tail}",
        )
        return result
    exchange = _exchange_words(two)
    if hypothesis == "shorter_step":
        speedup = round(one["median_step_ms"] / two["median_step_ms"], 2)
        yes = speedup >= SHORTER
        result.update(
            answer="yes" if yes else "no",
            code="shorter" if yes else "not_shorter",
            speedup=speedup,
            measured=f"Step time {one['median_step_ms']:.1f} ms on one card and "
            f"{two['median_step_ms']:.1f} ms on two, the same global batch: {speedup}x "
            + ("shorter." if yes else f"of one card (not shorter: under {SHORTER}x).")
            + exchange
            + tail,
        )
    else:  # bigger_batch
        ratio = round(two["median_step_ms"] / one["median_step_ms"], 2)
        throughput = round(2 / ratio, 2)
        yes = ratio <= BIGGER_BATCH
        result.update(
            answer="yes" if yes else "no",
            code="bigger_batch" if yes else "bigger_batch_slower",
            speedup=throughput,
            measured=f"Twice the global batch on two cards takes {ratio}x one card's step time "
            f"({two['median_step_ms']:.1f} against {one['median_step_ms']:.1f} ms): "
            f"{throughput}x the samples per second."
            + ("" if yes else f" Over {BIGGER_BATCH}x: the exchange eats the gain.")
            + exchange
            + tail,
        )
    if two.get("imbalanced"):
        result["measured"] += " The two cards are unbalanced: check the split."
    return result


def _exchange_words(two: dict[str, Any]) -> str:
    share = two.get("exchange_share")
    if isinstance(share, (int, float)):
        return f" Exchange {two['exchange_ms']:.1f} ms a step ({share * 100:.0f} % of the step)."
    return ""


def write_report(path: str, data: dict[str, Any]) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".split-test-", suffix=".json", dir=folder)
    with os.fdopen(handle, "w") as out:
        json.dump(data, out, indent=1, default=str)
    os.replace(temporary, path)


def upload(report: dict[str, Any], args: argparse.Namespace, order: dict[str, Any]) -> str:
    """POST the report to the order; the server's answer (its summary), or raises."""
    token = os.environ.get("GPULOTS_TOKEN", "")
    if args.token_file:
        with open(os.path.expanduser(args.token_file)) as handle:
            token = handle.read().strip()
    reference = args.order or order.get("reference")
    api = (args.api or order.get("api") or "").rstrip("/")
    if not token or not reference or not api:
        raise UsageError(
            "--upload needs your API token (GPULOTS_TOKEN or --token-file), the order "
            "(--order, or ~/.gpulots/order.json in a delivered account) and the API (--api)"
        )
    if not re.match(r"https?://", api):
        raise UsageError(f"--api: an http(s) URL, not {api!r}")
    request = urllib.request.Request(  # noqa: S310 (http or https, checked above)
        f"{api}/orders/{reference}/split-tests/",
        data=json.dumps(report, default=str).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310 (http or https)
            body = json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:500]
        raise RuntimeError(f"the upload was refused: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise RuntimeError(f"the upload failed: {exc}") from None
    return str(body.get("summary") or body.get("report_url") or body)


def split_test(args: argparse.Namespace) -> int:
    order = order_file()
    args.hypothesis = args.hypothesis or order.get("hypothesis") or "shorter_step"
    if args.hypothesis not in HYPOTHESES:
        raise UsageError(f"--hypothesis: one of {', '.join(HYPOTHESES)}")
    args.precision = args.precision or order.get("precision") or ""
    plan = Plan(args)
    launch(args.command, 1, args.launcher)  # a command refused before anything runs
    cards = account_cards(args.cards)
    threads = os.environ.get("OMP_NUM_THREADS") or "1"
    os.makedirs(args.logs, exist_ok=True)
    started, clock = now(), time.monotonic()
    report: dict[str, Any] = {
        "version": REPORT_VERSION,
        "kind": "split_test",
        "tool": TOOL,
        "complete": False,
        "started_at": started,
        "finished_at": None,
        "exit_code": None,
        "host": socket.gethostname(),
        "order": {
            "reference": args.order or order.get("reference"),
            "job": order.get("job"),
            "hypothesis": args.hypothesis,
            "precision": args.precision or None,
        },
        "command": args.command,
        "steps": {
            "warmup": args.warmup,
            "measured": args.steps,
            "profiled": args.profile_steps,
        },
        "sections": {},
        "split": {},
        "acceptance": {"passed": None, "checks": [], "failed": []},
    }
    if len(cards) < 2:
        raise UsageError(f"two cards are needed (visible: {','.join(cards)}); see --cards")
    with tempfile.TemporaryDirectory(prefix="gpulots-split-") as work:
        hooks = os.path.join(work, "hooks")
        os.makedirs(hooks)
        with open(os.path.join(hooks, "sitecustomize.py"), "w") as handle:
            handle.write(SITECUSTOMIZE)
        # Only the hooks on the job's path (not the folder this file lies in).
        shutil.copyfile(os.path.abspath(__file__), os.path.join(hooks, "gpulots.py"))
        for name, world in (("one_card", 1), ("two_cards", 2)):
            section = {"status": "running", "seconds": 0.0, "error": ""}
            report["sections"][name] = section
            write_report(args.out, report)
            run = run_once(args, plan, name, world, cards, threads, work)
            report["split"][name] = run
            section.update(
                status={"ok": "ok", "oom": "ok"}.get(run["status"], run["status"]),
                seconds=run["seconds"],
                error=run.get("error", ""),
            )
            print(f"{name}: {run['status']} {run.get('error') or ''}".rstrip(), file=sys.stderr)
    one, two = report["split"]["one_card"], report["split"]["two_cards"]
    stand_in = not any(
        str(r.get("device", "")).startswith("cuda") for r in [*one["per_rank"], *two["per_rank"]]
    )
    report["stand_in"] = stand_in
    report["split"]["exchange_share"] = two.get("exchange_share", not_measured("no two-card run"))
    report["split"]["exposed_exchange_seconds"] = (
        round(two["exchange_ms"] / 1000, 6)
        if isinstance(two.get("exchange_ms"), (int, float))
        else two.get("exchange_ms", not_measured("no two-card run"))
    )
    found = verdict(args.hypothesis, one, two, stand_in)
    found["held_constant"] = plan.held_constant(args, threads)
    report["verdict"] = found
    report["sections"]["verdict"] = {"status": "ok", "seconds": 0.0, "error": ""}
    statuses = {one["status"], two["status"]}
    code = EXIT_TIMEOUT if "timeout" in statuses else EXIT_FAILED if "failed" in statuses else 0
    report.update(
        complete=True,
        finished_at=now(),
        exit_code=code,
        seconds=round(time.monotonic() - clock, 1),
    )
    write_report(args.out, report)
    print(found["measured"])
    print(f"report: {os.path.abspath(args.out)}", file=sys.stderr)
    if args.upload:
        try:
            print(f"attached to the order: {upload(report, args, order)}")
        except (RuntimeError, OSError) as exc:
            print(str(exc), file=sys.stderr)
            return EXIT_UPLOAD
    return code


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="gpulots", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=TOOL)
    commands = parser.add_subparsers(dest="what", required=True)
    split = commands.add_parser(
        "split-test",
        help="your command on one card, then two",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    split.add_argument("--hypothesis", choices=HYPOTHESES, help="default: the order's")
    split.add_argument("--global-batch", type=int, help="samples a step, the same in both runs")
    split.add_argument("--per-card-batch", type=int, help="samples per card, the same in both")
    split.add_argument("--script-batch", choices=("global", "per-card"))
    split.add_argument("--precision", default="", help="passed on as GPULOTS_PRECISION")
    split.add_argument("--warmup", type=int, default=5, help="steps not timed (default 5)")
    split.add_argument("--steps", type=int, default=20, help="steps timed (default 20)")
    split.add_argument(
        "--profile-steps", type=int, default=3, help="steps profiled for the exchange (3)"
    )
    split.add_argument("--timeout", type=float, default=1800, help="seconds per run (1800)")
    split.add_argument("--cards", default="", help="default: CUDA_VISIBLE_DEVICES, else 0,1")
    split.add_argument("--launcher", choices=("torchrun", "none"), default="torchrun")
    split.add_argument("--out", default="split-test-report.json")
    split.add_argument("--logs", default=".", help="folder for the two runs' logs")
    split.add_argument("--upload", action="store_true", help="attach the report to the order")
    split.add_argument("--order", default="", help="default: ~/.gpulots/order.json")
    split.add_argument("--api", default="", help="the API's base URL (…/api/v1)")
    split.add_argument("--token-file", default="", help="default: GPULOTS_TOKEN")
    split.add_argument("command", nargs=argparse.REMAINDER, help="-- your command")
    args = parser.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        split.error("give your command after --: gpulots split-test -- python train.py")
    args.command = command
    if args.warmup < 1 or args.steps < 1 or args.profile_steps < 0 or args.timeout <= 0:
        split.error("--warmup and --steps at least 1, --profile-steps at least 0")
    for name, value in (
        ("--global-batch", args.global_batch),
        ("--per-card-batch", args.per_card_batch),
    ):
        if value is not None and value < 1:
            split.error(f"{name}: at least 1 sample")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        return split_test(args)
    except UsageError as exc:
        print(f"gpulots split-test: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
