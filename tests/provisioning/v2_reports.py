"""Hand-written version-2 validation reports (REPORT_V2.md), as the acceptance benchmark
writes them, for the Django side's tests: a passing H200 run, and its variants."""

from __future__ import annotations

import copy
from typing import Any

PASSING: dict[str, Any] = {
    "version": 2,
    "complete": True,
    "started_at": "2026-12-01T10:00:00+00:00",
    "finished_at": "2026-12-01T10:04:10+00:00",
    "exit_code": 0,
    "stand_in": False,
    "devices": {"ok": True, "problem": "", "expected": [0, 1], "seen": 2},
    "stack": {
        "torch": "2.9.0",
        "cuda": "12.8",
        "hip": None,
        "driver": "570.86.15",
        "python": "3.12.3",
        "interpreter": "/opt/envs/pytorch-2.9-cuda-12.8/bin/python",
    },
    "telemetry": {"before": {}, "after": {}, "samples": [], "source": "nvidia-smi"},
    "acceptance": {
        "passed": True,
        "checks": [
            {
                "id": "device_count",
                "card": None,
                "value": 2,
                "unit": "",
                "reference": 2,
                "threshold": None,
                "passed": True,
                "note": "",
            },
            {
                "id": "sku",
                "card": 0,
                "value": "NVIDIA H200",
                "unit": "",
                "reference": "H200",
                "threshold": None,
                "passed": True,
                "note": "",
            },
            {
                "id": "memory",
                "card": 0,
                "value": 140.4,
                "unit": "GiB",
                "reference": 141,
                "threshold": 0.9,
                "passed": True,
                "note": "",
            },
            {
                "id": "ecc",
                "card": 0,
                "value": True,
                "unit": "",
                "reference": True,
                "threshold": None,
                "passed": True,
                "note": "",
            },
            {
                "id": "matmul_bf16",
                "card": 0,
                "value": 702.5,
                "unit": "TFLOP/s",
                "reference": 989,
                "threshold": 0.6,
                "passed": True,
                "note": "",
            },
            {
                "id": "matmul_bf16",
                "card": 1,
                "value": 698.0,
                "unit": "TFLOP/s",
                "reference": 989,
                "threshold": 0.6,
                "passed": True,
                "note": "",
            },
            {
                "id": "matmul_fp8",
                "card": 0,
                "value": "not measured: not supported",
                "unit": "TFLOP/s",
                "reference": 1979,
                "threshold": 0.6,
                "passed": None,
                "note": "",
            },
            {
                "id": "hbm",
                "card": 0,
                "value": 4.1,
                "unit": "TB/s",
                "reference": 4.8,
                "threshold": 0.7,
                "passed": True,
                "note": "",
            },
            {
                "id": "all_reduce",
                "card": None,
                "value": 362.0,
                "unit": "GB/s",
                "reference": None,
                "threshold": 300,
                "passed": True,
                "note": "",
            },
            {
                "id": "cards_match",
                "card": None,
                "value": 0.006,
                "unit": "share",
                "reference": None,
                "threshold": 0.1,
                "passed": True,
                "note": "",
            },
        ],
        "failed": [],
    },
    "sections": {
        "devices": {"status": "ok", "seconds": 1.2, "error": ""},
        "matmul": {"status": "ok", "seconds": 20.0, "error": ""},
    },
    "essentials": {},
    "collectives": {
        "all_reduce": [
            {"bytes": 1048576, "algbw_gbps": 120.0, "busbw_gbps": 120.0, "correct": True},
            {"bytes": 1073741824, "algbw_gbps": 362.0, "busbw_gbps": 362.0, "correct": True},
        ],
        "all_gather": [],
        "reduce_scatter": [],
        "transport": "NVLink",
    },
    "model": {
        "params": 7_000_000_000,
        "layers": 32,
        "hidden": 4096,
        "heads": 32,
        "seq_len": 2048,
        "micro_batch": 1,
        "precision": "bf16",
        "measured_precision": "bf16",
        "scaled_down": False,
        "why": "",
    },
    "split": {
        "one_card": {"median_step_ms": 410.0, "samples_per_s": 2.4, "fits": True, "mode": "single"},
        "two_cards": {
            "median_step_ms": 230.0,
            "samples_per_s": 8.7,
            "fits": True,
            "mode": "data_parallel",
            "peak_memory_gib": [96.1, 95.8],
            "exposed_exchange_seconds": 0.012,
            "exchange_share": 0.052,
        },
    },
    "verdict": {
        "hypothesis": "shorter_step",
        "answer": "yes",
        "code": "shorter",
        "measured": "median step time",
        "held_constant": ["precision", "global_batch"],
        "scaled_down": False,
        "stand_in": False,
    },
}


def report(**changes: Any) -> dict[str, Any]:
    """PASSING with top-level keys replaced (``acceptance=...``) or dropped (``error=None``
    keeps an "error": null out; pass a string to add one)."""
    made = copy.deepcopy(PASSING)
    for key, value in changes.items():
        made[key] = value
    return made


def failed_acceptance() -> dict[str, Any]:
    made = report(exit_code=4)
    made["acceptance"]["passed"] = False
    made["acceptance"]["checks"][4].update(value=410.0, passed=False)
    made["acceptance"]["failed"] = ["matmul_bf16 (card 0): 41 % of peak, below 60 %"]
    return made


def stand_in() -> dict[str, Any]:
    """The CPU stand-in's report, as the local sandbox gets it: a scaled-down model."""
    made = report(stand_in=True)
    made["model"].update(
        params=263_425, layers=4, hidden=256, heads=4, scaled_down=True, why="cpu stand-in"
    )
    made["verdict"].update(stand_in=True, scaled_down=True)
    return made
