"""The acceptance benchmark (report v2), run for real: two processes with gloo stand in for
the cards, fake nvidia-smi / amd-smi (tests/provisioning/fakes) for the vendor tools. Each
failure path has its test, named for it, and ends in a report that says why with the exit
status the provisioning job holds the lot on (never 0)."""

from __future__ import annotations

import ast
import json
import os
import re
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.provisioning.shipped import BENCHMARK, modules

ROOT = Path(__file__).resolve().parents[2]
FAKES = Path(__file__).resolve().parent / "fakes"
NVIDIA_SMI = str(FAKES / "nvidia-smi")
AMD_SMI = str(FAKES / "amd-smi")
H200 = {
    "sku": "H200",
    "memory_gib": 141,
    "memory_share_min": 0.9,
    "bf16_tflops": 989,
    "hbm_tbps": 4.8,
    "min_torch": "2.7",
    "min_cuda": "12.8",
    "min_driver": "570",
    "arch": "sm_90",
    "ecc_required": True,
}


def command(out: Path, *args: str) -> list[str]:
    # No Django on the hosts: the program must run with Django made unimportable.
    code = (
        "import runpy, sys; sys.modules['django'] = None; "
        f"sys.argv = ['benchmark.py', '--out', {str(out)!r}, '--quick', "
        f"*{list(args)!r}]; runpy.run_path({str(BENCHMARK)!r}, run_name='__main__')"
    )
    return [sys.executable, "-c", code]


def run(
    tmp_path: Path,
    *args: str,
    cards: str = "0,1",
    fault: str = "",
    env: dict[str, str] | None = None,
    timeout: float = 150,
) -> tuple[int, dict[str, Any], str]:
    out = tmp_path / "report.json"
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": cards, **(env or {})}
    environment.pop("GPULOTS_BENCH_FAULT", None)
    if fault:
        environment["GPULOTS_BENCH_FAULT"] = fault
    started = time.monotonic()
    done = subprocess.run(
        [*command(out, "--cards", cards, *args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
    )
    report: dict[str, Any] = json.loads(out.read_text())
    report["_wall"] = time.monotonic() - started
    assert report["exit_code"] == done.returncode, done.stderr[-3000:]
    return done.returncode, report, done.stderr


def checks(report: dict[str, Any], check_id: str) -> list[dict[str, Any]]:
    return [c for c in report["acceptance"]["checks"] if c["id"] == check_id]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A two-card lot of H200s (fake nvidia-smi) with its thresholds, a 7B order."""
    code, found, stderr = run(
        tmp_path_factory.mktemp("bench"),
        "--nvidia-smi",
        NVIDIA_SMI,
        "--thresholds",
        json.dumps(H200),
        "--params-billion",
        "7",
        "--seq-len",
        "4096",
        "--micro-batch",
        "2",
        "--extensions",
        "json,not_a_real_extension",
        "--smoke",
        "echo smoke-ok",
    )
    assert code == 0, stderr[-3000:]
    return found


def test_the_report_is_v2_complete_and_names_the_stack(report: dict[str, Any]) -> None:
    assert (report["version"], report["complete"], report["exit_code"]) == (2, True, 0)
    assert report["stand_in"] is True  # a CPU stood in, and the report says so
    assert report["started_at"]
    assert report["finished_at"]
    stack = report["stack"]
    assert stack["torch"].startswith("2.")
    assert stack["python"] == ".".join(str(p) for p in sys.version_info[:3])
    assert stack["interpreter"] == sys.executable
    assert stack["driver"] == "570.124.06"  # read from the (fake) nvidia-smi
    assert stack["arch_supported"] == "not measured: no GPU"
    assert [e["imported"] for e in stack["extensions"]] == [True, False]
    assert [k["ok"] for k in stack["kernel_check"]] == [True, True]
    assert all(s["status"] == "ok" for s in report["sections"].values()), report["sections"]
    assert report["essentials"]["smoke"]["returncode"] == 0
    # On a stand-in nothing about the cards' speed is passed or failed: null, not true.
    assert report["acceptance"]["passed"] is None
    assert report["acceptance"]["failed"] == []


def test_the_sku_memory_and_telemetry_come_from_the_fake_nvidia_smi(
    report: dict[str, Any],
) -> None:
    (sku0, sku1) = checks(report, "sku")
    assert (sku0["card"], sku0["value"], sku0["passed"]) == (0, "NVIDIA H200", True)
    assert sku1["card"] == 1
    (memory, _other) = checks(report, "memory")
    # 143771 MiB usable = 140.4 GiB (2**30) against the nameplate's 141, both shown
    assert memory["value"] == pytest.approx(140.4, abs=0.01)
    assert (memory["reference"], memory["unit"], memory["passed"]) == (141, "GiB usable", True)
    assert [c["passed"] for c in checks(report, "mig")] == [True, True]
    assert [c["passed"] for c in checks(report, "ecc")] == [True, True]
    assert [c["passed"] for c in checks(report, "persistence")] == [True, True]
    (driver,) = checks(report, "stack_driver")
    assert (driver["value"], driver["passed"]) == ("570.124.06", True)
    (cuda,) = checks(report, "stack_cuda")
    assert cuda["passed"] is None
    assert cuda["value"].startswith("not measured: ")
    telemetry = report["telemetry"]
    assert telemetry["source"] == "nvidia-smi"
    assert [c["index"] for c in telemetry["before"]["cards"]] == [0, 1]
    assert telemetry["before"]["cards"][0]["throttle_reasons"] == 0
    assert telemetry["after"]["cards"][1]["ecc.errors.uncorrected.volatile.total"] == 0
    assert telemetry["samples"], "sampled during the per-card load"
    assert {c["index"] for c in telemetry["samples"][0]["cards"]} == {0, 1}
    assert [c["passed"] for c in checks(report, "ecc_errors")] == [True, True]
    # The tool lists GPUs this PyTorch cannot use: said, though without --require-gpu
    (visible,) = checks(report, "gpu_visible")
    assert visible["passed"] is None
    assert "torch.cuda.is_available() is false" in visible["note"]


def test_each_card_is_measured_on_its_own(report: dict[str, Any]) -> None:
    cards = report["per_card"]
    assert [c["rank"] for c in cards] == [0, 1]
    for card in cards:
        assert card["matmul_bf16"]["tflops"] > 0
        assert card["hbm"]["gbps"] > 0
        pattern = card["memory_pattern"]
        assert pattern["errors"] == 0
        assert pattern["tested_bytes"] > 0
        assert len(card["sustained"]["windows_tflops"]) >= 1
    for check_id in ("matmul_bf16", "hbm", "memory_pattern", "sustained"):
        assert [c["card"] for c in checks(report, check_id)] == [0, 1]
    (matmul, _other) = checks(report, "matmul_bf16")
    assert matmul["reference"] == 989
    assert matmul["passed"] is None  # a CPU is not compared with an H200's datasheet
    assert [c["passed"] for c in checks(report, "memory_pattern")] == [True, True]
    assert len(checks(report, "cards_match")) == 2


def test_the_collectives_are_swept_checked_and_busbw_is_nccl_tests(
    report: dict[str, Any],
) -> None:
    collectives = report["collectives"]
    assert collectives["world_size"] == 2
    assert collectives["transport"].startswith("not measured: ")
    assert collectives["p2p"]["0_to_1_gbps"].startswith("not measured: ")
    for name, factor in (("all_reduce", 1.0), ("all_gather", 0.5), ("reduce_scatter", 0.5)):
        rows = collectives[name]
        assert len({r["bytes"] for r in rows}) >= 2
        assert all(r["correct"] for r in rows)
        for row in rows:  # n = 2: all_reduce busbw = algbw * 2(n-1)/n, the others (n-1)/n
            assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * factor, rel=0.01)
    assert {r["place"] for r in collectives["all_gather"]} == {"in", "out"}
    assert {r["place"] for r in collectives["reduce_scatter"]} == {"in", "out"}
    (correct,) = checks(report, "collective_correct")
    assert (correct["value"], correct["passed"]) == (0, True)


def test_the_model_is_sized_from_the_order_and_scaled_down_here(report: dict[str, Any]) -> None:
    model = report["model"]
    ordered = model["ordered"]
    assert ordered["hidden"] == 4096
    assert 6.5e9 < ordered["params"] < 7.5e9  # the order's 7B, as transformer blocks
    assert model["scaled_down"] is True
    assert "CPU stand-in" in model["why"]
    assert "7.05B" in model["why"]
    assert model["params"] < 1e6
    assert (model["precision"], model["measured_precision"]) == ("bf16", "fp32")
    assert model["seq_len"] <= 4096
    assert model["micro_batch"] == 2
    verdict = report["verdict"]
    assert verdict["scaled_down"] is True
    assert verdict["stand_in"] is True
    assert "scaled-down model" in verdict["measured"]
    assert "CPU stand-in" in verdict["measured"]


def test_data_parallel_exposes_the_exchange_as_ddp_minus_no_sync(report: dict[str, Any]) -> None:
    split = report["split"]
    single, pair = split["one_card"], split["two_cards"]
    assert single["fits"] is True
    assert single["accumulation"] == 2
    assert pair["mode"] == "data_parallel"
    assert pair["global_batch"] == single["global_batch"] == 4
    exposed = max(0.0, (pair["median_step_ms"] - pair["no_sync_step_ms"]) / 1000)
    assert pair["exposed_exchange_seconds"] == pytest.approx(exposed, abs=1e-6)
    assert split["exposed_exchange_seconds"] == pair["exposed_exchange_seconds"]
    assert pair["exchange_share"] == pytest.approx(
        exposed / (pair["median_step_ms"] / 1000), abs=1e-3
    )
    assert len(pair["compute_ms"]) == 2
    assert pair["compute_imbalance"] >= 1
    verdict = report["verdict"]
    assert verdict["answer"] in ("yes", "no")
    assert verdict["speedup"] == round(single["median_step_ms"] / pair["median_step_ms"], 2)
    assert any("same precision" in h for h in verdict["held_constant"])


def test_bigger_batch_doubles_the_global_batch_and_amd_smi_is_read(tmp_path: Path) -> None:
    code, report, stderr = run(
        tmp_path,
        "--hypothesis",
        "bigger_batch",
        "--amd-smi",
        AMD_SMI,
        "--thresholds",
        json.dumps({"sku": "MI300X", "memory_gib": 192, "min_rocm": "6.2"}),
    )
    assert code == 0, stderr[-3000:]
    split = report["split"]
    assert split["one_card"]["global_batch"] == 1
    assert split["two_cards"]["global_batch"] == 2  # twice the global batch, same per card
    assert report["verdict"]["code"] in ("bigger_batch", "bigger_batch_slower")
    assert report["telemetry"]["source"] == "amd-smi"
    (sku, _other) = checks(report, "sku")
    assert (sku["value"], sku["passed"]) == ("AMD Instinct MI300X", True)
    (memory, _other) = checks(report, "memory")
    assert memory["value"] == pytest.approx(191.98, abs=0.01)
    assert memory["passed"] is True
    assert [c["passed"] for c in checks(report, "ecc")] == [True, True]


def test_make_possible_shards_with_fsdp2_and_fp8_is_measured_in_bf16(tmp_path: Path) -> None:
    code, report, stderr = run(
        tmp_path,
        "--hypothesis",
        "make_possible",
        "--force-sharded",
        "--precision",
        "fp8",
        "--params-billion",
        "70",
        "--thresholds",
        json.dumps({"memory_gib": 80}),
    )
    assert code == 0, stderr[-3000:]
    pair = report["split"]["two_cards"]
    assert pair["mode"] == "sharded"
    assert pair["fits"] is True
    assert pair["exposed_exchange_seconds"].startswith("not measured: ")
    model = report["model"]
    assert (model["precision"], model["measured_precision"]) == ("fp8", "fp32")
    assert "bf16 is the nearest" in model["precision_why"]
    possible = report["split"]["make_possible"]
    assert 0 < possible["one_card_max_layers"] < possible["two_cards_max_layers"]
    verdict = report["verdict"]
    assert "Ordered in fp8, measured in fp32" in verdict["measured"]
    assert verdict["code"] == "already_fits_one_card"  # the scaled-down model fits one


def test_out_of_memory_on_one_rank_ends_the_two_card_run_at_once(tmp_path: Path) -> None:
    code, report, stderr = run(
        tmp_path,
        "--skip",
        "per_card,collectives",
        "--section-budgets",
        json.dumps({"split_two_cards": 60}),
        fault="oom_two_cards",
    )
    assert code == 0, stderr[-3000:]  # a result, not a crash: the model does not fit
    pair = report["split"]["two_cards"]
    assert pair["fits"] is False
    assert pair["per_rank"][1]["error"].startswith("out of memory in a step")
    assert report["sections"]["split"]["seconds"] < 30  # not left to the group's timeout
    verdict = report["verdict"]
    assert verdict["answer"] == "not_answered"
    assert verdict["measured"].startswith("Not answered: the two-card run failed: ")


def test_no_gpu_with_require_gpu_is_an_acceptance_failure_exit_6(tmp_path: Path) -> None:
    code, report, stderr = run(tmp_path, "--require-gpu", env={"PATH": "/usr/bin:/bin"})
    assert code == 6
    assert report["acceptance"]["passed"] is False
    (check,) = checks(report, "gpu_visible")
    assert check["passed"] is False
    assert check["note"].startswith("no GPU visible")
    assert "split" not in report
    assert "per_card" not in report
    assert "no GPU visible" in stderr


def test_no_gpu_while_nvidia_smi_lists_gpus_says_the_wheel_cannot_use_them(
    tmp_path: Path,
) -> None:
    code, report, _stderr = run(
        tmp_path, "--require-gpu", "--nvidia-smi", NVIDIA_SMI, "--thresholds", json.dumps(H200)
    )
    assert code == 6
    (reason,) = report["acceptance"]["failed"]
    assert reason.startswith("gpu_visible: no GPU visible to PyTorch: nvidia-smi lists 2 GPU(s)")
    assert "NVIDIA H200, driver 570.124.06" in reason
    assert "torch.cuda.is_available() is false" in reason
    assert "the wheel does not match the driver" in reason
    assert report["error"] in reason


def test_one_device_on_a_two_card_lot_fails_device_count_exit_3(tmp_path: Path) -> None:
    code, report, _stderr = run(tmp_path, "--expect-devices", "2", cards="3")
    assert code == 3
    (check,) = checks(report, "device_count")
    assert (check["value"], check["reference"], check["passed"]) == (1, 2, False)
    assert report["acceptance"]["passed"] is False
    assert report["error"] == report["devices"]["problem"]
    assert not {"per_card", "collectives", "split", "verdict"} & set(report)


def test_wrong_devices_an_h100_for_an_h200_kind_fails_sku_exit_4(tmp_path: Path) -> None:
    code, report, stderr = run(
        tmp_path,
        "--nvidia-smi",
        NVIDIA_SMI,
        "--thresholds",
        json.dumps(H200),
        "--skip",
        "per_card,collectives,split",
        env={"FAKE_SMI_NAME": "NVIDIA H100 80GB HBM3", "FAKE_SMI_MEMORY_MIB": "81559"},
    )
    assert code == 4
    assert report["acceptance"]["passed"] is False
    failed = report["acceptance"]["failed"]
    assert "sku (card 0): the card is NVIDIA H100 80GB HBM3; the kind expects H200" in failed
    assert any(f.startswith("memory (card 1): usable 79.6 GiB") for f in failed)
    assert "acceptance failed: sku (card 0)" in stderr
    assert report["complete"] is True
    assert "verdict" in report


def test_wrong_all_reduce_fails_collective_correct_exit_4(tmp_path: Path) -> None:
    code, report, _stderr = run(tmp_path, "--skip", "per_card,split", fault="wrong_all_reduce")
    assert code == 4
    assert [r["correct"] for r in report["collectives"]["all_reduce"]] == [False] * len(
        report["collectives"]["all_reduce"]
    )
    assert all(r["correct"] for r in report["collectives"]["all_gather"])
    (check,) = checks(report, "collective_correct")
    assert check["passed"] is False
    assert check["note"].startswith("wrong values from all_reduce")
    assert report["acceptance"]["failed"][0].startswith("collective_correct: wrong values")
    assert report["essentials"]["all_reduce"]["correct"] is False


def test_a_rank_that_raises_sends_its_traceback_and_the_rest_still_runs(tmp_path: Path) -> None:
    code, report, _stderr = run(tmp_path, "--skip", "split", fault="rank_raises")
    assert code == 4  # its checks could not be made: failed, with the reason
    section = report["sections"]["collectives"]
    assert section["status"] == "failed"
    assert "rank 1 raised" in section["error"]
    assert "Traceback (most recent call last)" in section["traceback"]
    assert "injected fault: rank 1 raises" in section["traceback"]
    assert section["seconds"] < 30  # not left waiting for the stuck rank 0
    (check,) = checks(report, "collective_correct")
    assert check["passed"] is False
    assert "collectives section failed" in check["note"]
    for kept in ("per_card", "verdict"):  # the other sections were kept
        assert kept in report
    assert report["sections"]["per_card"]["status"] == "ok"
    assert report["sections"]["verdict"]["status"] == "ok"


def test_a_rank_that_hangs_is_cut_at_the_sections_budget_exit_5(tmp_path: Path) -> None:
    code, report, _stderr = run(
        tmp_path,
        "--section-budgets",
        json.dumps({"collectives": 12}),
        "--skip",
        "per_card,split",
        fault="rank_hangs",
    )
    assert code == 5
    section = report["sections"]["collectives"]
    assert section["status"] == "timeout"
    assert "rank(s) 0,1 still running after 12 s" in section["error"]
    assert 12 <= section["seconds"] < 25
    assert report["complete"] is True
    assert report["sections"]["verdict"]["status"] == "ok"
    assert report["_wall"] < 100


def test_the_whole_runs_timeout_is_kept_and_reported(tmp_path: Path) -> None:
    code, report, _stderr = run(
        tmp_path, "--timeout", "14", "--skip", "per_card", fault="rank_hangs", timeout=60
    )
    assert code == 5
    statuses = {name: s["status"] for name, s in report["sections"].items()}
    assert "timeout" in statuses.values()
    assert report["_wall"] < 40


def test_the_report_is_written_as_it_goes_and_a_killed_run_leaves_valid_json(
    tmp_path: Path,
) -> None:
    out = tmp_path / "report.json"
    process = subprocess.Popen(
        command(out, "--cards", "0,1"),
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        partial: dict[str, Any] = {}
        while time.monotonic() < deadline:
            if out.exists():
                partial = json.loads(out.read_text())  # always whole: written atomically
                if "per_card" in partial.get("sections", {}):
                    break
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    report = json.loads(out.read_text())
    assert partial
    assert report["complete"] is False
    assert report["finished_at"] is None
    assert report["sections"]["devices"]["status"] == "ok"
    assert "stack" in report


def test_a_usage_error_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        command(tmp_path / "r.json", "--cards", "0,1", "--thresholds", "not json"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--thresholds / --section-budgets: not JSON" in done.stderr


def test_the_program_is_python39_compatible() -> None:
    for module, source in modules(BENCHMARK).items():  # each module of the file that ships
        tree = ast.parse(source, feature_version=(3, 9))  # no match, no parenthesised with
        assert "datetime.UTC" not in source, module
        assert "import UTC" not in source, module
        assert "from __future__ import annotations" in source, module
        for node in ast.walk(tree):
            # X | Y is fine in annotations (not evaluated with the __future__ import), never
            # in an isinstance() or a default evaluated at run time.
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance":
                assert not isinstance(node.args[1], ast.BinOp), ast.unparse(node)
            if isinstance(node, ast.Call):
                names = {k.arg for k in node.keywords}
                assert "strict" not in names, ast.unparse(node)  # zip(strict=) is 3.10
        # 3.10 built-ins
        assert not re.search(r"\.bit_count\(|\baiter\(|\banext\(", source), module


def test_the_verdict_answers_each_hypothesis_in_plain_words() -> None:
    verdict = runpy.run_path(str(BENCHMARK))["verdict"]
    model = {
        "params": 7_000_000_000,
        "layers": 32,
        "hidden": 4096,
        "precision": "bf16",
        "measured_precision": "bf16",
        "seq_len": 2048,
        "micro_batch": 1,
        "scaled_down": False,
    }
    fits = {"fits": True, "median_step_ms": 10.0, "samples_per_s": 100.0, "peak_memory_gib": 60}
    pair = {
        "mode": "data_parallel",
        "median_step_ms": 5.0,
        "samples_per_s": 190.0,
        "imbalanced": False,
        "exposed_exchange_seconds": 0.001,
        "exchange_share": 0.2,
    }
    found = verdict("shorter_step", {"one_card": fits, "two_cards": pair}, model, False)
    assert (found["answer"], found["code"], found["speedup"]) == ("yes", "shorter", 2.0)
    assert "2.0x shorter" in found["measured"]
    assert "Exposed exchange 1.0 ms" in found["measured"]
    slower = {**pair, "median_step_ms": 11.0}
    found = verdict("bigger_batch", {"one_card": fits, "two_cards": slower}, model, False)
    assert (found["answer"], found["code"]) == ("yes", "bigger_batch")
    found = verdict(
        "bigger_batch",
        {"one_card": fits, "two_cards": {**pair, "median_step_ms": 20.0}},
        model,
        False,
    )
    assert found["answer"] == "no"
    too_big = {"fits": False, "error": "out of memory"}
    sharded = {**pair, "mode": "sharded", "fits": True, "peak_memory_gib": [70, 70]}
    found = verdict("make_possible", {"one_card": too_big, "two_cards": sharded}, model, False)
    assert (found["answer"], found["code"]) == ("yes", "fits_two_cards_only")
    found = verdict("make_possible", {"one_card": fits, "two_cards": sharded}, model, False)
    assert (found["answer"], found["code"]) == ("no", "already_fits_one_card")
    one_gpu = {"mode": "skipped: only one card in the lot"}
    found = verdict("shorter_step", {"one_card": fits, "two_cards": one_gpu}, model, False)
    assert found["answer"] == "not_answered"
    assert "skipped: only one card" in found["measured"]
    lopsided = {**pair, "imbalanced": True}
    found = verdict("shorter_step", {"one_card": fits, "two_cards": lopsided}, model, False)
    assert "unbalanced" in found["measured"]
    scaled = {**model, "scaled_down": True, "why": "too big", "measured_precision": "fp32"}
    found = verdict("shorter_step", {"one_card": fits, "two_cards": pair}, scaled, True)
    assert "scaled-down model: too big" in found["measured"]
    assert "CPU stand-in" in found["measured"]
    assert "measured in fp32" in found["measured"]


def test_a_sigterm_from_the_hosts_timeout_writes_the_report_and_exits_5(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    process = subprocess.Popen(
        command(out, "--cards", "0,1"),
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "0,1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if out.exists() and "per_card" in json.loads(out.read_text())["sections"]:
                break
            time.sleep(0.05)
        process.send_signal(signal.SIGTERM)  # what `timeout` sends the benchmark
        code = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    report = json.loads(out.read_text())
    assert code == 5
    assert (report["exit_code"], report["complete"]) == (5, False)
    assert report["error"] == "terminated (SIGTERM) during section per_card"
    assert report["sections"]["per_card"]["status"] == "timeout"
