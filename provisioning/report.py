"""The version-2 validation report (REPORT_V2.md) as the researcher reads it: every figure
with its unit, shares as percentages, "not measured" with its reason, the acceptance checks
as a pass/fail table against the kind's references, and the charts' axes named. All of it in
the page's language: the benchmark writes codes and English, the page translates the codes.

Just over 600 lines: most of it is the table of translated texts by code, kept together.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from django.utils.formats import number_format
from django.utils.functional import Promise
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from reservations.models import Hypothesis, Order

if TYPE_CHECKING:
    from provisioning.models import SplitTest

NOT_MEASURED = "not measured: "

VERDICTS: dict[str, Promise] = {
    "already_fits_one_card": gettext_lazy(
        "The model fits one card: a second card is not needed to make the run possible."
    ),
    "fits_two_cards_only": gettext_lazy(
        "The model does not fit one card and runs sharded across both: the second card makes "
        "the run possible."
    ),
    "fits_neither": gettext_lazy("The model fits neither one card nor both."),
    "shorter": gettext_lazy("A step is shorter on two cards than on one."),
    "not_shorter": gettext_lazy("A step is not shorter on two cards than on one."),
    "bigger_batch": gettext_lazy(
        "Twice the global batch on two cards (the same batch per card) processes more samples "
        "per second than one card."
    ),
    "bigger_batch_slower": gettext_lazy(
        "Twice the global batch on two cards (the same batch per card) does not process more "
        "samples per second than one card."
    ),
    "two_cards_not_run": gettext_lazy("Not answered: the two-card run did not complete."),
    "one_card_does_not_fit": gettext_lazy(
        "Not answered: the model does not fit one card, so there is no one-card step to compare."
    ),
    "one_device": gettext_lazy("Not answered: only one card was visible to the benchmark."),
    "no_gpu": gettext_lazy("Not answered: no card was visible to the benchmark."),
    "independent": gettext_lazy(
        "Two independent experiments, one card each: each card was measured on its own."
    ),
    "error": gettext_lazy("Not answered: the measurement failed."),
    "timeout": gettext_lazy("Not answered: the measurement ran out of time."),
}
"""The verdict's text by ``verdict.code`` (the codes provisioning/validation/benchmark.py's
``verdict`` gives); an unknown code falls back to the answer."""

ANSWERS: dict[str, Promise] = {
    "yes": gettext_lazy("Yes"),
    "no": gettext_lazy("No"),
    "not_answered": gettext_lazy("Not answered"),
}

CHECKS: dict[str, Promise] = {
    "device_count": gettext_lazy("Number of cards"),
    "sku": gettext_lazy("Card model"),
    "memory": gettext_lazy("Memory per card"),
    "mig": gettext_lazy("MIG off"),
    "ecc": gettext_lazy("ECC on"),
    "persistence": gettext_lazy("Persistence mode"),
    "stack_torch": gettext_lazy("PyTorch version"),
    "stack_cuda": gettext_lazy("CUDA version"),
    "stack_rocm": gettext_lazy("ROCm version"),
    "stack_driver": gettext_lazy("Driver version"),
    "stack_arch": gettext_lazy("Architecture in the build"),
    "matmul_bf16": gettext_lazy("Matrix product, BF16"),
    "matmul_fp8": gettext_lazy("Matrix product, FP8"),
    "hbm": gettext_lazy("HBM bandwidth"),
    "memory_pattern": gettext_lazy("Memory pattern test"),
    "sustained": gettext_lazy("Sustained load"),
    "cards_match": gettext_lazy("The two cards alike"),
    "p2p": gettext_lazy("Card-to-card bandwidth"),
    "all_reduce": gettext_lazy("All-reduce bus bandwidth"),
    "all_gather": gettext_lazy("All-gather bus bandwidth"),
    "reduce_scatter": gettext_lazy("Reduce-scatter bus bandwidth"),
    "collective_correct": gettext_lazy("Collectives correct"),
    "ecc_errors": gettext_lazy("ECC errors during the run"),
    "xid_errors": gettext_lazy("XID errors during the run"),
}

MODES: dict[str, Promise] = {
    "data_parallel": gettext_lazy("data parallel (a copy on each card)"),
    "sharded": gettext_lazy("sharded across the two cards (FSDP)"),
    "fsdp": gettext_lazy("sharded across the two cards (FSDP)"),
    "single": gettext_lazy("one card"),
    "independent": gettext_lazy("two independent runs, one card each"),
}

HELD_CONSTANT: dict[str, Promise] = {
    "precision": gettext_lazy("the precision"),
    "model": gettext_lazy("the model"),
    "per_card_batch": gettext_lazy("the batch per card"),
    "micro_batch": gettext_lazy("the batch per card"),
    "global_batch": gettext_lazy("the global batch"),
    "seq_len": gettext_lazy("the sequence length"),
    "the same precision": gettext_lazy("the precision"),
    "the same model": gettext_lazy("the model"),
    "the same global batch": gettext_lazy("the global batch"),
    "the same per-card batch": gettext_lazy("the batch per card"),
    "the same sequence length": gettext_lazy("the sequence length"),
}

SECTION_STATUS: dict[str, Promise] = {
    "ok": gettext_lazy("done"),
    "failed": gettext_lazy("failed"),
    "timeout": gettext_lazy("ran out of time"),
    "skipped": gettext_lazy("skipped"),
}

REASONS: dict[str, Promise] = {
    "no gpu": gettext_lazy("no card visible"),
    "cpu stand-in": gettext_lazy("on the CPU stand-in"),
    "one device": gettext_lazy("only one card visible"),
    "not supported": gettext_lazy("not supported by this card"),
    "no nvidia-smi": gettext_lazy("nvidia-smi not found"),
    "no amd-smi": gettext_lazy("amd-smi not found"),
    "timeout": gettext_lazy("ran out of time"),
}
"""Known reasons after "not measured: " (as the benchmark writes them, lowercased)."""

SHARE_UNITS = ("share", "fraction", "ratio")


def part(data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` when it is an object, else an empty one (a report is never trusted)."""
    found = data.get(key)
    return found if isinstance(found, dict) else {}


def not_measured(value: str) -> str:
    """ "not measured: <why>" in the page's language (the reason translated when known)."""
    why = value[len(NOT_MEASURED) :].strip()
    known = REASONS.get(why.lower().rstrip("."))
    return _("not measured: %(why)s") % {"why": known or why}


def figure(value: Any, unit: str = "", digits: int = 1) -> str:
    """One figure for the page: a number with its unit, a share as a percentage, a boolean as
    Yes/No, "not measured: why" translated, nothing as a dash."""
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return str(_("Yes") if value else _("No"))
    if isinstance(value, str):
        return not_measured(value) if value.startswith(NOT_MEASURED) else value
    if isinstance(value, int | float):
        if unit in SHARE_UNITS:
            return percent(value)
        grouped = isinstance(value, int) and abs(value) >= 10_000
        text = number_format(round(value, digits), use_l10n=True, force_grouping=grouped)
        return f"{text} {unit}".strip()
    return str(value)


def percent(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return figure(value)
    return f"{number_format(round(100 * value, 1), use_l10n=True)} %"


def _check_row(check: dict[str, Any]) -> dict[str, Any]:
    ident = str(check.get("id") or "")
    unit = str(check.get("unit") or "")
    value, reference, threshold = check.get("value"), check.get("reference"), check.get("threshold")
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    has_reference = isinstance(reference, int | float) and not isinstance(reference, bool)
    value_text = figure(value, unit)
    reference_text = figure(reference, unit)
    if ident == "memory":
        value_text = _("%(figure)s usable") % {"figure": value_text}
        if has_reference:
            reference_text = _("%(figure)s nameplate") % {"figure": reference_text}
    elif numeric and has_reference and reference and unit and unit not in SHARE_UNITS:
        value_text = _("%(figure)s (%(share)s of the reference)") % {
            "figure": value_text,
            "share": percent(value / reference),
        }
    if isinstance(threshold, int | float) and not isinstance(threshold, bool):
        if has_reference and 0 < threshold <= 1 and unit not in SHARE_UNITS:
            threshold_text = _("at least %(share)s of the reference") % {
                "share": percent(threshold)
            }
        elif ident == "cards_match":
            threshold_text = _("within %(share)s") % {"share": percent(threshold)}
        else:
            threshold_text = _("at least %(figure)s") % {"figure": figure(threshold, unit)}
    else:
        threshold_text = figure(threshold, unit)
    passed = check.get("passed")
    return {
        "id": ident,
        "label": CHECKS.get(ident, ident.replace("_", " ")),
        "card": check.get("card"),
        "value": value_text,
        "reference": reference_text,
        "threshold": threshold_text,
        "passed": passed,
        "result": _("passed")
        if passed is True
        else _("failed")
        if passed is False
        else _("not checked"),
        "note": check.get("note") or "",
    }


def bars(values: list[tuple[str, Any]], unit: str = "") -> list[dict[str, Any]]:
    """Label, value (with its unit) and width (percent of the largest) for a bar chart."""
    measured = [
        (label, value)
        for label, value in values
        if isinstance(value, int | float) and not isinstance(value, bool)
    ]
    top = max((value for _label, value in measured), default=0) or 1
    return [
        {"label": label, "value": figure(value, unit, 2), "width": round(100 * value / top, 1)}
        for label, value in measured
    ]


def size(count: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count // scale} {unit}"
    return f"{count} B"


def _runs(split: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for key, label in (("one_card", _("One card")), ("two_cards", _("Two cards"))):
        run = split.get(key)
        run = run if isinstance(run, dict) else {}
        mode = run.get("mode")
        rows.append(
            {
                "label": label,
                "step": figure(run.get("median_step_ms"), "ms"),
                "samples": figure(run.get("samples_per_s"), _("samples/s")),
                "exchange": percent(run.get("exchange_share"))
                if key == "two_cards"
                else _("no exchange on one card"),
                "exposed": figure(run.get("exposed_exchange_seconds"), "s", 4)
                if key == "two_cards"
                else "—",
                "mode": MODES.get(str(mode), figure(mode)) if mode else figure(run.get("error")),
                "fits": figure(run.get("fits")),
            }
        )
    return rows


def context(order: Order, data: dict[str, Any]) -> dict[str, Any]:
    """What templates/provisioning/report_v2.html shows of a version-2 report."""
    verdict = part(data, "verdict")
    acceptance = part(data, "acceptance")
    model = part(data, "model")
    split = part(data, "split")
    collectives = part(data, "collectives")
    code = str(verdict.get("code") or "")
    answer = str(verdict.get("answer") or "not_answered")
    checks = [c for c in acceptance.get("checks") or [] if isinstance(c, dict)]
    held = [
        HELD_CONSTANT.get(str(item).lower(), item) for item in verdict.get("held_constant") or []
    ]
    two = part(split, "two_cards")
    one = part(split, "one_card")
    peaks = two.get("peak_memory_gib", two.get("peak_memory_gb"))
    memory_unit = "GiB" if "peak_memory_gib" in two else "GB"
    charts = {
        "step": bars(
            [
                (_("one card"), one.get("median_step_ms")),
                (_("two cards"), two.get("median_step_ms")),
            ],
            "ms",
        ),
        "memory": bars(
            [
                (_("card %(n)s") % {"n": i + 1}, value)
                for i, value in enumerate(peaks if isinstance(peaks, list) else [])
            ],
            memory_unit,
        ),
        "matmul": bars(
            [
                (_("card %(n)s") % {"n": (c.get("card") or 0) + 1}, c.get("value"))
                for c in checks
                if c.get("id") == "matmul_bf16"
            ],
            "TFLOP/s",
        ),
        "collectives": [
            {
                "title": _("%(collective)s: bus bandwidth (GB/s) by message size")
                % {"collective": _collective(name)},
                "bars": bars(
                    [
                        (size(int(row["bytes"])), row.get("busbw_gbps"))
                        for row in collectives.get(name) or []
                        if isinstance(row, dict) and isinstance(row.get("bytes"), int)
                    ],
                    "GB/s",
                ),
            }
            for name in ("all_reduce", "all_gather", "reduce_scatter")
            if collectives.get(name)
        ],
    }
    passed = acceptance.get("passed")
    params = model.get("params")
    return {
        "hypothesis": Hypothesis(order.hypothesis).label
        if order.hypothesis in Hypothesis.values
        else order.hypothesis,
        "usage_mode": order.get_usage_mode_display(),
        "answer": ANSWERS.get(answer, ANSWERS["not_answered"]),
        "answer_code": answer,
        "verdict_text": VERDICTS.get(code, ""),
        "held_constant": held,
        "stand_in": data.get("stand_in") is True or verdict.get("stand_in") is True,
        "scaled_down": model.get("scaled_down") is True or verdict.get("scaled_down") is True,
        "model_params": number_format(params, use_l10n=True, force_grouping=True)
        if isinstance(params, int)
        else figure(params),
        "model_rows": [
            (_("Parameters"), figure(params)),
            (_("Layers"), figure(model.get("layers"))),
            (_("Hidden size"), figure(model.get("hidden"))),
            (_("Attention heads"), figure(model.get("heads"))),
            (_("Sequence length"), figure(model.get("seq_len"), _("tokens"))),
            (_("Micro-batch per card"), figure(model.get("micro_batch"))),
            (_("Precision booked"), figure(str(model.get("precision") or "").upper() or None)),
            (
                _("Precision measured"),
                figure(str(model.get("measured_precision") or "").upper() or None),
            ),
        ],
        "accepted": passed,
        "accepted_text": _("passed")
        if passed is True
        else _("failed")
        if passed is False
        else _("nothing could be checked"),
        "checks": [_check_row(c) for c in checks],
        "runs": _runs(split),
        "charts": charts,
        "complete": figure(data.get("complete")),
        "sections": [
            {
                "name": name,
                "status": SECTION_STATUS.get(str(section.get("status")), section.get("status")),
                "seconds": figure(section.get("seconds"), "s"),
            }
            for name, section in (data.get("sections") or {}).items()
            if isinstance(section, dict)
        ],
        "telemetry_source": figure((data.get("telemetry") or {}).get("source")),
        "transport": figure(collectives.get("transport")),
        "stack": data.get("stack") if isinstance(data.get("stack"), dict) else {},
    }


def _collective(name: str) -> str:
    return {
        "all_reduce": _("All-reduce"),
        "all_gather": _("All-gather"),
        "reduce_scatter": _("Reduce-scatter"),
    }[name]


# --------------------------------------------------------------------------- split tests
# The researcher's own job on one card, then two (provisioning.split_tests): its summary is
# made here from its figures, in the page's language, never from its English sentences.

RUN_STATUS: dict[str, Promise] = {
    "ok": gettext_lazy("ran"),
    "oom": gettext_lazy("out of memory"),
    "failed": gettext_lazy("failed"),
    "timeout": gettext_lazy("ran out of time"),
}
"""A split test's run by its ``status``."""


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _quotient(top: Any, bottom: Any) -> float | None:
    """``top / bottom``, when both are positive figures."""
    above, below = _number(top), _number(bottom)
    if above is None or below is None or above <= 0 or below <= 0:
        return None
    quotient = above / below
    return quotient if math.isfinite(quotient) and quotient > 0 else None


def _ratio(top: Any, bottom: Any) -> float | None:
    quotient = _quotient(top, bottom)
    return None if quotient is None else round(quotient, 2)


def _throughput_ratio(one: dict[str, Any], two: dict[str, Any]) -> float | None:
    """Two cards' samples per second over one card's; from the global batches and step
    times when the samples per second were not measured (the command set its batch)."""
    ratio = _ratio(two.get("samples_per_s"), one.get("samples_per_s"))
    if ratio is not None:
        return ratio
    return _ratio(
        _quotient(two.get("global_batch"), two.get("median_step_ms")),
        _quotient(one.get("global_batch"), one.get("median_step_ms")),
    )


def split_test_hypothesis(report: dict[str, Any], order: Order) -> str:
    """The hypothesis a split test answers: its own (the command may be told another one),
    else the order's."""
    for said in (
        part(report, "order").get("hypothesis"),
        part(report, "verdict").get("hypothesis"),
    ):
        if isinstance(said, str) and said in Hypothesis.values:
            return said
    return order.hypothesis


def split_test_speedup(report: dict[str, Any], order: Order) -> float | None:
    """Two cards against one, from the figures: one card's step time over two cards' (two
    cards' samples per second over one card's, for a bigger batch); None when a figure is
    missing. The verdict's own ``speedup`` is not trusted."""
    split = part(report, "split")
    one, two = part(split, "one_card"), part(split, "two_cards")
    if split_test_hypothesis(report, order) == Hypothesis.BIGGER_BATCH:
        return _throughput_ratio(one, two)
    return _ratio(one.get("median_step_ms"), two.get("median_step_ms"))


def _not_measured_runs(one: dict[str, Any], two: dict[str, Any]) -> str:
    for run, sentence in (
        (one, gettext_lazy("Your job: not measured on one card (%(status)s).")),
        (two, gettext_lazy("Your job: not measured on two cards (%(status)s).")),
    ):
        status = RUN_STATUS.get(str(run.get("status") or ""))
        if status is not None and run.get("status") != "ok":
            return str(sentence) % {"status": status}
    return _("Your job: not measured.")


def split_test_summary(report: dict[str, Any], order: Order, *, stand_in: bool = False) -> str:
    """One sentence on what the split test found, from its figures: the step two cards
    shorten (the samples per second they add, for a bigger batch) and the exchange's share
    of the step, or whether the job fits; "not measured" when figures are missing. With
    ``stand_in``, the caveat that a CPU stand-in measured it."""
    split = part(report, "split")
    one, two = part(split, "one_card"), part(split, "two_cards")
    hypothesis = split_test_hypothesis(report, order)
    share = _number(two.get("exchange_share"))
    share = _number(split.get("exchange_share")) if share is None else share
    params: dict[str, Any] = {"share": percent(share)}
    text: str
    if hypothesis == Hypothesis.MAKE_POSSIBLE:
        fits_one, fits_two = one.get("fits"), two.get("fits")
        if fits_one is True:
            text = _("Your job fits one card: a second card is not needed to run it.")
        elif fits_one is False and fits_two is True:
            text = _("Your job does not fit one card and runs on two.")
        elif fits_one is False and fits_two is False:
            text = _("Your job fits neither one card nor two.")
        else:
            text = _not_measured_runs(one, two)
    elif one.get("fits") is False:
        text = _("Your job does not fit one card: there is no one-card step to compare.")
    elif hypothesis == Hypothesis.BIGGER_BATCH:
        ratio = _throughput_ratio(one, two)
        if ratio is None:
            text = _not_measured_runs(one, two)
        else:
            params["ratio"] = number_format(ratio, use_l10n=True)
            text = (
                _(
                    "Your job: %(ratio)s× the samples per second on two cards (twice the "
                    "global batch)."
                )
                if share is None
                else _(
                    "Your job: %(ratio)s× the samples per second on two cards (twice the "
                    "global batch); exchange %(share)s of the step."
                )
            ) % params
    else:
        ratio = _ratio(one.get("median_step_ms"), two.get("median_step_ms"))
        longer = _ratio(two.get("median_step_ms"), one.get("median_step_ms"))
        if ratio is None or longer is None:
            text = _not_measured_runs(one, two)
        elif ratio >= 1:
            params["ratio"] = number_format(ratio, use_l10n=True)
            text = (
                _("Your job: %(ratio)s× shorter step on two cards.")
                if share is None
                else _(
                    "Your job: %(ratio)s× shorter step on two cards; exchange %(share)s of "
                    "the step."
                )
            ) % params
        else:
            params["ratio"] = number_format(longer, use_l10n=True)
            text = (
                _("Your job: %(ratio)s× longer step on two cards.")
                if share is None
                else _(
                    "Your job: %(ratio)s× longer step on two cards; exchange %(share)s of the step."
                )
            ) % params
    if stand_in:
        text = f"{text} ({_('measured on a CPU stand-in, not on the cards')})"
    return text


def _peaks(run: dict[str, Any]) -> str:
    peak = run.get("peak_memory_gib")
    if run.get("memory_source") == "process_peak_rss_gib" and peak not in (None, []):
        # A CPU stand-in has no card memory: its processes' peak resident memory, said so.
        values = peak if isinstance(peak, list) else [peak]
        return _("%(figures)s (process memory)") % {
            "figures": " / ".join(figure(value, "GiB") for value in values)
        }
    if isinstance(peak, list) and peak:
        return " / ".join(figure(value, "GiB") for value in peak)
    if peak is None or peak == []:
        source = run.get("memory_source")
        if isinstance(source, str) and source.startswith(NOT_MEASURED):
            return not_measured(source)
        return "—"
    return figure(peak, "GiB")


def _split_test_runs(split: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for key, label in (("one_card", _("One card")), ("two_cards", _("Two cards"))):
        run = part(split, key)
        status = run.get("status")
        imbalance = figure(_number(run.get("compute_imbalance")), "", 2)
        if run.get("imbalanced") is True:
            imbalance = _("%(figure)s (unbalanced)") % {"figure": imbalance}
        rows.append(
            {
                "label": label,
                "status": RUN_STATUS.get(str(status), figure(status)) if status else "—",
                "fits": figure(run.get("fits") if isinstance(run.get("fits"), bool) else None),
                "step": figure(_number(run.get("median_step_ms")), "ms"),
                "samples": figure(_number(run.get("samples_per_s")), _("samples/s")),
                "memory": _peaks(run),
                "exchange": percent(_number(run.get("exchange_share")))
                if key == "two_cards"
                else _("no exchange on one card"),
                "imbalance": imbalance if key == "two_cards" else "—",
            }
        )
    return rows


def _command(command: Any) -> str:
    if isinstance(command, list):
        return " ".join(str(word) for word in command)
    return command if isinstance(command, str) and command else "—"


def split_test_context(split_test: SplitTest | None) -> dict[str, Any]:
    """What templates/provisioning/_split_test.html shows of a split test (None: how to
    run one)."""
    if split_test is None:
        return {"split_test": None}
    report: dict[str, Any] = split_test.report if isinstance(split_test.report, dict) else {}
    steps = part(report, "steps")
    measured, warmup = steps.get("measured"), steps.get("warmup")
    counted = all(
        isinstance(count, int) and not isinstance(count, bool) for count in (measured, warmup)
    )
    return {
        "split_test": {
            "pk": split_test.pk,
            "report": report,
            "summary": split_test_summary(report, split_test.order),
            "stand_in": split_test.stand_in,
            "incomplete": report.get("complete") is False,
            "runs": _split_test_runs(part(report, "split")),
            "command": _command(report.get("command")),
            "steps": _("%(measured)s steps measured after %(warmup)s warm-up steps.")
            % {"measured": measured, "warmup": warmup}
            if counted
            else "",
            "created_at": split_test.created_at,
        }
    }
