"""The memory-fit advisor: replicated vs sharded, and which kinds fit."""

from __future__ import annotations

from decimal import Decimal

import pytest

from reservations.advisor import AdvisorError, Context, advise, bytes_per_param, shape
from tests.conftest import Inventory

pytestmark = pytest.mark.django_db


def verdicts(advice: object) -> dict[str, str]:
    return {fit.kind_slug: fit.verdict for fit in advice.fits}  # type: ignore[attr-defined]


def test_mixed_precision_training_needs_16_bytes_per_parameter() -> None:
    assert bytes_per_param("bf16", "training") == 16
    assert bytes_per_param("fp32", "training") == 16
    assert bytes_per_param("fp8", "training") == 14
    assert bytes_per_param("int4", "inference") == 0.5


def need(state_gb: float, act_gb: float, cards: int) -> float:
    """The advisor's formula: model state over the cards, +10 % workspace, the activations
    (or KV cache) of the card's own micro-batch, 2 GB runtime."""
    return state_gb / cards * 1.1 + act_gb + 2


def test_a_7b_training_run_fits_one_h200(inventory: Inventory) -> None:
    advice = advise(7, "bf16", "training")
    hidden, layers = shape(7e9)
    assert (hidden, layers) == (4211, 33)  # 12·L·h² ≈ 7e9 with L = h/128
    assert advice.model_state_gb == 112
    assert advice.activations_gb == pytest.approx(34 * 2048 * hidden * layers / 1e9, abs=0.01)
    assert advice.replicated_per_card_gb == pytest.approx(
        need(112, advice.activations_gb, 1), abs=0.01
    )
    assert verdicts(advice) == {"h200": "one_card", "b200": "one_card", "mi300x": "one_card"}
    assert advice.recommended_kind == "h200"  # the smallest card it fits
    assert advice.suggestions == ()


def test_a_13b_training_run_needs_the_pair_sharded(inventory: Inventory) -> None:
    advice = advise(13, "bf16", "training")
    assert advice.sharded_per_card_gb == pytest.approx(
        need(208, advice.activations_gb, 2), abs=0.01
    )
    assert verdicts(advice) == {"h200": "sharded", "b200": "sharded", "mi300x": "sharded"}
    assert advice.recommended_kind == "h200"


def test_a_70b_model_in_bf16_inference_fits_one_b200_but_not_one_h200(inventory: Inventory) -> None:
    advice = advise(70, "bf16", "inference")
    hidden, layers = shape(70e9)
    kv = 2 * layers * hidden * 2048 * 2 / 1e9  # K and V, 16 bit, no GQA
    assert advice.activations_gb == pytest.approx(kv, abs=0.01)
    assert advice.replicated_per_card_gb == pytest.approx(need(140, kv, 1), abs=0.01)
    assert verdicts(advice) == {"h200": "sharded", "b200": "one_card", "mi300x": "one_card"}
    assert advice.recommended_kind == "b200"


def test_usable_memory_is_the_nameplate_in_gib_less_what_the_driver_keeps(
    inventory: Inventory,
) -> None:
    fits = {fit.kind_slug: fit for fit in advise(7, "bf16", "training").fits}
    assert fits["h200"].memory_per_card_gb == 141
    assert fits["h200"].usable_per_card_gb == pytest.approx(141 * 2**30 / 1e9 * 0.99, abs=0.05)


def test_a_long_context_and_a_bigger_batch_can_make_it_not_fit(inventory: Inventory) -> None:
    short = advise(70, "bf16", "inference")
    long = advise(70, "bf16", "inference", seq_len=32_768, micro_batch=4)
    assert long.activations_gb == pytest.approx(short.activations_gb * 64, rel=0.01)
    assert set(verdicts(long).values()) == {"no_fit"}
    assert [s.code for s in long.suggestions] == ["int8", "int4"]


def test_a_fit_with_little_to_spare_is_tight(inventory: Inventory) -> None:
    fits = {f.kind_slug: f for f in advise(7.5, "bf16", "training").fits}
    usable = fits["h200"].usable_per_card_gb
    needed = advise(7.5, "bf16", "training").replicated_per_card_gb
    assert 0.9 * usable < needed <= usable
    assert fits["h200"].tight
    assert fits["h200"].verdict == "one_card"
    assert not fits["b200"].tight


def test_a_70b_training_run_gets_what_would_fit_instead(inventory: Inventory) -> None:
    advice = advise(70, "bf16", "training")
    assert advice.recommended_kind is None
    ideas = {s.code: s for s in advice.suggestions}
    assert set(ideas) >= {"lora", "qlora", "fp8", "inference", "more_lots"}
    assert ideas["qlora"].kind_slug == "h200"
    assert ideas["qlora"].verdict == "one_card"
    assert ideas["lora"].verdict == "sharded"
    assert ideas["more_lots"].lots > 1
    assert ideas["more_lots"].kind_slug == "mi300x"  # the biggest card


def test_the_recommendation_weighs_environment_availability_and_price(
    inventory: Inventory,
) -> None:
    """A 70B inference fits one B200 and one MI300X: the cheaper MI300X wins unless the
    environment is CUDA-only or it is not free on the date."""
    rates = {"b200": Decimal("4.79"), "mi300x": Decimal("2.38"), "h200": Decimal("3.36")}
    cheap = advise(70, "bf16", "inference", context=Context(per_gpu_hour=rates))
    assert cheap.recommended_kind == "mi300x"
    assert "lowest_price" in cheap.reasons
    cuda = Context(per_gpu_hour=rates, environment_kinds=frozenset({"b200", "h200"}))
    assert advise(70, "bf16", "inference", context=cuda).recommended_kind == "b200"
    full = Context(per_gpu_hour=rates, free_lots={"b200": 1, "mi300x": 0, "h200": 2})
    chosen = advise(70, "bf16", "inference", context=full)
    assert chosen.recommended_kind == "b200"
    assert "free_on_date" in chosen.reasons


def test_a_model_too_big_for_a_lot_fits_nowhere(inventory: Inventory) -> None:
    advice = advise(100, "bf16", "training")
    assert set(verdicts(advice).values()) == {"no_fit"}
    assert advice.recommended_kind is None


def test_it_refuses_nonsense(inventory: Inventory) -> None:
    for args, code in [
        ((0, "bf16", "training"), "invalid_params"),
        ((-1, "bf16", "training"), "invalid_params"),
        ((7, "int4", "training"), "quantised_training"),
        ((7, "fp2", "inference"), "invalid_precision"),
        ((7, "bf16", "dreaming"), "invalid_workload"),
    ]:
        with pytest.raises(AdvisorError) as info:
            advise(*args)
        assert info.value.code == code


def test_it_states_its_assumptions(inventory: Inventory) -> None:
    assumptions = " ".join(advise(7, "bf16", "training").assumptions)
    assert "16 B/param" in assumptions
    assert "34·s·b·h·L" in assumptions
    assert "without grouped-query attention" in assumptions


def test_every_refusal_code_has_a_message() -> None:
    from reservations.errors import MESSAGES

    for code in ("invalid_params", "quantised_training", "invalid_precision", "invalid_workload"):
        assert str(MESSAGES[code])
