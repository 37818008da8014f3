"""The memory-fit advisor: the seed's first paragraph as a tool.

"The 360 GB added together do not automatically form one allocation." From a parameter
count, a precision and training or inference, it estimates the memory one card needs when
the model is replicated on both cards (data parallel) and when it is sharded across the two
(FSDP / ZeRO-3 style), and says for each kind whether the job fits one card, needs the
pair's memory split, or does not fit a lot at all.

Assumptions (also returned with every answer, so the page can show them):

* Training keeps fp32 master weights (4 B/param) and Adam's two fp32 moments (8 B/param),
  plus the weights and gradients in the compute precision: 2 × 2 B for bf16/fp16,
  2 × 1 B for fp8; fp32 training needs no separate master copy. So 16 B/param for fp32,
  bf16 and fp16 mixed precision (the ZeRO paper's figure), 14 B/param for fp8.
  Quantised int8/int4 weights are for inference only.
* Inference keeps the weights only: 4, 2, 2, 1, 1 and 0.5 B/param for fp32, bf16, fp16,
  fp8, int8 and int4.
* Activations, KV cache and workspace: a 20 % margin on top, plus 2 GB per card for the
  runtime (CUDA/HIP context, communication buffers). Real activation memory depends on
  batch and sequence length; the validation benchmark measures it on the delivered cards.
* Sharding divides the model state evenly over the two cards; the margin and the runtime
  overhead are per card. GB here are 10⁹ bytes, as card memory is quoted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from reservations.errors import CodedError
from reservations.models import HardwareKind, Precision, Workload

INFERENCE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
TRAINING_BYTES = {"fp32": 16.0, "bf16": 16.0, "fp16": 16.0, "fp8": 14.0}
ACTIVATION_MARGIN = 0.20
RUNTIME_OVERHEAD_GB = 2.0
CARDS_PER_LOT = 2

ASSUMPTIONS = (
    "training: fp32 master weights + Adam moments (12 B/param) + weights and gradients in "
    "the compute precision → 16 B/param for fp32/bf16/fp16, 14 B/param for fp8",
    "inference: weights only → 4/2/2/1/1/0.5 B/param for fp32/bf16/fp16/fp8/int8/int4",
    "activations, KV cache and workspace: +20 %; runtime: +2 GB per card",
    "sharded: model state split evenly over the two cards of a lot",
    "GB = 10⁹ bytes",
)


class AdvisorError(CodedError):
    """Model facts the advisor cannot size."""


@dataclass(frozen=True)
class KindFit:
    kind_slug: str
    kind_name: str
    memory_per_card_gb: int
    fits_one_card: bool
    fits_sharded: bool

    @property
    def verdict(self) -> str:
        """``one_card``: fits a single card (data parallel works, or one-card runs);
        ``sharded``: only with the model split over both cards; ``no_fit``: neither."""
        if self.fits_one_card:
            return "one_card"
        if self.fits_sharded:
            return "sharded"
        return "no_fit"


@dataclass(frozen=True)
class Advice:
    params_billion: float
    precision: str
    workload: str
    bytes_per_param: float
    model_state_gb: float
    replicated_per_card_gb: float
    sharded_per_card_gb: float
    fits: tuple[KindFit, ...]
    recommended_kind: str | None
    assumptions: tuple[str, ...] = ASSUMPTIONS


def bytes_per_param(precision: str, workload: str) -> float:
    if workload not in Workload.values:
        raise AdvisorError("invalid_workload")
    if precision not in Precision.values:
        raise AdvisorError("invalid_precision")
    if workload == Workload.TRAINING:
        if precision not in TRAINING_BYTES:
            raise AdvisorError("quantised_training")
        return TRAINING_BYTES[precision]
    return INFERENCE_BYTES[precision]


def advise(
    params_billion: float | Decimal,
    precision: str,
    workload: str,
    kinds: Iterable[HardwareKind] | None = None,
) -> Advice:
    """Memory per card, replicated vs sharded, and which kinds fit, smallest card first.

    The recommendation prefers a kind where the job fits one card (the simplest setup, and
    what the seed suggests for the H200 at 141 GB), choosing the smallest such card; failing
    that, the smallest card that fits sharded; None when nothing fits a lot.
    """
    params = float(params_billion)
    if not 0 < params <= 100_000:
        raise AdvisorError("invalid_params")
    per_param = bytes_per_param(precision, workload)
    state_gb = params * per_param  # 1e9 params × B/param = GB
    replicated = state_gb * (1 + ACTIVATION_MARGIN) + RUNTIME_OVERHEAD_GB
    sharded = state_gb / CARDS_PER_LOT * (1 + ACTIVATION_MARGIN) + RUNTIME_OVERHEAD_GB
    if kinds is None:
        kinds = HardwareKind.objects.filter(is_offered=True)
    fits = tuple(
        KindFit(
            kind_slug=kind.slug,
            kind_name=kind.name,
            memory_per_card_gb=kind.memory_per_card_gb,
            fits_one_card=replicated <= kind.memory_per_card_gb,
            fits_sharded=sharded <= kind.memory_per_card_gb,
        )
        for kind in sorted(kinds, key=lambda k: (k.memory_per_card_gb, k.slug))
    )
    recommended = next((f for f in fits if f.fits_one_card), None) or next(
        (f for f in fits if f.fits_sharded), None
    )
    return Advice(
        params_billion=params,
        precision=precision,
        workload=workload,
        bytes_per_param=per_param,
        model_state_gb=round(state_gb, 2),
        replicated_per_card_gb=round(replicated, 2),
        sharded_per_card_gb=round(sharded, 2),
        fits=fits,
        recommended_kind=recommended.kind_slug if recommended else None,
    )
