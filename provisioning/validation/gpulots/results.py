"""What the two runs found: each run's status and figures from its processes' files
(summarise), and the answer to the hypothesis booked (verdict), in plain words."""

from __future__ import annotations

import argparse
import re
from typing import Any

from . import OUT_OF_MEMORY, not_measured

SHORTER = 1.1
"""Two cards answer "shorter step" at 1.1x one card's step time or better."""
BIGGER_BATCH = 1.25
"""Twice the batch on two cards answers "bigger batch" at no more than 1.25x the step time."""
COMPUTE_IMBALANCE = 1.15
"""One process's compute time over 1.15x the other's: an unbalanced split."""
MEMORY_IMBALANCE = 0.5
"""The emptier card's peak under half the fuller one's: an unbalanced split (GPUs only)."""


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
