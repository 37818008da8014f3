"""The memory-fit advisor: the seed's first paragraph as a tool.

"The 360 GB added together do not automatically form one allocation." From a parameter
count, a precision, training or inference, and (optionally) the sequence length and the
micro-batch per card, it estimates the memory one card needs when the model is replicated
on both cards (data parallel) and when it is sharded across the two (FSDP / ZeRO-3 style),
compares it with each kind's *usable* memory (the nameplate less what the driver and the
runtime keep), says whether the job fits one card, needs the pair sharded, or does not fit a
lot — "tight" when it fits with less than a tenth to spare — and, when it does not fit,
what would (LoRA, QLoRA, fp8, quantised weights, more lots, inference instead).

Assumptions (also returned with every answer, so the page can show them):

* Model state. Training keeps fp32 master weights (4 B/param) and Adam's two fp32 moments
  (8 B/param), plus the weights and gradients in the compute precision: 16 B/param for
  fp32, bf16 and fp16 mixed precision (the ZeRO paper's figure), 14 B/param for fp8.
  Quantised int8/int4 weights are for inference only. Inference keeps the weights only:
  4, 2, 2, 1, 1 and 0.5 B/param for fp32, bf16, fp16, fp8, int8 and int4.
* The shape: a dense transformer of 12·L·h² parameters with L = h / 128 layers (7B: h ≈
  4,200, L ≈ 33; 70B: h ≈ 9,100, L ≈ 71).
* Training activations per card: 34·s·b·h·L bytes in 16 bit (Korthikanti et al., no
  recomputation, attention by a fused kernel), twice that in fp32; they are per card
  whether the model is replicated or sharded (each card has its own micro-batch).
* Inference KV cache per card: 2·L·h·s·b values in 16 bit (4 B in fp32), without grouped-
  query attention: an upper bound (GQA divides it by the query groups, 8 for Llama 3 70B).
* Workspace: +10 % of the model state on the card; runtime: 2 GB per card (CUDA/HIP
  context, communication buffers). GB here are 10⁹ bytes.
* Usable memory: the nameplate in GiB, as the kind's acceptance references give it (the
  "141 GB" of an H200 is 141 GiB = 151.4 GB), less the 1 % the driver keeps. The
  validation benchmark measures the real figures on the delivered cards.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

from reservations.errors import CodedError
from reservations.models import (
    MAX_MICRO_BATCH,
    MAX_SEQ_LEN,
    MODEL_MICRO_BATCH,
    MODEL_SEQ_LEN,
    HardwareKind,
    Precision,
    Workload,
)

INFERENCE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
TRAINING_BYTES = {"fp32": 16.0, "bf16": 16.0, "fp16": 16.0, "fp8": 14.0}
WORKSPACE_SHARE = 0.10
RUNTIME_OVERHEAD_GB = 2.0
TIGHT_SHARE = 0.90
"""A fit above this share of the usable memory is "tight"."""
LAYER_WIDTH_RATIO = 128
"""Layers = hidden width / 128 (7B: 4,096 wide, 32 layers)."""
ADAPTER_SHARE = 0.01
"""LoRA/QLoRA: the trainable adapters, about 1 % of the parameters, at 16 B each."""
CARDS_PER_LOT = 2
MAX_LOTS_SUGGESTED = 8
GIB = 2**30
DRIVER_SHARE = 0.99
"""Of a card's memory, what the driver leaves to the job (it keeps about 1 %)."""

ASSUMPTIONS = (
    "training: fp32 master weights + Adam moments (12 B/param) + weights and gradients in "
    "the compute precision → 16 B/param for fp32/bf16/fp16, 14 B/param for fp8",
    "inference: weights only → 4/2/2/1/1/0.5 B/param for fp32/bf16/fp16/fp8/int8/int4",
    "shape: 12·L·h² parameters, L = h/128 layers",
    "training activations: 34·s·b·h·L bytes per card in 16 bit (no recomputation)",
    "inference KV cache: 2·L·h·s·b values per card, without grouped-query attention "
    "(an upper bound)",
    "workspace: +10 % of the model state on the card; runtime: +2 GB per card",
    "usable memory: the nameplate in GiB (as the acceptance references give it) in GB, less "
    "1 % the driver keeps",
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
    usable_per_card_gb: float
    fits_one_card: bool
    fits_sharded: bool
    tight: bool
    """It fits (one card, or sharded) with less than a tenth of the usable memory to spare."""

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
class Suggestion:
    """What would fit instead: ``code`` (lora, qlora, fp8, int8, int4, inference, more_lots),
    the memory per card it needs, and the smallest kind where it fits (and how)."""

    code: str
    per_card_gb: float
    kind_slug: str | None
    verdict: str
    lots: int = 1


@dataclass(frozen=True)
class Advice:
    params_billion: float
    precision: str
    workload: str
    seq_len: int
    micro_batch: int
    bytes_per_param: float
    model_state_gb: float
    activations_gb: float
    """Training activations, or the inference KV cache, per card."""
    replicated_per_card_gb: float
    sharded_per_card_gb: float
    fits: tuple[KindFit, ...]
    recommended_kind: str | None
    reasons: tuple[str, ...] = ()
    """Why the recommended kind: fits_one_card, fits_sharded, not_tight, runs_environment,
    free_on_date, lowest_price."""
    suggestions: tuple[Suggestion, ...] = ()
    assumptions: tuple[str, ...] = ASSUMPTIONS


@dataclass(frozen=True)
class Context:
    """What else the recommendation weighs, from the booking form (all optional): the
    price per GPU-hour of each kind, its free lots on the chosen date, the kinds the chosen
    environment runs on, and how many lots are asked for."""

    per_gpu_hour: Mapping[str, Decimal] = field(default_factory=dict)
    free_lots: Mapping[str, int] = field(default_factory=dict)
    environment_kinds: frozenset[str] | None = None
    lot_count: int = 1


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


def shape(params: float) -> tuple[int, int]:
    """(hidden width, layers) of a dense transformer with ``params`` parameters."""
    hidden = (params * LAYER_WIDTH_RATIO / 12) ** (1 / 3)
    layers = max(1, round(params / (12 * hidden * hidden)))
    return round(hidden), layers


def activations_gb(params: float, precision: str, workload: str, seq_len: int, batch: int) -> float:
    """Per card: training activations, or the inference KV cache (GB)."""
    hidden, layers = shape(params)
    tokens = seq_len * batch
    if workload == Workload.TRAINING:
        width = 2 if precision == "fp32" else 1
        return 34 * tokens * hidden * layers * width / 1e9
    value_bytes = 4 if precision == "fp32" else 2
    return 2 * layers * hidden * tokens * value_bytes / 1e9


def per_card_gb(state_gb: float, act_gb: float, cards: int) -> float:
    """Memory one card needs with the model state split over ``cards`` cards."""
    return state_gb / cards * (1 + WORKSPACE_SHARE) + act_gb + RUNTIME_OVERHEAD_GB


def usable_gb(kind: HardwareKind) -> float:
    """What a card of ``kind`` holds for the job, in GB (10⁹ bytes): its nameplate memory in
    GiB as the acceptance references give it (141 GiB on an H200 = 151.4 GB; the catalogue's
    "141 GB" is the marketed figure) less what the driver keeps (about 1 %). Without a
    reference, the marketed figure."""
    if kind.accept_memory_gib:
        return round(kind.accept_memory_gib * GIB / 1e9 * DRIVER_SHARE, 1)
    return float(kind.memory_per_card_gb)


def advise(
    params_billion: float | Decimal,
    precision: str,
    workload: str,
    kinds: Iterable[HardwareKind] | None = None,
    *,
    seq_len: int | None = None,
    micro_batch: int | None = None,
    context: Context | None = None,
) -> Advice:
    """Memory per card, replicated vs sharded, which kinds fit, what would fit otherwise,
    and the kind to book.

    The recommendation takes, in order: a kind where the job fits one card over one where it
    needs the pair sharded (the simplest setup); one that runs the chosen environment; one
    with enough lots free on the chosen date; one where it is not tight; the lowest price
    per GPU-hour; the smallest card. None when nothing fits a lot.
    """
    params = float(params_billion)
    if not 0 < params <= 100_000:
        raise AdvisorError("invalid_params")
    seq = MODEL_SEQ_LEN if seq_len is None else seq_len
    batch = MODEL_MICRO_BATCH if micro_batch is None else micro_batch
    if not (0 < seq <= MAX_SEQ_LEN and 0 < batch <= MAX_MICRO_BATCH):
        raise AdvisorError("invalid_params")
    per_param = bytes_per_param(precision, workload)
    context = context or Context()
    state_gb = params * per_param  # 1e9 params × B/param = GB
    act = activations_gb(params * 1e9, precision, workload, seq, batch)
    replicated = per_card_gb(state_gb, act, 1)
    sharded = per_card_gb(state_gb, act, CARDS_PER_LOT)
    if kinds is None:
        kinds = HardwareKind.objects.filter(is_offered=True)
    ordered = sorted(kinds, key=lambda k: (k.memory_per_card_gb, k.slug))
    fits = tuple(_fit(kind, replicated, sharded) for kind in ordered)
    recommended, reasons = _recommend(fits, context)
    suggestions = (
        () if recommended else _suggestions(params, precision, workload, seq, batch, ordered)
    )
    return Advice(
        params_billion=params,
        precision=precision,
        workload=workload,
        seq_len=seq,
        micro_batch=batch,
        bytes_per_param=per_param,
        model_state_gb=round(state_gb, 2),
        activations_gb=round(act, 2),
        replicated_per_card_gb=round(replicated, 2),
        sharded_per_card_gb=round(sharded, 2),
        fits=fits,
        recommended_kind=recommended.kind_slug if recommended else None,
        reasons=reasons,
        suggestions=suggestions,
    )


def _fit(kind: HardwareKind, replicated: float, sharded: float) -> KindFit:
    usable = usable_gb(kind)
    one, two = replicated <= usable, sharded <= usable
    needed = replicated if one else sharded
    return KindFit(
        kind_slug=kind.slug,
        kind_name=kind.name,
        memory_per_card_gb=kind.memory_per_card_gb,
        usable_per_card_gb=usable,
        fits_one_card=one,
        fits_sharded=two,
        tight=(one or two) and needed > TIGHT_SHARE * usable,
    )


def _recommend(
    fits: tuple[KindFit, ...], context: Context
) -> tuple[KindFit | None, tuple[str, ...]]:
    candidates = [fit for fit in fits if fit.verdict != "no_fit"]
    if not candidates:
        return None, ()
    env = context.environment_kinds

    def rank(fit: KindFit) -> tuple[object, ...]:
        return (
            fit.verdict != "one_card",
            env is not None and fit.kind_slug not in env,
            bool(context.free_lots) and context.free_lots.get(fit.kind_slug, 0) < context.lot_count,
            fit.tight,
            context.per_gpu_hour.get(fit.kind_slug, Decimal("Infinity")),
            fit.memory_per_card_gb,
        )

    best = min(candidates, key=rank)
    reasons = ["fits_one_card" if best.verdict == "one_card" else "fits_sharded"]
    if env is not None and best.kind_slug in env:
        reasons.append("runs_environment")
    if context.free_lots and context.free_lots.get(best.kind_slug, 0) >= context.lot_count:
        reasons.append("free_on_date")
    if not best.tight:
        reasons.append("not_tight")
    priced = [c for c in candidates if c.kind_slug in context.per_gpu_hour]
    if best in priced and context.per_gpu_hour[best.kind_slug] == min(
        context.per_gpu_hour[c.kind_slug] for c in priced
    ):
        reasons.append("lowest_price")
    return best, tuple(reasons)


def _suggestions(
    params: float, precision: str, workload: str, seq: int, batch: int, kinds: list[HardwareKind]
) -> tuple[Suggestion, ...]:
    """When nothing fits a lot: what would, each on the smallest kind it fits."""
    act_train = activations_gb(params * 1e9, "bf16", Workload.TRAINING, seq, batch)
    act_infer = activations_gb(params * 1e9, "bf16", Workload.INFERENCE, seq, batch)
    options: list[tuple[str, float, float]] = []  # code, state GB, activations GB
    if workload == Workload.TRAINING:
        adapters = params * ADAPTER_SHARE * TRAINING_BYTES["bf16"]
        options.append(("lora", params * 2 + adapters, act_train))
        options.append(("qlora", params * 0.5 + adapters, act_train))
        if precision != "fp8":
            options.append(("fp8", params * TRAINING_BYTES["fp8"], act_train))
        options.append(("inference", params * INFERENCE_BYTES["bf16"], act_infer))
    else:
        for code in ("int8", "int4"):
            if INFERENCE_BYTES[code] < INFERENCE_BYTES[precision]:
                options.append((code, params * INFERENCE_BYTES[code], act_infer))
    found = []
    for code, state, act in options:
        for kind in kinds:
            usable = usable_gb(kind)
            for cards, verdict in ((1, "one_card"), (CARDS_PER_LOT, "sharded")):
                need = per_card_gb(state, act, cards)
                if need <= usable:
                    found.append(Suggestion(code, round(need, 2), kind.slug, verdict))
                    break
            else:
                continue
            break
        else:
            found.append(
                Suggestion(code, round(per_card_gb(state, act, CARDS_PER_LOT), 2), None, "no_fit")
            )
    state = params * bytes_per_param(precision, workload)
    act = activations_gb(params * 1e9, precision, workload, seq, batch)
    if kinds:
        biggest = max(kinds, key=lambda k: k.memory_per_card_gb)
        room = usable_gb(biggest) - act - RUNTIME_OVERHEAD_GB
        if room > 0:
            cards = math.ceil(state * (1 + WORKSPACE_SHARE) / room)
            lots = math.ceil(cards / CARDS_PER_LOT)
            if lots <= MAX_LOTS_SUGGESTED:
                found.append(
                    Suggestion(
                        "more_lots",
                        round(per_card_gb(state, act, lots * CARDS_PER_LOT), 2),
                        biggest.slug,
                        "sharded",
                        lots=lots,
                    )
                )
    return tuple(found)
