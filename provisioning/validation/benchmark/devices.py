"""The lot's cards: which devices this process sees (the visible-device variables, as CUDA
and HIP read them), what each one is, and the device a rank measures on."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from typing import Any

import torch

from .report import GIB, STAND_IN

CARD_LIST = re.compile(r"[0-9]+(,[0-9]+)*")
PCI_PARTS = ("domain", "bus", "device")


def accelerator() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def device_for(rank: int) -> torch.device:
    return torch.device("cuda", rank) if accelerator() == "cuda" else torch.device("cpu")


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def arch_name(index: int) -> str:
    """sm_90, sm_100 on NVIDIA; the gfx name (gfx942) on ROCm."""
    properties = torch.cuda.get_device_properties(index)
    if torch.version.hip:
        return str(getattr(properties, "gcnArchName", "gfx?")).split(":")[0]
    major, minor = torch.cuda.get_device_capability(index)
    return f"sm_{major}{minor}"


def card_list(text: str) -> list[int]:
    """``--cards``: host device indices, "2,3" (or "3"), each once."""
    found = [int(card) for card in text.split(",")] if CARD_LIST.fullmatch(text) else []
    if not found or len(set(found)) != len(found):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of distinct card indices")
    return found


def visible_cards(
    environ: Mapping[str, str], rocm: bool
) -> tuple[dict[str, str | None], list[int] | None, str]:
    """The host cards the runtime exposes, as its visible-device variables say: the
    variables it reads (None: unset), the cards (None: the variables do not say which), and
    what is wrong ("" when nothing).

    CUDA, and the CPU stand-in, read CUDA_VISIBLE_DEVICES. HIP reads HIP_VISIBLE_DEVICES (or
    CUDA_VISIBLE_DEVICES in its place) as positions in the list ROCR_VISIBLE_DEVICES exposes
    when that one is set: ROCR_VISIBLE_DEVICES=2,3 with HIP_VISIBLE_DEVICES=2,3 is no card.
    """
    names = ["HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"]
    variable = {name: environ.get(name) for name in (names if rocm else names[1:2])}
    lists: dict[str, list[int]] = {}
    for name, value in variable.items():
        if value is not None and not CARD_LIST.fullmatch(value):
            return variable, None, f"{name} is {value!r}, not a list of card indices."
        if value is not None:
            lists[name] = [int(card) for card in value.split(",")]
    if not lists:
        unset = ", ".join(variable)
        return variable, None, f"No visible-device variable is set ({unset}): every card shows."
    chosen = next((name for name in names[:2] if name in lists), "")
    base = lists.get("ROCR_VISIBLE_DEVICES")
    if base is None or not chosen:
        return variable, lists[chosen or "ROCR_VISIBLE_DEVICES"], ""
    if max(lists[chosen]) >= len(base):
        return (
            variable,
            None,
            f"{chosen} picks by position among the {len(base)} cards ROCR_VISIBLE_DEVICES "
            f"exposes and has no position {max(lists[chosen])} there.",
        )
    return variable, [base[position] for position in lists[chosen]], ""


def device_identity(index: int, card: int | None) -> dict[str, Any]:
    """What says which physical card visible device ``index`` is; ``card`` is its host
    index. Read, not measured: no kernel runs."""
    if accelerator() != "cuda":
        return {
            "index": index,
            "card": card,
            **dict.fromkeys(["name", "memory_gb", "memory_gib", "uuid", "pci_bus_id"], STAND_IN),
        }
    try:
        properties = torch.cuda.get_device_properties(index)
    except RuntimeError as exc:  # a device the variable names but the runtime cannot open
        return {"index": index, "card": card, "error": str(exc)[:300]}
    unknown = "not measured: this PyTorch build does not report it"
    uuid = getattr(properties, "uuid", None)
    domain, bus, slot = (getattr(properties, f"pci_{part}_id", None) for part in PCI_PARTS)
    return {
        "index": index,
        "card": card,
        "name": properties.name,
        "memory_gb": round(properties.total_memory / 1e9, 1),
        "memory_gib": round(properties.total_memory / GIB, 2),
        "uuid": unknown if uuid is None else str(uuid),
        "pci_bus_id": unknown
        if None in (domain, bus, slot)
        else f"{domain:04x}:{bus:02x}:{slot:02x}.0",
    }


def check_devices(cards: list[int], expected: int) -> dict[str, Any]:
    """Whether this process sees the lot's ``cards``, ``expected`` devices, and nothing else."""
    variable, seen, problem = visible_cards(os.environ, rocm=bool(torch.version.hip))
    gpu = accelerator() == "cuda"
    visible = torch.cuda.device_count() if gpu else len(seen or [])
    shown = ", ".join(f"{name}={value}" for name, value in variable.items() if value is not None)
    if not problem and seen != cards:
        problem = (
            f"The visible-device variable ({shown}) shows card(s) {joined(seen or [])}, "
            f"but this lot's cards are {joined(cards)}."
        )
    elif not problem and visible != expected:
        problem = f"{expected} device(s) expected, {visible} visible ({shown})."
    if problem:
        problem += " Nothing was measured."
    hosts = seen or []
    return {
        "ok": not problem,
        "expected": expected,
        "cards": cards,
        "visible": visible,
        "variable": variable,
        "problem": problem,
        "stand_in": ""
        if gpu
        else "CPU stand-in, no GPU: one process per entry of CUDA_VISIBLE_DEVICES",
        "list": [
            device_identity(index, hosts[index] if index < len(hosts) else None)
            for index in range(visible)
        ],
    }


def joined(cards: list[int]) -> str:
    return ",".join(str(card) for card in cards)
