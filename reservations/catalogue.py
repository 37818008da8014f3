"""The catalogue's seed data: the three kinds of lot, their prices, the environments.

Loaded by ``manage.py load_catalogue`` when the database has no kinds yet; operators edit
everything in the admin afterwards. ``DEMO_INVENTORY`` adds hosts and lots for local
development (``make run``), all on loopback.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import transaction

from reservations.models import Environment, HardwareKind, Host, Lot, Price

KINDS: list[dict[str, Any]] = [
    {
        "slug": "b200",
        "name": "2× NVIDIA B200 180 GB",
        "vendor": "NVIDIA",
        "generation": "Blackwell",
        "stack": "cuda",
        "memory_per_card_gb": 180,
        "interconnect": "NVLink 5 (1.8 TB/s per card)",
        "architecture": "sm_100",
        "description": "360 GB across the pair, not one allocation. Needs a stack built for "
        "Blackwell (CUDA 12.8 or newer, sm_100 in the build's architecture list).",
        "display_order": 1,
    },
    {
        "slug": "h200",
        "name": "2× NVIDIA H200 141 GB",
        "vendor": "NVIDIA",
        "generation": "Hopper",
        "stack": "cuda",
        "memory_per_card_gb": 141,
        "interconnect": "NVLink 4 (900 GB/s per card)",
        "architecture": "sm_90",
        "description": "When the model and its execution margin fit 141 GB, one card runs the "
        "job alone: a single-GPU baseline next to the two-card run.",
        "display_order": 2,
    },
    {
        "slug": "mi300x",
        "name": "2× AMD MI300X 192 GB",
        "vendor": "AMD",
        "generation": "CDNA 3",
        "stack": "rocm",
        "memory_per_card_gb": 192,
        "interconnect": "AMD Infinity Fabric",
        "architecture": "gfx942",
        "description": "The most memory per card, for a project prepared for ROCm.",
        "display_order": 3,
    },
]

# The acceptance references per kind, from the vendors' datasheets. Dense figures (without
# the 2:4 structured sparsity the datasheets quote first: half of those), per card:
# - B200 (HGX B200, 1,000 W): BF16 2,250 TFLOP/s, FP8 4,500 TFLOP/s, HBM3e 8 TB/s, 180 GB
#   per card as HGX B200 ships it (192 GB on the full chip), NVLink 5 at 900 GB/s each way.
#   https://www.nvidia.com/en-us/data-center/hgx/ and the HGX B200 table at
#   https://glennklockwood.com/garden/processors/B200
# - H200 SXM: BF16 989 TFLOP/s, FP8 1,979 TFLOP/s (1,979 / 3,958 with sparsity), 141 GB HBM3e,
#   4.8 TB/s. https://www.nvidia.com/en-us/data-center/h200/
# - MI300X: BF16 1,307.4 TFLOP/s, FP8 2,614.9 TFLOP/s (dense), 192 GB HBM3, 5.3 TB/s.
#   https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html
# The all-reduce minimum is for two cards of the lot at the largest message (busbw as
# nccl-tests reports it): well under the link's one-way rate, which a good pair reaches to
# about 80 %. Operators tune all of it in the admin; the shares are the same for each kind.
ACCEPTANCE: dict[str, dict[str, Any]] = {
    "b200": {
        "accept_sku": "B200",
        "accept_memory_gib": 180,
        "accept_bf16_tflops": 2250,
        "accept_fp8_tflops": 4500,
        "accept_hbm_tbps": 8.0,
        "accept_busbw_gbps_min": 600,
        "accept_min_torch": "2.7",
        "accept_min_cuda": "12.8",
        "accept_min_driver": "570",
    },
    "h200": {
        "accept_sku": "H200",
        "accept_memory_gib": 141,
        "accept_bf16_tflops": 989,
        "accept_fp8_tflops": 1979,
        "accept_hbm_tbps": 4.8,
        "accept_busbw_gbps_min": 300,
        "accept_min_torch": "2.4",
        "accept_min_cuda": "12.4",
        "accept_min_driver": "550",
    },
    "mi300x": {
        "accept_sku": "MI300X",
        "accept_memory_gib": 192,
        "accept_bf16_tflops": 1307.4,
        "accept_fp8_tflops": 2614.9,
        "accept_hbm_tbps": 5.3,
        "accept_busbw_gbps_min": 40,
        "accept_min_torch": "2.4",
        "accept_min_rocm": "6.2",
        # amd-smi's hotspot (junction) runs well above an NVIDIA card's core temperature
        "health_max_temperature_c": 105,
    },
}
"""Shared figures: usable memory ≥ 90 % of nameplate, matrix product ≥ 60 % of peak, HBM
≥ 70 % of the datasheet, the two cards within 10 %, ECC on, MIG off (the fields' defaults)."""

PRICES_USD = {
    "b200": {3: "720.00", 7: "1610.00", 30: "6050.00"},
    "h200": {3: "500.00", 7: "1130.00", 30: "4320.00"},
    "mi300x": {3: "360.00", 7: "800.00", 30: "3000.00"},
}

ENVIRONMENTS: list[dict[str, Any]] = [
    {
        "slug": "pytorch-2.9-cuda-12.8",
        "name": "PyTorch 2.9 + CUDA 12.8",
        "stack": "cuda",
        "description": "Builds for sm_90 and sm_100: Hopper and Blackwell.",
        "kinds": ["b200", "h200"],
        "display_order": 1,
    },
    {
        "slug": "pytorch-2.9-cuda-12.6",
        "name": "PyTorch 2.9 + CUDA 12.6",
        "stack": "cuda",
        "description": "Hopper only: CUDA before 12.8 cannot target Blackwell.",
        "kinds": ["h200"],
        "display_order": 2,
    },
    {
        "slug": "pytorch-2.9-rocm-6.4",
        "name": "PyTorch 2.9 + ROCm 6.4",
        "stack": "rocm",
        "description": "Builds for gfx942 (MI300X).",
        "kinds": ["mi300x"],
        "display_order": 3,
    },
    {
        "slug": "ubuntu-24.04-drivers",
        "name": "Bare Ubuntu 24.04 + drivers",
        "stack": "",
        "description": "Drivers and nothing else: bring your own stack.",
        "kinds": ["b200", "h200", "mi300x"],
        "display_order": 4,
    },
]

DEMO_INVENTORY = {
    "b200": [("demo-b200-1", [(0, 1), (2, 3)])],
    "h200": [("demo-h200-1", [(0, 1), (2, 3), (4, 5), (6, 7)])],
    "mi300x": [("demo-mi300x-1", [(0, 1), (2, 3)])],
}


@transaction.atomic
def load_catalogue(*, demo_inventory: bool = False) -> bool:
    """Load kinds, prices and environments if there are no kinds yet; True if it loaded."""
    if HardwareKind.objects.exists():
        return False
    kinds = {
        spec["slug"]: HardwareKind.objects.create(**spec, **ACCEPTANCE.get(spec["slug"], {}))
        for spec in KINDS
    }
    Price.objects.bulk_create(
        Price(kind=kinds[slug], window_days=days, amount_usd=Decimal(amount))
        for slug, by_window in PRICES_USD.items()
        for days, amount in by_window.items()
    )
    for spec in ENVIRONMENTS:
        fields = {key: value for key, value in spec.items() if key != "kinds"}
        environment = Environment.objects.create(**fields)
        environment.compatible_kinds.set([kinds[slug] for slug in spec["kinds"]])
    if demo_inventory:
        for slug, hosts in DEMO_INVENTORY.items():
            for name, pairs in hosts:
                host = Host.objects.create(name=name, kind=kinds[slug], address="127.0.0.1")
                Lot.objects.bulk_create(Lot(host=host, gpu_a=a, gpu_b=b) for a, b in pairs)
    return True
