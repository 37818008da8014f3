"""The runner: the researcher's command under torchrun, on one card then two, with the
hooks on its path; each run watched until every process made its steps (or it failed, ran
out of memory, or ran past --timeout), then ended with its whole process group."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

from .results import summarise

LAUNCHERS = ("torchrun", "accelerate", "deepspeed", "mpirun", "srun")
"""Commands that start the processes themselves: run them with --launcher none."""
ORDER_FILE = os.path.join("~", ".gpulots", "order.json")
"""Written into each delivered account: the order's reference, lot job, hypothesis, API."""

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


def ship_hooks(work: str) -> list[str]:
    """The hooks where the job's processes import them from (``import gpulots``), copied
    into ``work``: only they go on the job's path (not the folder the tool lies in), and the
    tool may be replaced while a run goes. The sitecustomize that starts them, and this
    package: the one file the tool is (zipimport reads it), else the package's folder.
    Returns the PYTHONPATH entries, in order."""
    hooks = os.path.join(work, "hooks")
    os.makedirs(hooks)
    with open(os.path.join(hooks, "sitecustomize.py"), "w") as handle:
        handle.write(SITECUSTOMIZE)
    package = os.path.dirname(os.path.abspath(__file__))
    shipped = os.path.dirname(package)
    if os.path.isfile(shipped):  # the tool as built: this package inside its one file
        copy = os.path.join(work, "gpulots.zip")
        shutil.copyfile(shipped, copy)
        return [hooks, copy]
    ignored = shutil.ignore_patterns("__pycache__")
    shutil.copytree(package, os.path.join(hooks, "gpulots"), ignore=ignored)
    return [hooks]


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
    hooks: list[str],
) -> dict[str, Any]:
    """One run of the command on ``world`` cards: its status and figures per process.
    ``hooks``: the PYTHONPATH entries that load them (ship_hooks), before the job's own."""
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
    os.makedirs(folder, exist_ok=True)
    shown = ",".join(cards[:world])
    environment = dict(os.environ)
    # The account's device order and ROCR list stay as they are: the cards are its indices.
    path = [*hooks, environment.get("PYTHONPATH", "")]
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
