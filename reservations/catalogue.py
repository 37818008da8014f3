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
    kinds = {spec["slug"]: HardwareKind.objects.create(**spec) for spec in KINDS}
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
