"""The memory-fit advisor: replicated vs sharded, and which kinds fit."""

from __future__ import annotations

import pytest

from reservations.advisor import AdvisorError, advise, bytes_per_param
from tests.conftest import Inventory

pytestmark = pytest.mark.django_db


def verdicts(advice: object) -> dict[str, str]:
    return {fit.kind_slug: fit.verdict for fit in advice.fits}  # type: ignore[attr-defined]


def test_mixed_precision_training_needs_16_bytes_per_parameter() -> None:
    assert bytes_per_param("bf16", "training") == 16
    assert bytes_per_param("fp32", "training") == 16
    assert bytes_per_param("fp8", "training") == 14
    assert bytes_per_param("int4", "inference") == 0.5


def test_a_7b_training_run_fits_one_h200(inventory: Inventory) -> None:
    advice = advise(7, "bf16", "training")
    assert advice.model_state_gb == 112
    assert advice.replicated_per_card_gb == pytest.approx(112 * 1.2 + 2)
    assert verdicts(advice) == {"h200": "one_card", "b200": "one_card", "mi300x": "one_card"}
    assert advice.recommended_kind == "h200"


def test_a_13b_training_run_needs_the_pair_sharded(inventory: Inventory) -> None:
    advice = advise(13, "bf16", "training")
    assert advice.sharded_per_card_gb == pytest.approx(104 * 1.2 + 2)
    assert verdicts(advice) == {"h200": "sharded", "b200": "sharded", "mi300x": "sharded"}
    assert advice.recommended_kind == "h200"


def test_a_70b_model_in_bf16_inference_fits_one_b200_but_not_one_h200(inventory: Inventory) -> None:
    advice = advise(70, "bf16", "inference")
    assert advice.replicated_per_card_gb == pytest.approx(140 * 1.2 + 2)  # 170 GB
    assert verdicts(advice) == {"h200": "sharded", "b200": "one_card", "mi300x": "one_card"}
    assert advice.recommended_kind == "b200"


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
    assert "+20 %" in assumptions


def test_every_refusal_code_has_a_message() -> None:
    from reservations.errors import MESSAGES

    for code in ("invalid_params", "quantised_training", "invalid_precision", "invalid_workload"):
        assert str(MESSAGES[code])
