"""The sections that read before anything is measured: the devices (the lot's cards and
only them), the stack (PyTorch, CUDA/HIP, NCCL, the arch list, extensions), telemetry before
and after the run, and the static acceptance checks (SKU, memory, MIG, ECC, persistence,
the versions)."""

from __future__ import annotations

import platform
import sys
from typing import Any

import torch

from .devices import accelerator, arch_name, check_devices
from .frame import Frame
from .report import GIB, NOT_MEASURED, STAND_IN, SectionFailed, at_least, not_measured, now
from .telemetry import Telemetry, xid_lines


class Inventory(Frame):
    def devices(self) -> dict[str, Any]:
        expected = (
            len(self.args.cards) if self.args.expect_devices is None else self.args.expect_devices
        )
        found = check_devices(self.args.cards, expected)
        self.data["devices"] = found
        if found["ok"]:
            self.check(
                "device_count",
                found["visible"],
                True,
                unit="devices",
                reference=expected,
                note="CPU stand-in: the visible-device variable's entries" if self.stand_in else "",
            )
        return found

    def no_gpu_reason(self) -> str:
        rows = self.rows_before
        build = f"torch {torch.__version__} (CUDA {torch.version.cuda}, HIP {torch.version.hip})"
        tool = self.telemetry.kind if self.telemetry else "the GPU tool"
        if rows:
            names = ", ".join(sorted({str(r.get("name")) for r in rows}))
            driver = rows[0].get("driver_version", "?")
            if torch.version.cuda is None and torch.version.hip is None:
                detail = "this PyTorch is a CPU-only build"
            else:
                detail = (
                    f"this wheel (CUDA {torch.version.cuda or torch.version.hip}) needs a newer "
                    f"driver than {driver}, or has no kernels for these cards"
                )
            return (
                f"no GPU visible to PyTorch: {tool} lists {len(rows)} GPU(s) ({names}, "
                f"driver {driver}) but {build} cannot use them (torch.cuda.is_available() is "
                f"false): the wheel does not match the driver ({detail})"
            )
        return f"no GPU visible: {build} sees no device and no GPU tool lists one"

    def stack(self) -> dict[str, Any]:
        args = self.args
        gpu = self.gpu
        devices = []
        if gpu:
            for index in range(torch.cuda.device_count()):
                properties = torch.cuda.get_device_properties(index)
                devices.append(
                    {
                        "index": index,
                        "name": properties.name,
                        "capability": list(torch.cuda.get_device_capability(index)),
                        "arch": arch_name(index),
                        "memory_gb": round(properties.total_memory / 1e9, 1),
                        "memory_gib": round(properties.total_memory / GIB, 2),
                    }
                )
        arch_list = torch.cuda.get_arch_list() if gpu else []
        expected_arch = self.thresholds.get("arch") or args.expected_arch
        supported: Any = not_measured("no expected arch given") if gpu else STAND_IN
        if gpu and expected_arch:
            in_list = any(
                a == expected_arch or a.replace("compute_", "sm_") == expected_arch
                for a in arch_list
            )
            supported = in_list and all(d["arch"] == expected_arch for d in devices)
        nccl: Any = NOT_MEASURED
        if gpu:
            try:
                found = torch.cuda.nccl.version()
                nccl = ".".join(str(p) for p in found) if isinstance(found, tuple) else str(found)
            except Exception as exc:
                nccl = not_measured(f"{type(exc).__name__}: {exc}")
        imported = []
        for name in [e for e in args.extensions.split(",") if e]:
            try:
                __import__(name)
                imported.append({"name": name, "imported": True, "error": ""})
            except Exception as exc:  # any import failure is the finding
                imported.append(
                    {"name": name, "imported": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
                )
        driver_cuda: Any = NOT_MEASURED
        if gpu and not torch.version.hip:
            try:
                raw = torch._C._cuda_getDriverVersion()  # type: ignore[attr-defined]
                driver_cuda = f"{raw // 1000}.{raw % 1000 // 10}"
            except Exception as exc:
                driver_cuda = not_measured(str(exc)[:100])
        result = {
            "torch": torch.__version__,
            "cuda": torch.version.cuda
            if torch.version.cuda
            else not_measured("a CPU build of PyTorch (no CUDA)"),
            "hip": torch.version.hip,
            "nccl": nccl,
            "driver": NOT_MEASURED,
            "driver_cuda": driver_cuda,
            "accelerator": accelerator(),
            "devices": devices,
            "arch_list": arch_list if gpu else NOT_MEASURED,
            "expected_arch": expected_arch,
            "arch_supported": supported if gpu else NOT_MEASURED,
            "extensions": imported,
            "kernel_check": [],
            "python": platform.python_version(),
            "interpreter": sys.executable,
        }
        self.data["stack"] = result
        return result

    def telemetry_before(self) -> dict[str, Any]:
        self.telemetry = Telemetry(self.args, self.args.cards)
        rows, why = self.telemetry.read()
        self.rows_before = rows
        buses = [str(r.get("pci.bus_id", "")) for r in rows]
        xids, lines = xid_lines(buses)
        found = {
            "source": self.telemetry.kind
            if rows
            else (why or not_measured("the tool listed no card")),
            "before": {"cards": rows, "xid_count": xids, "xid_lines": lines, "at": now()},
            "after": not_measured("the run did not get that far"),
            "samples": [],
        }
        self.data["telemetry"] = found
        stack = self.data.get("stack")
        if rows and isinstance(stack, dict):
            stack["driver"] = rows[0].get("driver_version") or NOT_MEASURED
        if why and self.telemetry.tool:
            raise SectionFailed(why)
        return found

    def telemetry_after(self) -> dict[str, Any]:
        telemetry = self.data.get("telemetry", {})
        if self.telemetry is None or not self.telemetry.tool:
            self.check("ecc_errors", not_measured("no GPU tool"), None)
            self.check("xid_errors", not_measured("no GPU tool"), None)
            return telemetry
        rows, why = self.telemetry.read()
        buses = [str(r.get("pci.bus_id", "")) for r in rows]
        xids, lines = xid_lines(buses)
        telemetry["after"] = {
            "cards": rows,
            "xid_count": xids,
            "xid_lines": lines,
            "at": now(),
            **({"error": why} if why else {}),
        }
        before = {r.get("index"): r for r in self.rows_before}
        for row in rows:
            card = row.get("index")
            old = before.get(card, {})
            new_u, old_u = (
                row.get("ecc.errors.uncorrected.volatile.total"),
                old.get("ecc.errors.uncorrected.volatile.total"),
            )
            if isinstance(new_u, float) and isinstance(old_u, float):
                self.check(
                    "ecc_errors",
                    new_u - old_u,
                    new_u == old_u,
                    card=int(card or 0),
                    unit="uncorrected errors during the run",
                    reference=0,
                    threshold=0,
                    note=""
                    if new_u == old_u
                    else f"{new_u - old_u:.0f} uncorrected ECC error(s) during the run",
                )
            else:
                self.check(
                    "ecc_errors",
                    not_measured(f"the tool reports {new_u!r}"),
                    None,
                    card=card if isinstance(card, int) else None,
                )
        before_x = (
            telemetry["before"].get("xid_count")
            if isinstance(telemetry.get("before"), dict)
            else None
        )
        if isinstance(xids, int) and isinstance(before_x, int):
            self.check(
                "xid_errors",
                xids - before_x,
                xids == before_x,
                unit="XID lines during the run",
                reference=0,
                note=""
                if xids == before_x
                else f"{xids - before_x} XID line(s) in the kernel log during the run",
            )
        else:
            self.check(
                "xid_errors",
                xids if isinstance(xids, str) else not_measured("no XID count before"),
                None,
            )
        return telemetry

    def acceptance_static(self) -> None:
        """The checks that read the cards and the stack: SKU, memory, MIG, ECC, persistence,
        the versions."""
        t = self.thresholds
        rows = self.rows_before
        names = [(r.get("index"), str(r.get("name"))) for r in rows]
        if not names and self.gpu:
            names = [
                (
                    self.args.cards[d["index"]]
                    if d["index"] < len(self.args.cards)
                    else d["index"],
                    d["name"],
                )
                for d in self.data.get("stack", {}).get("devices", [])
            ]
        sku = t.get("sku")
        for card, name in names:
            if sku:
                ok = str(sku).lower() in name.lower()
                self.check(
                    "sku",
                    name,
                    ok,
                    card=card,
                    reference=sku,
                    note="" if ok else f"the card is {name}; the kind expects {sku}",
                )
        if sku and not names:
            self.check("sku", not_measured("no GPU and no GPU tool"), None, reference=sku)
        nameplate = t.get("memory_gib")
        share = float(t.get("memory_share_min", 0.9))
        usable: list[tuple[Any, float | None]] = []
        for row in rows:
            total = row.get("memory.total")
            usable.append(
                (row.get("index"), total / 1024 if isinstance(total, float) else None)
            )  # MiB
        if not rows and self.gpu:
            usable = [
                (self.args.cards[d["index"]], d["memory_gib"])
                for d in self.data.get("stack", {}).get("devices", [])
            ]
        for card, gib in usable:
            if gib is None:
                continue
            passed = None if not nameplate else gib >= share * float(nameplate)
            self.check(
                "memory",
                round(gib, 2),
                passed,
                card=card,
                unit="GiB usable",
                reference=nameplate,
                threshold=round(share * float(nameplate), 2) if nameplate else None,
                note=(
                    f"usable {gib:.1f} GiB against a nameplate of {nameplate} GiB (GiB = 2**30)"
                    + ("" if passed is not False else f": under {share:.0%}")
                ),
            )
        for row in rows:
            card = row.get("index")
            mig = str(row.get("mig.mode.current", "[N/A]"))
            mig_on = mig.lower() == "enabled"
            self.check(
                "mig",
                mig,
                (not mig_on) or bool(t.get("mig_allowed")),
                card=card,
                reference="Disabled",
                note="MIG is on: the card is split into instances"
                if mig_on and not t.get("mig_allowed")
                else "",
            )
            ecc = str(row.get("ecc.mode.current", "[N/A]"))
            required = t.get("ecc_required", True)
            ecc_ok: bool | None = ecc.lower() == "enabled"
            if "n/a" in ecc.lower():
                ecc_ok = None
            self.check(
                "ecc",
                ecc,
                ecc_ok if required else None,
                card=card,
                reference="Enabled",
                note="ECC is off" if ecc_ok is False and required else "",
            )
            persistence = str(row.get("persistence_mode", "[N/A]"))
            on = persistence.lower() == "enabled"
            self.check(
                "persistence",
                persistence,
                True if on else (False if t.get("persistence_required") else None),
                card=card,
                reference="Enabled",
                note="" if on else "persistence mode is off",
            )
        stack = self.data.get("stack", {})
        if t.get("min_torch"):
            ok = at_least(torch.__version__, t["min_torch"])
            self.check(
                "stack_torch",
                torch.__version__,
                ok,
                reference=t["min_torch"],
                note="" if ok else f"torch {torch.__version__} is older than {t['min_torch']}",
            )
        if t.get("min_cuda"):
            cuda = torch.version.cuda
            if cuda:
                ok = at_least(cuda, t["min_cuda"])
                self.check(
                    "stack_cuda",
                    cuda,
                    ok,
                    reference=t["min_cuda"],
                    note="" if ok else f"CUDA {cuda} is older than {t['min_cuda']}",
                )
            else:
                self.check(
                    "stack_cuda",
                    not_measured("a PyTorch build without CUDA"),
                    None if self.stand_in else False,
                    reference=t["min_cuda"],
                    note="this PyTorch has no CUDA",
                )
        if t.get("min_rocm"):
            hip = torch.version.hip
            self.check(
                "stack_rocm",
                hip or not_measured("a PyTorch build without HIP"),
                at_least(hip, t["min_rocm"]) if hip else (None if self.stand_in else False),
                reference=t["min_rocm"],
                note=""
                if hip and at_least(hip, t["min_rocm"])
                else "HIP missing or older than required",
            )
        if t.get("min_driver"):
            driver = stack.get("driver")
            if rows and isinstance(driver, str) and not driver.startswith("not measured"):
                ok = at_least(driver, t["min_driver"])
                self.check(
                    "stack_driver",
                    driver,
                    ok,
                    reference=t["min_driver"],
                    note="" if ok else f"driver {driver} is older than R{t['min_driver']}",
                )
            else:
                self.check(
                    "stack_driver",
                    not_measured("no GPU tool to read it"),
                    None,
                    reference=t["min_driver"],
                )
        arch = t.get("arch") or self.args.expected_arch
        if arch:
            if self.gpu:
                ok = stack.get("arch_supported") is True
                self.check(
                    "stack_arch",
                    ", ".join(d["arch"] for d in stack.get("devices", [])),
                    ok,
                    reference=arch,
                    note=""
                    if ok
                    else f"{arch} is not this card's arch or not in torch's arch list "
                    f"{stack.get('arch_list')}",
                )
            else:
                self.check("stack_arch", NOT_MEASURED, None, reference=arch)
        self.report.summarise(self.stand_in)
        self.report.save()
