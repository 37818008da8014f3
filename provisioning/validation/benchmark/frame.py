"""The run's frame, shared by its sections: the arguments, the report as it fills, each
section's budget, and ``section``, which runs one and records how it ended (ok, failed,
timeout, skipped) without stopping the others. The sections themselves are the mixins of
``runner.Benchmark``: inventory, cards, hypothesis."""

from __future__ import annotations

import argparse
import json
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from .report import (
    EXIT_ACCEPTANCE,
    EXIT_OK,
    Report,
    SectionFailed,
    SectionTimeout,
    Terminated,
    not_measured,
    now,
)
from .telemetry import Telemetry

DEFAULT_BUDGETS = {  # seconds, on GPUs (full / --quick); the CPU stand-in uses the quick ones
    "per_card": (240, 90),
    "collectives": (240, 90),
    "split_one_card": (180, 90),
    "split_two_cards": (240, 120),
    "independent": (180, 90),
}
SKIPPABLE = ("per_card", "collectives", "split", "independent", "smoke")


class Frame:
    def __init__(self, args: argparse.Namespace, thresholds: dict[str, Any]) -> None:
        self.args = args
        self.thresholds = thresholds
        self.report = Report(args.out)
        self.data = self.report.data
        self.started = time.monotonic()
        self.deadline = self.started + args.timeout
        self.timed_out = False
        self.failed_sections: list[str] = []
        self.budgets = json.loads(args.section_budgets) if args.section_budgets else {}
        self.gpu = torch.cuda.is_available()
        self.stand_in = not self.gpu
        self.data.update(
            stand_in=self.stand_in,
            host=socket.gethostname(),
            usage_mode=args.usage_mode,
            thresholds=thresholds,
            order={
                "hypothesis": args.hypothesis,
                "params_billion": args.params_billion,
                "precision": args.precision,
                "seq_len": args.seq_len,
                "micro_batch": args.micro_batch,
                "workload": args.workload,
            },
        )
        self.telemetry: Telemetry | None = None
        self.rows_before: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []
        self.current = ""
        self.config: dict[str, Any] = {}
        self.skip = {name for name in args.skip.split(",") if name}

    def budget(self, name: str) -> float:
        full, quick = DEFAULT_BUDGETS.get(name, (120, 60))
        wanted = float(self.budgets.get(name, quick if (self.args.quick or not self.gpu) else full))
        return max(1.0, min(wanted, self.deadline - time.monotonic() - 5))

    def section(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run one section: its outcome and seconds are recorded, the report rewritten."""
        self.current = name
        record: dict[str, Any] = {"status": "ok", "seconds": 0.0, "error": ""}
        self.data["sections"][name] = record
        if name in self.skip:
            record.update(status="skipped", error="skipped: --skip")
            self.report.save()
            return None
        if time.monotonic() > self.deadline - 5:
            record.update(
                status="timeout", error="not run: the run's overall budget (--timeout) was spent"
            )
            self.timed_out = True
            self.report.save()
            return None
        record["status"] = "running"  # a partial report says where the run was
        self.report.save()
        record["status"] = "ok"
        started = time.perf_counter()
        value = None
        try:
            value = fn()
        except SectionTimeout as exc:
            record.update(status="timeout", error=str(exc))
            self.timed_out = True
        except SectionFailed as exc:
            record.update(status="failed", error=str(exc), traceback=exc.trace)
            self.failed_sections.append(name)
        except Terminated:
            record.update(status="timeout", error="terminated (SIGTERM) during this section")
            raise
        except Exception as exc:
            record.update(
                status="failed",
                error=f"{type(exc).__name__}: {exc}"[:500],
                traceback=traceback.format_exc()[-4000:],
            )
            self.failed_sections.append(name)
        record["seconds"] = round(time.perf_counter() - started, 2)
        self.report.save()
        return value

    def check(self, *args: Any, **kwargs: Any) -> None:
        self.report.check(*args, **kwargs)

    def section_missing(self, ids: list[str], section: str) -> None:
        """Checks a failed or cut section could not make: failed, with the reason."""
        record = self.data["sections"].get(section, {})
        if record.get("status") in ("failed", "timeout"):
            for check_id in ids:
                self.check(
                    check_id,
                    not_measured(f"the {section} section {record['status']}"),
                    False,
                    note=f"not measured: the {section} section {record['status']}: "
                    f"{record.get('error', '')[:200]}",
                )

    def finish(self, code: int) -> int:
        self.report.summarise(self.stand_in)
        if code == EXIT_OK and self.data["acceptance"]["passed"] is False:
            code = EXIT_ACCEPTANCE
        self.data.update(
            complete=True,
            finished_at=now(),
            exit_code=code,
            seconds=round(time.monotonic() - self.started, 1),
        )
        self.report.save()
        return code
