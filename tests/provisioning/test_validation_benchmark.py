"""The validation benchmark, run for real: two processes with gloo stand in for the cards."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARK = ROOT / "provisioning" / "validation" / "benchmark.py"


def run(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "report.json"
    # No Django on the hosts: the program must run with Django made unimportable.
    code = (
        "import runpy, sys; sys.modules['django'] = None; "
        f"sys.argv = ['benchmark.py', '--out', {str(out)!r}, '--quick', '--cards', '0,1', "
        f"*{list(args)!r}]; runpy.run_path({str(BENCHMARK)!r}, run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"},  # as the backends show it a lot
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, Any] = json.loads(out.read_text())
    assert result.stdout.strip().endswith(report["verdict"]["answer"])
    return report


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run(
        tmp_path_factory.mktemp("bench"),
        "--hypothesis",
        "shorter_step",
        "--extensions",
        "json,not_a_real_extension",
        "--smoke",
        "echo smoke-ok",
        "--expected-arch",
        "sm_90",
    )


def test_the_report_is_versioned_and_names_the_stack(report: dict[str, Any]) -> None:
    stack = report["stack"]
    assert report["version"] == 1
    assert stack["torch"].startswith("2.")
    assert stack["accelerator"] == "cpu"
    assert stack["arch_supported"] == "not measured: no GPU"  # stated, not invented
    assert stack["driver"] == "not measured: no GPU"
    assert [e["imported"] for e in stack["extensions"]] == [True, False]
    assert "ModuleNotFoundError" in stack["extensions"][1]["error"]
    assert all(check["ok"] for check in stack["kernel_check"])


def test_the_essential_operations_are_measured(report: dict[str, Any]) -> None:
    basics = report["essentials"]
    assert basics["matmul"]["tflops"] > 0
    assert basics["attention"]["forward_ms"] > 0
    assert basics["copy_bandwidth_gbps"] > 0
    reduce = basics["all_reduce"]
    assert reduce["correct"] is True
    assert reduce["world_size"] == 2
    assert all(size["bus_bandwidth_gbps"] > 0 for size in reduce["sizes"])
    sizes = reduce["sizes"][0]
    assert sizes["bus_bandwidth_gbps"] == pytest.approx(sizes["algorithm_bandwidth_gbps"], rel=0.01)
    assert basics["smoke"]["returncode"] == 0
    assert "smoke-ok" in basics["smoke"]["output_tail"]


def test_the_split_test_holds_data_precision_and_samples_constant(report: dict[str, Any]) -> None:
    split = report["split_test"]
    single, pair = split["one_card"], split["two_cards"]
    assert single["fits"] is True
    assert pair["mode"] == "data_parallel"
    assert split["samples"] == split["global_batch"] * split["steps"]
    assert len(pair["peak_memory_gb"]) == 2
    assert 0 < pair["exchange_share"] < 1
    assert single["median_step_ms"] > 0
    assert pair["imbalanced"] is False
    assert split["precision_applied"] == "fp32"  # on a CPU, and the report says so
    verdict = report["verdict"]
    assert verdict["hypothesis"] == "shorter_step"
    assert verdict["speedup"] == round(single["median_step_ms"] / pair["median_step_ms"], 2)
    assert "same precision" in " ".join(verdict["held_constant"])


def test_a_model_can_be_sharded_across_the_two_cards(tmp_path: Path) -> None:
    report = run(tmp_path, "--hypothesis", "make_possible", "--force-sharded")
    pair = report["split_test"]["two_cards"]
    assert pair["mode"] == "sharded"
    assert pair["exchange_share"] == 0.0  # FSDP exchanges inside the step; not timed apart
    assert report["verdict"]["answer"].startswith("Already fits one card")


def test_the_verdict_answers_each_hypothesis() -> None:
    verdict = runpy.run_path(str(BENCHMARK))["verdict"]

    fits = {"fits": True, "median_step_ms": 10.0, "samples_per_s": 100.0}
    pair = {"median_step_ms": 5.0, "samples_per_s": 190.0, "imbalanced": False}
    assert verdict("shorter_step", {"one_card": fits, "two_cards": pair})["answer"] == (
        "Step time 2.0× shorter on two cards."
    )
    assert (
        "1.9× the samples per second"
        in verdict("bigger_batch", {"one_card": fits, "two_cards": pair})["answer"]
    )
    too_big = {"fits": False, "error": "out of memory"}
    assert verdict("make_possible", {"one_card": too_big, "two_cards": pair})["answer"] == (
        "Does not fit one card; fits sharded on two."
    )
    one_gpu = {"mode": "skipped: only one GPU is visible"}
    assert verdict("shorter_step", {"one_card": fits, "two_cards": one_gpu})["answer"] == (
        "Not answered: the two-card part was skipped: only one GPU is visible."
    )
    lopsided = {**pair, "imbalanced": True}
    assert (
        "unbalanced" in verdict("shorter_step", {"one_card": fits, "two_cards": lopsided})["answer"]
    )
