"""The sections that measure the cards: each card on its own (per_card), then together
(collectives), and their acceptance checks against the kind's references; a one-card lot
says what it cannot measure."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

from .collectives import collectives_worker, nccl_transport
from .frame import Frame
from .percard import per_card_worker
from .ranks import run_ranks
from .report import GIB, not_measured
from .smi import HW_THROTTLE


class CardChecks(Frame):
    def sample_telemetry(self) -> None:
        if self.telemetry is None or not self.telemetry.tool:
            return
        interval = 2.0
        last = self.samples[-1]["t"] if self.samples else 0
        if time.time() - last >= interval and len(self.samples) < 400:
            self.samples.append(self.telemetry.sample())

    def per_card(self) -> list[dict[str, Any]]:
        config = {"quick": self.args.quick, "fp8": bool(self.thresholds.get("fp8_tflops"))}
        results = run_ranks(
            "per_card",
            len(self.args.cards),
            per_card_worker,
            {**config, "group": False},
            self.budget("per_card"),
            tick=self.sample_telemetry,
        )
        self.data["per_card"] = results
        telemetry = self.data.get("telemetry")
        if isinstance(telemetry, dict):
            telemetry["samples"] = self.samples
        first = results[0] if results else {}
        self.data.setdefault("essentials", {}).update(  # v1's figures, from card 0
            matmul=first.get("matmul_bf16"),
            copy_bandwidth_gbps=first.get("hbm", {}).get("gbps", not_measured("no figure")),
            attention=not_measured("v2 times attention inside the split test's blocks"),
        )
        stack = self.data.get("stack")
        if isinstance(stack, dict):
            stack["kernel_check"] = [
                {"device": r["device"], **r.get("kernel_check", {})} for r in results
            ]
        return results

    def acceptance_per_card(self, results: list[dict[str, Any]] | None) -> None:
        if results is None:
            self.section_missing(["matmul_bf16", "hbm", "memory_pattern", "sustained"], "per_card")
            return
        t = self.thresholds
        share_min = float(t.get("matmul_share_min", 0.6))
        hbm_min = float(t.get("hbm_share_min", 0.7))
        stand = "CPU stand-in: no datasheet comparison"
        for rank, result in enumerate(results):
            card = self.args.cards[rank]
            for key, peak_key in (("matmul_bf16", "bf16_tflops"), ("matmul_fp8", "fp8_tflops")):
                if key not in result:
                    continue
                found = result[key]
                value = found.get("tflops", not_measured(found.get("error", "?")))
                peak = t.get(peak_key)
                if isinstance(value, float) and peak and not self.stand_in:
                    share = value / float(peak)
                    self.check(
                        key,
                        value,
                        share >= share_min,
                        card=card,
                        unit="TFLOP/s",
                        reference=peak,
                        threshold=round(share_min * float(peak), 1),
                        note=f"{share:.0%} of the datasheet peak"
                        + ("" if share >= share_min else f", under {share_min:.0%}"),
                    )
                else:
                    failed = "error" in found
                    self.check(
                        key,
                        value,
                        False if failed and not self.stand_in else None,
                        card=card,
                        unit="TFLOP/s",
                        reference=peak,
                        note=stand
                        if self.stand_in
                        else (found.get("error") or "no datasheet peak given"),
                    )
            hbm = result.get("hbm", {})
            value = hbm.get("gbps", not_measured(hbm.get("error", "?")))
            peak = t.get("hbm_tbps")
            if isinstance(value, float) and peak and not self.stand_in:
                share = value / (float(peak) * 1000)
                self.check(
                    "hbm",
                    value,
                    share >= hbm_min,
                    card=card,
                    unit="GB/s",
                    reference=float(peak) * 1000,
                    threshold=round(hbm_min * float(peak) * 1000),
                    note=f"{share:.0%} of the datasheet bandwidth (device copy, read + write)"
                    + ("" if share >= hbm_min else f", under {hbm_min:.0%}"),
                )
            else:
                self.check(
                    "hbm",
                    value,
                    None if self.stand_in or "error" not in hbm else False,
                    card=card,
                    unit="GB/s",
                    reference=float(peak) * 1000 if peak else None,
                    note=stand if self.stand_in else hbm.get("error", ""),
                )
            pattern = result.get("memory_pattern", {})
            if "errors" in pattern:
                ok = pattern["errors"] == 0
                self.check(
                    "memory_pattern",
                    pattern["errors"],
                    ok,
                    card=card,
                    unit="mismatched words",
                    reference=0,
                    note=f"{pattern['tested_bytes'] / GIB:.2f} GiB tested "
                    f"({pattern['coverage']:.0%} of free), "
                    f"{pattern['patterns_completed']}/{pattern['patterns']} patterns"
                    + (f"; {pattern['note']}" if pattern["note"] else ""),
                )
            else:
                self.check(
                    "memory_pattern",
                    not_measured(pattern.get("error", "?")),
                    False,
                    card=card,
                    note=pattern.get("error", ""),
                )
            load = result.get("sustained", {})
            if "windows_tflops" in load:
                throttled = self.throttles(load, card)
                steady: bool | None = (
                    None if self.stand_in else (load["drop"] <= 0.15 and not throttled)
                )
                self.check(
                    "sustained",
                    load["min_tflops"],
                    steady,
                    card=card,
                    unit="TFLOP/s (lowest 1 s window)",
                    reference=load["first_tflops"],
                    threshold=0.85,
                    note=(
                        f"{load['seconds']} s; drop {load['drop']:.0%} from the best window"
                        + (f"; hardware throttling: {', '.join(throttled)}" if throttled else "")
                        + ("; " + stand if self.stand_in else "")
                    ),
                )
            else:
                self.check(
                    "sustained",
                    not_measured(load.get("error", "?")),
                    False if not self.stand_in else None,
                    card=card,
                    note=load.get("error", ""),
                )
        self.cards_match(results)
        self.report.summarise(self.stand_in)
        self.report.save()

    def throttles(self, load: dict[str, Any], card: int) -> list[str]:
        """The hardware throttle reasons the tool reported for ``card`` (its host index, as
        the tool's rows) during its sustained load; another card's are not this one's."""
        seen: set[str] = set()
        for sample in self.samples:
            if not (load["from"] <= sample["t"] <= load["to"] + 2):
                continue
            for row in sample.get("cards", []):
                if row.get("index") != card:
                    continue
                mask = row.get("throttle_reasons")
                if isinstance(mask, int):
                    seen.update(name for bit, name in HW_THROTTLE.items() if mask & bit)
        return sorted(seen)

    def cards_match(self, results: list[dict[str, Any]]) -> None:
        if len(results) < 2:
            return
        tolerance = float(self.thresholds.get("card_tolerance", 0.1))
        for key, field in (("matmul_bf16", "tflops"), ("hbm", "gbps")):
            values = [r.get(key, {}).get(field) for r in results]
            if not all(isinstance(v, float) and v > 0 for v in values):
                self.check(
                    "cards_match",
                    not_measured(f"{key} missing on a card"),
                    None if self.stand_in else False,
                    note=f"{key}: not measured on every card",
                )
                continue
            spread = (max(values) - min(values)) / max(values)
            self.check(
                "cards_match",
                round(spread, 3),
                None if self.stand_in else spread <= tolerance,
                unit=f"{key} spread",
                threshold=tolerance,
                note=f"{key}: "
                + " / ".join(str(v) for v in values)
                + ("; CPU stand-in: processes share one CPU" if self.stand_in else ""),
            )

    def collectives(self) -> dict[str, Any]:
        environment: dict[str, str] = {}
        folder = tempfile.mkdtemp(prefix="nccl-")
        if self.gpu and "NCCL_DEBUG" not in os.environ:
            environment = {
                "NCCL_DEBUG": "INFO",
                "NCCL_DEBUG_SUBSYS": "INIT,P2P,NET,GRAPH",
                "NCCL_DEBUG_FILE": os.path.join(folder, "nccl.%h.%p"),
            }
        try:
            ranks = run_ranks(
                "collectives",
                len(self.args.cards),
                collectives_worker,
                {"quick": self.args.quick},
                self.budget("collectives"),
                environment=environment,
            )
            transport = (
                nccl_transport(folder)
                if environment
                else (
                    not_measured("gloo on CPU (no NCCL)")
                    if not self.gpu
                    else not_measured("NCCL_DEBUG was set by the caller")
                )
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        first = ranks[0]
        merged: dict[str, Any] = {
            "world_size": len(ranks),
            "transport": transport,
            "p2p": first["p2p"],
        }
        for name in ("all_reduce", "all_gather", "reduce_scatter"):
            rows = []
            for index, row in enumerate(first[name]):
                others = [r[name][index] for r in ranks]
                rows.append({**row, "correct": all(o["correct"] for o in others)})
            merged[name] = rows
        self.data["collectives"] = merged
        essentials = self.data.setdefault("essentials", {})
        essentials["all_reduce"] = {
            "correct": all(r["correct"] for r in merged["all_reduce"]),
            "world_size": len(ranks),
            "sizes": [
                {"bytes": r["bytes"], "busbw_gbps": r["busbw_gbps"]} for r in merged["all_reduce"]
            ],
        }
        return merged

    def one_card_unmeasured(self) -> None:
        """A one-card lot: what needs two cards is said, neither passed nor failed."""
        why = not_measured("one card in the lot (it takes two)")
        for check_id, unit in (
            ("collective_correct", "wrong results"),
            ("all_reduce", "GB/s busbw"),
            ("all_gather", "GB/s busbw"),
            ("reduce_scatter", "GB/s busbw"),
            ("p2p", "GB/s"),
            ("cards_match", ""),
        ):
            self.check(
                check_id,
                why,
                None,
                unit=unit,
                note="one card: no collectives, P2P copy, card-to-card comparison or two-card "
                "split; the acceptance covers this card alone",
            )

    def acceptance_collectives(self, merged: dict[str, Any] | None) -> None:
        if merged is None:
            self.section_missing(["collective_correct"], "collectives")
            return
        wrong = [
            f"{name} {row['bytes']} B {row['place']}-place"
            for name in ("all_reduce", "all_gather", "reduce_scatter")
            for row in merged[name]
            if not row["correct"]
        ]
        self.check(
            "collective_correct",
            len(wrong),
            not wrong,
            unit="wrong results",
            reference=0,
            note="" if not wrong else "wrong values from " + ", ".join(wrong[:6]),
        )
        minimum = self.thresholds.get("busbw_gbps_min")
        for name in ("all_reduce", "all_gather", "reduce_scatter"):
            top = max(merged[name], key=lambda r: (r["bytes"], r["busbw_gbps"]))
            if self.stand_in or not minimum or name != "all_reduce":
                self.check(
                    name,
                    top["busbw_gbps"],
                    None,
                    unit="GB/s busbw",
                    reference=minimum if name == "all_reduce" else None,
                    note=f"at {top['bytes'] / 2**20:.0f} MiB"
                    + ("; CPU stand-in (gloo)" if self.stand_in else ""),
                )
            else:
                ok = top["busbw_gbps"] >= float(minimum)
                self.check(
                    name,
                    top["busbw_gbps"],
                    ok,
                    unit="GB/s busbw",
                    reference=minimum,
                    threshold=minimum,
                    note=f"at {top['bytes'] / 2**20:.0f} MiB"
                    + ("" if ok else f": under {minimum} GB/s"),
                )
        p2p = merged.get("p2p") or {}
        value = p2p.get("0_to_1_gbps")
        self.check("p2p", value, None, unit="GB/s", note=f"1 to 0: {p2p.get('1_to_0_gbps')}")
        self.report.summarise(self.stand_in)
        self.report.save()
