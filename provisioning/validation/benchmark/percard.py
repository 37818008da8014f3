"""Each card on its own, every card at the same time (one rank each, no process group): a
kernel check, the dense matrix product (bf16; fp8 where the kind has an fp8 peak), HBM
bandwidth, a memory pattern test over most of free memory, a sustained load."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from .devices import synchronize
from .report import GIB, STAND_IN, not_measured, significant


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
