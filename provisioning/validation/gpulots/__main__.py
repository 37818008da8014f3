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
  threads less their calls into the exchange, c10d and DDP's reducer), each counted once
  where they overlap. The exposed exchange is the collectives'
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
import sys

from .command import EXIT_USAGE, HYPOTHESES, TOOL, split_test
from .runner import UsageError


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
