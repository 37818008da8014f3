"""The acceptance benchmark (report v2), the one file hosts get, on this machine's CPU, quick
mode: two processes with gloo stand in for the two cards, a fake nvidia-smi for the vendor
tool, a 7B order scaled down. Prints one JSON line: the wall time, the seconds of each
section, the exit status and the report; exits non-zero if it took 60 s or more, a section
did not end "ok", or a field the contract names is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the build module (no Django): the benchmark as hosts get it

from provisioning.validation import build  # noqa: E402

TARGET_SECONDS = 60
REQUIRED = {
    "": [
        "version",
        "complete",
        "started_at",
        "finished_at",
        "exit_code",
        "stand_in",
        "devices",
        "stack",
        "telemetry",
        "acceptance",
        "sections",
        "essentials",
        "collectives",
        "model",
        "split",
        "verdict",
    ],
    "stack": ["torch", "cuda", "hip", "nccl", "driver", "python", "interpreter", "arch_list"],
    "telemetry": ["before", "after", "samples", "source"],
    "acceptance": ["passed", "checks", "failed"],
    "collectives": ["all_reduce", "all_gather", "reduce_scatter", "transport", "p2p"],
    "model": ["params", "layers", "hidden", "heads", "seq_len", "micro_batch", "precision"],
    "split": ["one_card", "two_cards"],
    "verdict": ["hypothesis", "answer", "code", "measured", "held_constant", "scaled_down"],
}


def main() -> int:
    out = Path(tempfile.mkdtemp()) / "report.json"
    program = build.benchmark()  # built before the clock starts: once per source change
    thresholds = {"sku": "H200", "memory_gib": 141, "bf16_tflops": 989, "hbm_tbps": 4.8}
    started = time.perf_counter()
    done = subprocess.run(
        [
            sys.executable,
            str(program),
            "--out",
            str(out),
            "--quick",
            "--hypothesis",
            "shorter_step",
            "--params-billion",
            "7",
            "--thresholds",
            json.dumps(thresholds),
            "--nvidia-smi",
            str(ROOT / "tests" / "provisioning" / "fakes" / "nvidia-smi"),
            "--smoke",
            f"{sys.executable} -c 'import torch; print(torch.__version__)'",
            "--cards",
            "0,1",
        ],
        check=False,
        capture_output=True,
        # The lot's two cards, as the provisioning backends show them to the benchmark (on a
        # CPU, two gloo processes stand in for them).
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "0,1"},
    )
    seconds = time.perf_counter() - started
    report = json.loads(out.read_text())
    sections = {name: s["seconds"] for name, s in report["sections"].items()}
    summary = {
        "seconds": round(seconds, 1),
        "target_seconds": TARGET_SECONDS,
        "exit_code": done.returncode,
        "sections_seconds": sections,
        "spawn_and_teardown_seconds": round(seconds - sum(sections.values()), 1),
    }
    print(json.dumps({**summary, **report}, separators=(",", ":")))
    missing = [
        f"{part}.{key}" if part else key
        for part, keys in REQUIRED.items()
        for key in keys
        if key not in (report[part] if part else report)
    ]
    bad = [name for name, s in report["sections"].items() if s["status"] != "ok"]
    if missing or bad or done.returncode != 0:
        print(
            f"missing: {missing}; sections not ok: {bad}; exit {done.returncode}", file=sys.stderr
        )
    return 0 if seconds < TARGET_SECONDS and not missing and not bad and done.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
