"""The tools as the hosts get them, for the tests: each one file, built from its package by
provisioning/validation/build.py (as the backends build them), and the modules inside."""

from __future__ import annotations

import zipfile
from pathlib import Path

from provisioning.validation import build

BENCHMARK = build.benchmark()
"""The acceptance benchmark, one file: ``python BENCHMARK --out report.json --cards 0,1``."""
TOOL = build.tool()
"""``gpulots split-test``, one file, named gpulots.py as in the accounts."""


def modules(built: Path) -> dict[str, str]:
    """The Python modules inside a built file, by their path in it: the text that ships."""
    with zipfile.ZipFile(built) as zipped:
        return {
            name: zipped.read(name).decode() for name in zipped.namelist() if name.endswith(".py")
        }
