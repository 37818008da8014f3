"""The acceptance benchmark (report v2): hardware acceptance and the researcher's split test.

Standalone: the Python standard library (3.9+) and PyTorch, nothing else (no Django). A
package in the tree, one file on a host (a zipapp, provisioning/validation/build.py), copied
there and run in the booked environment's interpreter. On GPUs it
uses NCCL (RCCL on ROCm); on a CPU, processes with gloo stand in for the cards and the
report says ``"stand_in": true``.

    python benchmark.pyz --out report.json --cards 2,3 [--expect-devices 2]
        [--thresholds '{"sku": "H200", "memory_gib": 141, ...}'] [--require-gpu]
        [--hypothesis shorter_step|bigger_batch|make_possible] [--usage-mode distributed]
        [--params-billion 7] [--precision bf16] [--seq-len 2048] [--micro-batch 1]
        [--workload training] [--expected-arch sm_90] [--extensions flash_attn]
        [--smoke "python -c 'import mylib'"] [--timeout 900] [--nvidia-smi PATH]
        [--amd-smi PATH] [--section-budgets '{"collectives": 30}'] [--quick]

Sections, each isolated (one that fails records its error, the others still run; the
report is rewritten atomically to --out after each, ``"complete": false`` until the end):

* devices: the lot's cards and only them (the visible-device variables, as v1), exactly
  the expected count; on a mismatch nothing is measured (exit 3);
* stack: PyTorch, CUDA/HIP, NCCL, driver, Python and the interpreter, the arch list;
* telemetry: nvidia-smi (``--query-gpu ... --format=csv,noheader,nounits -i CARDS``) or
  amd-smi (``static --json``, ``metric --json``) before and after, sampled during the
  per-card load; ECC counters and XID lines from the kernel log before and after;
* per_card: on each card at the same time, in its own process: a kernel check, dense matmul
  (bf16; fp8 through ``torch._scaled_mm`` where the kind has an fp8 peak and the card can),
  HBM bandwidth (device copy), a memory pattern test over most of free memory (time
  bounded), a sustained load;
* collectives: P2P copy bandwidth both directions, all_reduce / all_gather /
  reduce_scatter swept over sizes, in- and out-of-place, nccl-tests' busbw, each checked;
* split: the hypothesis test, transformer blocks sized from the order, built on the meta
  device and materialised per rank, DDP (exposed communication = DDP step - no_sync step)
  or FSDP2 when the model does not fit one card;
* verdict: the answer, what was measured, what was held constant, in plain words.

Exit codes: 0 accepted, 1 crash or a failed section (report written with "error"), 2 usage
error, 3 device mismatch, 4 acceptance failed, 5 timeout (a section or the whole run),
6 no GPU visible while --require-gpu.

Test-only fault injection (never set on a host): GPULOTS_BENCH_FAULT=wrong_all_reduce
(rank 0's all-reduce result is perturbed), rank_raises (rank 1 raises in the collectives
section), rank_hangs (rank 1 sleeps forever in the collectives section), oom_two_cards
(rank 1 runs out of memory in the two-card split run).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import traceback
from typing import Any

from .devices import card_list
from .frame import SKIPPABLE
from .report import EXIT_CRASH, EXIT_TIMEOUT, Terminated, now
from .runner import Benchmark


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, dict[str, Any]]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--cards", required=True, type=card_list, help="the lot's host device indices: 2,3"
    )
    parser.add_argument(
        "--expect-devices", type=int, help="devices that must be visible (default: --cards')"
    )
    parser.add_argument(
        "--hypothesis",
        default="shorter_step",
        choices=["shorter_step", "bigger_batch", "make_possible"],
    )
    parser.add_argument(
        "--usage-mode", default="distributed", choices=["distributed", "independent"]
    )
    parser.add_argument("--expected-arch", default="")
    parser.add_argument("--params-billion", type=float)
    parser.add_argument(
        "--precision", default="bf16", choices=["fp32", "bf16", "fp16", "fp8", "int8"]
    )
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=1)
    parser.add_argument(
        "--workload", default="training", choices=["training", "finetune", "inference"]
    )
    parser.add_argument(
        "--thresholds", default="{}", help="the kind's acceptance references (JSON object)"
    )
    parser.add_argument(
        "--require-gpu",
        action="store_true",
        help="no visible GPU is an acceptance failure (exit 6)",
    )
    parser.add_argument(
        "--timeout", type=float, default=900, help="the whole run's budget, seconds"
    )
    parser.add_argument(
        "--section-budgets", default="", help='per-section seconds (JSON): {"collectives": 30}'
    )
    parser.add_argument("--nvidia-smi", default="", help="the nvidia-smi to read telemetry with")
    parser.add_argument("--amd-smi", default="", help="the amd-smi to read telemetry with")
    parser.add_argument(
        "--skip",
        default="",
        help="sections not to run (diagnosis, tests): per_card,collectives,split,independent,smoke",
    )
    parser.add_argument("--extensions", default="")
    parser.add_argument("--smoke", default="")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and short loads, for tests"
    )
    parser.add_argument(
        "--force-sharded", action="store_true", help="shard even when one card fits"
    )
    args = parser.parse_args(argv)
    if args.expect_devices is not None and args.expect_devices < 1:
        parser.error("--expect-devices: at least one device")
    unknown = set(args.skip.split(",")) - {"", *SKIPPABLE}
    if unknown:
        parser.error(f"--skip: no section {', '.join(sorted(unknown))}")
    if args.seq_len < 1 or args.micro_batch < 1 or args.timeout <= 0:
        parser.error("--seq-len, --micro-batch and --timeout must be positive")
    try:
        thresholds = json.loads(args.thresholds or "{}")
        budgets = json.loads(args.section_budgets) if args.section_budgets else {}
    except ValueError as exc:
        parser.error(f"--thresholds / --section-budgets: not JSON ({exc})")
    if not isinstance(thresholds, dict) or not isinstance(budgets, dict):
        parser.error("--thresholds / --section-budgets: a JSON object")
    return args, {k: v for k, v in thresholds.items() if v is not None}


def main(argv: list[str] | None = None) -> int:
    args, thresholds = parse(argv)  # a usage error exits 2 (argparse)
    bench = Benchmark(args, thresholds)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    code = EXIT_CRASH
    try:
        bench.report.save()
        code = bench.run()
    except Terminated:
        bench.data.update(
            error=f"terminated (SIGTERM) during section {bench.current}",
            exit_code=EXIT_TIMEOUT,
            finished_at=now(),
        )
        bench.report.summarise(bench.stand_in)
        bench.report.save()
        code = EXIT_TIMEOUT
    except Exception as exc:  # the crash is in the report, with its traceback
        bench.data.update(
            error=f"{type(exc).__name__}: {exc}"[:1000],
            traceback=traceback.format_exc()[-4000:],
            exit_code=EXIT_CRASH,
            finished_at=now(),
        )
        bench.report.save()
        code = EXIT_CRASH
    finally:
        signal.signal(signal.SIGTERM, previous)
    data = bench.data
    if data.get("error"):
        print(data["error"], file=sys.stderr)
    for failure in data["acceptance"].get("failed", []):
        print(f"acceptance failed: {failure}", file=sys.stderr)
    verdict_found = data.get("verdict")
    if isinstance(verdict_found, dict):
        print(verdict_found.get("measured", ""))
    return code


if __name__ == "__main__":
    sys.exit(main())
