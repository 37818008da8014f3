"""gpulots: what your job imports during ``gpulots split-test`` (``import gpulots``), and the
package of the command itself (its runner: gpulots.__main__ and the modules beside it).

This module is the hooks, in each process of the researcher's command: a ``sitecustomize``
the runner puts on PYTHONPATH calls ``_autostart()``, which records the process's steps
(``optimizer.step()``, or your own marks: ``with gpulots.step():``, ``gpulots.mark_step()``,
``gpulots.lightning_callback()``, ``gpulots.hf_callback()``), its profiled window and its
peak memory. Outside a split test they do nothing. It imports nothing of the runner, and
PyTorch only once the job has: the standard library, Python 3.9+.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.abc
import importlib.util
import json
import os
import re
import resource
import statistics
import sys
import tempfile
import time
from typing import Any

GIB = 2**30
EXCHANGE_OPS = ("c10d::", "record_param_comms", "ProcessGroup")
"""Host ops of the exchange itself, on the job's thread: they launch or wait on it."""
OUT_OF_MEMORY = re.compile(
    r"OutOfMemoryError|CUDA out of memory|HIP out of memory|out of memory", re.IGNORECASE
)


def not_measured(why: str) -> str:
    return f"not measured: {why}"


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
            bookkeeping: list[tuple[float, float]] = []
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
                elif name.startswith(EXCHANGE_OPS) or "reducer::" in name:
                    bookkeeping.append(span)  # the job's thread launching or waiting on one
                elif not name.startswith("ProfilerStep"):
                    host.append((getattr(event, "thread", None), name, span))
            if kernels:  # a GPU: the card's own timeline
                worked = merged(kernels)
            else:  # a CPU: the job's threads (gloo works on threads of its own)
                compute = [span for thread, _name, span in host if thread not in gloo_threads]
                # The exchange's own calls on the job's thread (c10d::allreduce_, DDP's
                # reducer) hide nothing, nor does the op around them (the gradient hook)
                # while they run.
                worked = without(merged(compute), merged(bookkeeping))
            busy = merged(collectives)
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


def without(
    a: list[tuple[float, float]], b: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The parts of ``a`` that ``b`` does not cover (both disjoint and ordered)."""
    out: list[tuple[float, float]] = []
    j = 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > start:
                out.append((start, b[k][0]))
            start = max(start, b[k][1])
            k += 1
        if start < end:
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
