"""The acceptance benchmark (report v2): hardware acceptance and the researcher's split test.

The Python standard library (3.9+) and PyTorch, nothing else. A package here, one file on a
host: provisioning/validation/build.py makes it a zipapp, and that file is what the backends
copy and run (``python benchmark.pyz --out report.json --cards 2,3``; here also
``python -m provisioning.validation.benchmark``). Usage, sections and exit codes: __main__.

One module a part of the run, each importing only the ones below it:

* report: the report's format and writing, its checks, the exit codes, shared words;
* devices, telemetry: the lot's cards as the runtime and the vendor's tool see them;
* ranks: one process per card (from a fork server), meeting at a store this process serves;
* percard, collectives: the measurements on each card, then across the cards;
* model, split, verdict: the hypothesis test's model, its runs, its answer;
* frame, inventory, cards, hypothesis, runner: the run's sections and their checks;
* __main__: the command line.

The names below are the program's, as its single file had them.
"""

from __future__ import annotations

from .collectives import collectives_worker, p2p_bandwidth
from .devices import card_list, check_devices, device_identity, visible_cards
from .model import Transformer, block_params, largest_fitting, memory_needed, shape_for
from .percard import (
    copy_bandwidth,
    fp8_matmul,
    fp8_rate,
    matmul_rate,
    memory_pattern,
    per_card_worker,
    sustained,
)
from .ranks import run_ranks
from .report import (
    EXIT_ACCEPTANCE,
    EXIT_CRASH,
    EXIT_DEVICE_MISMATCH,
    EXIT_NO_GPU,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    REPORT_VERSION,
    Report,
    SectionFailed,
    SectionTimeout,
    Terminated,
    not_measured,
    now,
)
from .runner import Benchmark
from .split import independent_runs, split_worker
from .telemetry import Telemetry, amd_query, nvidia_query, xid_lines
from .verdict import verdict

__all__ = [
    "EXIT_ACCEPTANCE",
    "EXIT_CRASH",
    "EXIT_DEVICE_MISMATCH",
    "EXIT_NO_GPU",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_USAGE",
    "REPORT_VERSION",
    "Benchmark",
    "Report",
    "SectionFailed",
    "SectionTimeout",
    "Telemetry",
    "Terminated",
    "Transformer",
    "amd_query",
    "block_params",
    "card_list",
    "check_devices",
    "collectives_worker",
    "copy_bandwidth",
    "device_identity",
    "fp8_matmul",
    "fp8_rate",
    "independent_runs",
    "largest_fitting",
    "matmul_rate",
    "memory_needed",
    "memory_pattern",
    "not_measured",
    "now",
    "nvidia_query",
    "p2p_bandwidth",
    "per_card_worker",
    "run_ranks",
    "shape_for",
    "split_worker",
    "sustained",
    "verdict",
    "visible_cards",
    "xid_lines",
]
