"""The split test's model: transformer blocks sized from the order (built on the meta
device, materialised on each rank), and the memory model that says what fits a card."""

from __future__ import annotations

import resource
from typing import Any

import torch
import torch.nn.functional as F

from .report import GIB


class Block(torch.nn.Module):
    """A pre-norm transformer block: causal self-attention and a 4x MLP."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden, bias=False)
        self.proj = torch.nn.Linear(hidden, hidden, bias=False)
        self.norm2 = torch.nn.LayerNorm(hidden)
        self.up = torch.nn.Linear(hidden, 4 * hidden, bias=False)
        self.down = torch.nn.Linear(4 * hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        qkv = self.qkv(self.norm1(x)).view(batch, length, 3, self.heads, hidden // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, hidden))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Transformer(torch.nn.Module):
    def __init__(self, layers: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.norm = torch.nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


SHAPES = [  # (up to this many parameters, hidden, heads): common model widths
    (0.25e9, 768, 12),
    (0.7e9, 1024, 16),
    (2e9, 2048, 16),
    (5e9, 3072, 24),
    (11e9, 4096, 32),
    (25e9, 5120, 40),
    (50e9, 6656, 52),
    (float("inf"), 8192, 64),
]


def block_params(hidden: int) -> int:
    return 12 * hidden * hidden + 4 * hidden


def shape_for(params: float) -> tuple[int, int, int]:
    """(layers, hidden, heads) of transformer blocks of about ``params`` parameters."""
    hidden, heads = next((h, n) for limit, h, n in SHAPES if params <= limit)
    return max(1, round(params / block_params(hidden))), hidden, heads


def memory_needed(
    layers: int, hidden: int, config: dict[str, Any], world: int, sharded: bool
) -> float:
    """Bytes per card, estimated: fp32 weights, gradients and AdamW's two moments (16 B a
    parameter; weights only for inference), what a training step holds for a moment on top
    (autocast's 16-bit copy of the weights, 2 B, and the foreach AdamW's temporaries, about
    4 B: 22 B a parameter at the peak), activations (34 B a token and width per layer in
    16 bit, as Korthikanti et al.), a workspace."""
    params = layers * block_params(hidden) + 2 * hidden
    if config["workload"] == "inference":
        per_param = 2
    else:
        per_param = 16 + 4 + (0 if config["measured_precision"] == "fp32" else 2)
    state = per_param * params
    if sharded:
        state = state // world + 2 * 4 * block_params(hidden)  # two blocks gathered at a time
    tokens = config["micro_batch"] * config["seq_len"]
    width = 2 if config["measured_precision"] == "fp32" else 1
    activations = (
        34 * tokens * hidden * layers * width
        if config["workload"] != "inference"
        else 4 * tokens * hidden * 4
    )
    return state + activations + 1.5 * GIB


def largest_fitting(
    hidden: int, config: dict[str, Any], memory: float, world: int, sharded: bool
) -> int:
    layers = 0
    while (
        memory_needed(layers + 1, hidden, config, world, sharded) <= 0.9 * memory
        and layers < 10_000
    ):
        layers += 1
    return layers


def materialise(model: torch.nn.Module, device: torch.device, seed: int) -> None:
    """Parameters made on ``device`` (each rank its own shard under FSDP2) and initialised
    there: the full model never exists on the host."""
    model.to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
            if local.ndim >= 2:
                local.normal_(0.0, 0.02, generator=generator)
            elif name.endswith("weight"):
                local.fill_(1.0)
            else:
                local.zero_()


def _fully_shard() -> Any:
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard  # type: ignore[no-redef,unused-ignore]
    return fully_shard


def peak_memory(device: torch.device) -> tuple[float, str]:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / GIB, "cuda_max_allocated_gib"
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, "process_peak_rss_gib"
