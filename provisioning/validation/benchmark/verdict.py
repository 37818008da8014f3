"""The verdict: the answer to the researcher's hypothesis from the split test's runs, what
was measured and what was held constant, in plain words. No PyTorch here."""

from __future__ import annotations

from typing import Any


def verdict(
    hypothesis: str, split: dict[str, Any], model: dict[str, Any], stand_in: bool
) -> dict[str, Any]:
    """The answer to the researcher's hypothesis, with what was measured and held constant."""
    single, pair = split.get("one_card", {}), split.get("two_cards", {})
    held = [
        "the same synthetic data (fixed seed)",
        f"the same model ({model.get('params', '?')} parameters, {model.get('layers')} blocks "
        f"of width {model.get('hidden')})",
        f"the same precision ({model.get('measured_precision')})",
        f"the same sequence length ({model.get('seq_len')}) and micro-batch per card "
        f"({model.get('micro_batch')})",
        "the same optimizer (AdamW)",
    ]
    result: dict[str, Any] = {
        "hypothesis": hypothesis,
        "answer": "not_answered",
        "code": "",
        "measured": "",
        "held_constant": held,
        "scaled_down": bool(model.get("scaled_down")),
        "stand_in": stand_in,
        "speedup": None,
    }
    caveats = []
    if model.get("scaled_down"):
        caveats.append(f"Measured on a scaled-down model: {model.get('why')}")
    if stand_in:
        caveats.append(
            "Measured on a CPU stand-in (gloo processes), not on the cards: "
            "the figures show the method, not the lot's speed."
        )
    if model.get("measured_precision") != model.get("precision"):
        caveats.append(
            f"Ordered in {model.get('precision')}, measured in {model.get('measured_precision')}: "
            f"{model.get('precision_why')}"
        )
    tail = (" " + " ".join(caveats)) if caveats else ""
    if "median_step_ms" not in pair and hypothesis != "make_possible":
        if pair.get("error"):
            why = f"the two-card run failed: {pair['error']}"
        else:
            why = f"the two-card part was {pair.get('mode') or 'not run'}"
        result.update(code="two_cards_not_run", measured=f"Not answered: {why}.{tail}")
        return result
    if hypothesis == "shorter_step":
        held.append(f"the same global batch ({2 * model.get('micro_batch', 1)} samples a step)")
        if not single.get("fits"):
            result.update(
                answer="not_answered",
                code="one_card_does_not_fit",
                measured=f"The model does not fit one card ({single.get('error')}); "
                f"no step time to compare.{tail}",
            )
            return result
        speedup = round(single["median_step_ms"] / pair["median_step_ms"], 2)
        result["speedup"] = speedup
        yes = speedup >= 1.1
        result.update(
            answer="yes" if yes else "no",
            code="shorter" if yes else "not_shorter",
            measured=(
                f"Step time {single['median_step_ms']:.1f} ms on one card (two micro-batches "
                f"accumulated) and {pair['median_step_ms']:.1f} ms on two ({pair['mode']}): "
                f"{speedup}x {'shorter' if yes else 'of one card (not shorter: under 1.1x)'}."
                + _exchange_words(pair)
                + tail
            ),
        )
    elif hypothesis == "bigger_batch":
        held.append(
            f"the same batch per card ({model.get('micro_batch')}): "
            "the global batch doubles on two cards"
        )
        if not single.get("fits"):
            result.update(
                code="one_card_does_not_fit",
                measured=f"The model does not fit one card ({single.get('error')}).{tail}",
            )
            return result
        ratio = round(pair["median_step_ms"] / single["median_step_ms"], 2)
        throughput = round(pair["samples_per_s"] / single["samples_per_s"], 2)
        result["speedup"] = throughput
        yes = ratio <= 1.25
        result.update(
            answer="yes" if yes else "no",
            code="bigger_batch" if yes else "bigger_batch_slower",
            measured=(
                f"Twice the global batch on two cards takes {ratio}x one card's step time "
                f"({pair['median_step_ms']:.1f} against {single['median_step_ms']:.1f} ms): "
                f"{throughput}x the samples per second."
                + ("" if yes else " Over 1.25x: the exchange eats the gain.")
                + _exchange_words(pair)
                + tail
            ),
        )
    else:  # make_possible
        possible = split.get("make_possible", {})
        fits_one = bool(single.get("fits"))
        fits_two = bool(pair.get("fits", "median_step_ms" in pair))
        if fits_one:
            result.update(
                answer="no",
                code="already_fits_one_card",
                measured="The model already fits one card "
                f"(peak {single.get('peak_memory_gib')} GiB): "
                f"the second card is not needed to run it. {_possible_words(possible)}{tail}",
            )
        elif fits_two:
            result.update(
                answer="yes",
                code="fits_two_cards_only",
                measured=f"The model does not fit one card ({single.get('error')}) "
                "and runs sharded (FSDP2) "
                f"on two, peak {pair.get('peak_memory_gib')} GiB per card. "
                f"{_possible_words(possible)}{tail}",
            )
        else:
            result.update(
                answer="no",
                code="fits_neither",
                measured="The model fits neither one card nor two "
                f"({pair.get('error') or pair.get('mode')}). "
                f"{_possible_words(possible)}{tail}",
            )
    if pair.get("imbalanced"):
        result["measured"] += " The two cards are unbalanced: check the split."
    return result


def _exchange_words(pair: dict[str, Any]) -> str:
    exposed = pair.get("exposed_exchange_seconds")
    if isinstance(exposed, (int, float)):
        share = pair.get("exchange_share", 0) * 100
        return f" Exposed exchange {exposed * 1000:.1f} ms a step ({share:.0f} %)."
    return ""


def _possible_words(possible: dict[str, Any]) -> str:
    if not possible:
        return ""
    return (
        f"Largest that fits one card: about {possible.get('one_card_max_params')} parameters; "
        f"two cards sharded: about {possible.get('two_cards_max_params')} ({possible.get('how')})."
    )
