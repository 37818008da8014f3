"""The benchmark's run: its sections in order, each isolated (one that fails records its
error and the others still run), and the exit status they add up to."""

from __future__ import annotations

from .cards import CardChecks
from .hypothesis import HypothesisTest
from .inventory import Inventory
from .report import (
    EXIT_ACCEPTANCE,
    EXIT_CRASH,
    EXIT_DEVICE_MISMATCH,
    EXIT_NO_GPU,
    EXIT_OK,
    EXIT_TIMEOUT,
)


class Benchmark(Inventory, CardChecks, HypothesisTest):
    """One run on the lot's cards: the frame (frame.Frame) and the three kinds of sections,
    each a mixin of its own module."""

    def run(self) -> int:
        args = self.args
        devices = self.section("devices", self.devices)
        self.report.save()
        if devices is None or not devices["ok"]:
            problem = devices["problem"] if devices else self.data["sections"]["devices"]["error"]
            self.data["error"] = problem
            self.check(
                "device_count",
                devices["visible"] if devices else None,
                False,
                unit="devices",
                reference=devices["expected"] if devices else None,
                note=problem,
            )
            self.section("telemetry_before", self.telemetry_before)
            return self.finish(EXIT_DEVICE_MISMATCH)
        self.section("stack", self.stack)
        self.section("telemetry_before", self.telemetry_before)
        if not self.gpu and args.require_gpu:
            self.check(
                "gpu_visible",
                0,
                False,
                unit="devices",
                reference=len(args.cards),
                note=self.no_gpu_reason(),
            )
            self.data["error"] = self.no_gpu_reason()
            return self.finish(EXIT_NO_GPU)
        if not self.gpu and self.rows_before:  # a stand-in on a host whose tool lists GPUs
            self.data["devices"]["gpu_tool_lists"] = len(self.rows_before)
            self.check("gpu_visible", 0, None, unit="devices", note=self.no_gpu_reason())
        self.acceptance_static()
        per_card = self.section("per_card", self.per_card)
        self.acceptance_per_card(per_card)
        if len(args.cards) >= 2:
            collectives = self.section("collectives", self.collectives)
            self.acceptance_collectives(collectives)
        else:
            self.data["collectives"] = {"skipped": "one card: no collectives"}
            self.one_card_unmeasured()
        self.section("split", self.split)
        if args.usage_mode == "independent":
            self.section("independent", self.independent)
        self.section("smoke", self.smoke)
        self.section("telemetry_after", self.telemetry_after)
        self.section("verdict", self.make_verdict)
        code = EXIT_OK
        self.report.summarise(self.stand_in)
        if self.data["acceptance"]["passed"] is False:
            code = EXIT_ACCEPTANCE
        if self.failed_sections and code == EXIT_OK:
            code = EXIT_CRASH
            first = self.failed_sections[0]
            self.data["error"] = f"section {first} failed: {self.data['sections'][first]['error']}"
        if self.timed_out:
            code = EXIT_TIMEOUT
        return self.finish(code)
