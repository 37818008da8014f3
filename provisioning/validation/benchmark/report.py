"""The report: its format (version 2), how it is written (atomically, as the run goes), its
checks and their summary, the exit statuses, and the words and figures every section uses
("not measured: ...", significant digits, UTC time stamps, version comparisons)."""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import tempfile
from typing import Any

REPORT_VERSION = 2
GIB = 2**30
NOT_MEASURED = "not measured: no GPU"
STAND_IN = "not measured: no GPU (CPU stand-in)"
EXIT_OK = 0
EXIT_CRASH = 1
EXIT_USAGE = 2
EXIT_DEVICE_MISMATCH = 3
"""The visible devices are not the lot's cards: the report says what was seen; nothing ran."""
EXIT_ACCEPTANCE = 4
EXIT_TIMEOUT = 5
EXIT_NO_GPU = 6


def now() -> str:
    # timezone.utc, not the UTC alias ruff's UP017 suggests: that one is 3.11+, and the
    # hosts may run 3.9 or 3.10
    return _dt.datetime.now(_dt.timezone.utc).isoformat()


def not_measured(why: str) -> str:
    return why if why.startswith("not measured: ") else f"not measured: {why}"


def significant(value: float, digits: int = 4) -> float:
    """Small and large figures alike keep their first digits."""
    return float(f"{value:.{digits}g}")


def version_tuple(text: Any) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"[0-9]+", str(text))[:3])


def at_least(found: Any, minimum: Any) -> bool:
    have, need = version_tuple(found), version_tuple(minimum)
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


class Report:
    """The JSON report, rewritten atomically to ``path`` whenever ``save`` is called."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.data: dict[str, Any] = {
            "version": REPORT_VERSION,
            "complete": False,
            "started_at": now(),
            "finished_at": None,
            "exit_code": None,
            "sections": {},
            "acceptance": {"passed": None, "checks": [], "failed": []},
        }

    def save(self) -> None:
        folder = os.path.dirname(os.path.abspath(self.path))
        handle, temporary = tempfile.mkstemp(prefix=".report-", suffix=".json", dir=folder)
        try:
            with os.fdopen(handle, "w") as out:
                json.dump(self.data, out, indent=1, default=str)
            os.replace(temporary, self.path)
        except BaseException:
            if os.path.exists(temporary):
                os.unlink(temporary)
            raise

    def check(
        self,
        check_id: str,
        value: Any,
        passed: bool | None,
        *,
        card: int | None = None,
        unit: str = "",
        reference: Any = None,
        threshold: Any = None,
        note: str = "",
    ) -> None:
        self.data["acceptance"]["checks"].append(
            {
                "id": check_id,
                "card": card,
                "value": value,
                "unit": unit,
                "reference": reference,
                "threshold": threshold,
                "passed": passed,
                "note": note,
            }
        )

    def summarise(self, stand_in: bool) -> None:
        checks = self.data["acceptance"]["checks"]
        failed = []
        for c in checks:
            if c["passed"] is False:
                where = "" if c["card"] is None else f" (card {c['card']})"
                failed.append(f"{c['id']}{where}: {c['note'] or 'failed'}")
        passed: bool | None
        if failed:
            passed = False
        elif any(c["passed"] is True for c in checks) and not stand_in:
            passed = True
        else:
            passed = None  # nothing on real hardware could be checked
        self.data["acceptance"].update(passed=passed, failed=failed)


class SectionFailed(Exception):
    def __init__(self, message: str, trace: str = "") -> None:
        super().__init__(message)
        self.trace = trace


class SectionTimeout(Exception):
    pass


class Terminated(BaseException):
    """SIGTERM (the host's `timeout`, the operator): the report is written, exit 5."""
