"""The validation benchmark on this machine's CPU: two processes with gloo stand in for the
two cards, with a small model. Prints the JSON report on one line (GPU-only figures say
"not measured: no GPU"); exits non-zero if it took 2 minutes or more or a field is missing.
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
REQUIRED = {
    "stack": [
        "torch",
        "cuda",
        "hip",
        "driver",
        "devices",
        "arch_list",
        "arch_supported",
        "extensions",
        "kernel_check",
    ],
    "essentials": ["matmul", "attention", "copy_bandwidth_gbps", "all_reduce", "smoke"],
    "split_test": ["one_card", "two_cards", "precision", "samples", "global_batch", "model"],
    "verdict": ["hypothesis", "answer", "held_constant"],
}


def main() -> int:
    out = Path(tempfile.mkdtemp()) / "report.json"
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "provisioning" / "validation" / "benchmark.py"),
            "--out",
            str(out),
            "--quick",
            "--hypothesis",
            "shorter_step",
            "--smoke",
            f"{sys.executable} -c 'import torch; print(torch.__version__)'",
            "--cards",
            "0,1",
        ],
        check=True,
        capture_output=True,
        # The lot's two cards, as the provisioning backends show them to the benchmark (on a
        # CPU, two gloo processes stand in for them).
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "0,1", "HIP_VISIBLE_DEVICES": "0,1"},
    )
    seconds = time.perf_counter() - started
    report = json.loads(out.read_text())
    report["seconds"] = round(seconds, 1)
    print(json.dumps(report, separators=(",", ":")))
    missing = [
        f"{part}.{key}"
        for part, keys in REQUIRED.items()
        for key in keys
        if key not in report[part]
    ]
    if missing:
        print(f"missing: {missing}", file=sys.stderr)
    return 0 if seconds < 120 and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
