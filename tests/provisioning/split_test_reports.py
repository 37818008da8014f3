"""Hand-written reports of ``gpulots split-test`` (issue 16), the researcher's own training
command on one card then two, as the command uploads them: a shorter step on two cards,
and its variants."""

from __future__ import annotations

import copy
from typing import Any

SHORTER: dict[str, Any] = {
    "version": 2,
    "kind": "split_test",
    "tool": "gpulots split-test 1",
    "complete": True,
    "started_at": "2026-12-02T01:00:00Z",
    "finished_at": "2026-12-02T01:00:12Z",
    "exit_code": 0,
    "seconds": 12.3,
    "stand_in": False,
    "host": "h200-01",
    "order": {"reference": None, "job": None, "hypothesis": "shorter_step", "precision": "bf16"},
    "command": ["python", "train.py", "--batch-size", "{per_rank_batch}"],
    "steps": {"warmup": 5, "measured": 20, "profiled": 5, "marked_by": "optimizer.step"},
    "sections": {
        "one_card": {"status": "ok", "seconds": 5.1, "error": ""},
        "two_cards": {"status": "ok", "seconds": 6.0, "error": ""},
        "verdict": {"status": "ok", "seconds": 0.0, "error": ""},
    },
    "split": {
        "one_card": {
            "status": "ok",
            "fits": True,
            "error": "",
            "world": 1,
            "global_batch": 32,
            "per_rank_batch": 32,
            "median_step_ms": 41.2,
            "samples_per_s": 776.7,
            "peak_memory_gib": 3.2,
            "peak_reserved_gib": 3.5,
            "memory_source": "torch.cuda.max_memory_allocated",
            "steps_measured": 20,
            "per_rank": [{"rank": 0, "median_step_ms": 41.2}],
        },
        "two_cards": {
            "status": "ok",
            "fits": True,
            "error": "",
            "world": 2,
            "global_batch": 32,
            "per_rank_batch": 16,
            "median_step_ms": 24.2,
            "samples_per_s": 1322.3,
            "peak_memory_gib": [1.9, 2.1],
            "peak_reserved_gib": [2.2, 2.4],
            "memory_source": "torch.cuda.max_memory_allocated",
            "steps_measured": 20,
            "per_rank": [{"rank": 0}, {"rank": 1}],
            "exchange_ms": 4.4,
            "exchange_share": 0.18,
            "compute_ms": [19.6, 20.4],
            "compute_imbalance": 1.04,
            "imbalanced": False,
            "collective_source": "profiler: NCCL kernels",
        },
        "exchange_share": 0.18,
    },
    "verdict": {
        "hypothesis": "shorter_step",
        "answer": "yes",
        "code": "shorter",
        "measured": "Step time 41.2 ms on one card and 24.2 ms on two: 1.7x shorter.",
        "held_constant": ["the same global batch (32)"],
        "speedup": 1.7,
        "stand_in": False,
    },
    "acceptance": {"passed": None, "checks": [], "failed": []},
}


def report(
    *, job: int | None = None, reference: str | None = None, stand_in: bool = False
) -> dict[str, Any]:
    """SHORTER, uploaded for ``job`` of the order ``reference`` (both may stay null)."""
    made = copy.deepcopy(SHORTER)
    made["order"].update(job=job, reference=reference)
    made["stand_in"] = stand_in
    made["verdict"]["stand_in"] = stand_in
    return made


def bigger_batch(**kwargs: Any) -> dict[str, Any]:
    """Twice the global batch on two cards: 1.8x the samples per second."""
    made = report(**kwargs)
    made["order"]["hypothesis"] = "bigger_batch"
    made["split"]["two_cards"].update(
        global_batch=64, per_rank_batch=32, median_step_ms=45.8, samples_per_s=1398.1
    )
    made["verdict"].update(hypothesis="bigger_batch", code="bigger_batch", speedup=1.8)
    return made


def two_cards_out_of_memory(**kwargs: Any) -> dict[str, Any]:
    """The two-card run ran out of memory: nothing to compare, and a code the page does
    not know (it falls back to the answer)."""
    made = report(**kwargs)
    two = made["split"]["two_cards"]
    for key in ("median_step_ms", "samples_per_s", "exchange_share", "compute_imbalance"):
        two.pop(key)
    two.update(status="oom", fits=False, error="CUDA out of memory", peak_memory_gib=None)
    made["split"].pop("exchange_share")
    made["verdict"].update(answer="not_answered", code="two_cards_out_of_memory", speedup=None)
    return made
