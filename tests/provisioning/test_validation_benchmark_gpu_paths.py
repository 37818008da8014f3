"""The benchmark's paths that matter on a GPU host, checked on the CPU where they can be: the
Python the hosts run (3.9, 3.10), the kernel log's XID lines as the NVIDIA driver writes
them, throttle reasons per card, the fp8 product as ``torch._scaled_mm`` takes it, what a
one-card lot cannot measure, and scripts/validate_on_gpu.sh itself."""

from __future__ import annotations

import ast
import datetime
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.provisioning.shipped import modules
from tests.provisioning.test_validation_benchmark import (
    BENCHMARK,
    H200,
    NVIDIA_SMI,
    ROOT,
    checks,
    run,
)

SCRIPT = ROOT / "scripts" / "validate_on_gpu.sh"
# Recorded as the driver writes them: "PCI:" and domain:bus:device, no PCI function; drivers
# before R470 leave out the "PCI:".
DMESG = """\
[  912.504177] NVRM: Xid (PCI:0000:18:00): 79, pid='<unknown>', name=<unknown>, \
GPU has fallen off the bus.
[  913.100012] NVRM: Xid (PCI:0000:28:00): 13, pid=4242, name=python, Graphics SM Warp Exception
[  913.200000] NVRM: Xid (0000:18:00): 31, pid=4242, name=python, Ch 00000008, intr 00000000
[  914.000000] nvidia-nvswitch0: unrelated line
"""


@pytest.fixture(scope="module")
def bench() -> dict[str, Any]:
    """The program's functions, with their own globals (``fn.__globals__``)."""
    return runpy.run_path(str(BENCHMARK))


def test_now_runs_on_python_39_and_310_which_have_no_datetime_utc(
    bench: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(datetime, "UTC")  # as on 3.9 and 3.10: added in 3.11
    stamp = bench["now"]()
    assert stamp.endswith("+00:00")
    assert bench["Report"]("unused.json").data["started_at"]
    for source in modules(BENCHMARK).values():  # each module of the file that ships
        tree = ast.parse(source)
        aliases = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "UTC"]
        assert not aliases, [ast.unparse(n) for n in aliases]  # under any module alias


def test_xid_lines_are_counted_for_the_lots_cards_as_the_driver_names_them(
    bench: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "dmesg"
    fake.write_text(f"#!/bin/sh\ncat <<'EOF'\n{DMESG}EOF\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    # nvidia-smi's pci.bus_id, as the fake (and the real tool) write it
    count, lines = bench["xid_lines"](["00000000:18:00.0"])
    assert count == 2
    assert "fallen off the bus" in lines
    assert "Warp Exception" not in lines  # card 00000000:28:00.0 is not the lot's
    assert bench["xid_lines"](["00000000:28:00.0", "00000000:38:00.0"])[0] == 1
    assert bench["xid_lines"](["00000000:38:00.0"])[0] == 0


def test_hardware_throttling_on_one_card_is_that_cards_not_the_others(
    bench: dict[str, Any], tmp_path: Path
) -> None:
    args, thresholds = bench["parse"](["--out", str(tmp_path / "r.json"), "--cards", "2,3"])
    benchmark = bench["Benchmark"](args, thresholds)
    benchmark.stand_in = False  # as on the cards: the load is judged
    load = {
        "seconds": 60,
        "from": 100.0,
        "to": 160.0,
        "windows_tflops": [700.0, 690.0],
        "first_tflops": 700.0,
        "min_tflops": 690.0,
        "drop": 0.014,
    }
    benchmark.samples = [  # card 3 thermally throttled; card 2 only at its power cap (normal)
        {"t": 120.0, "cards": [{"index": 2, "throttle_reasons": 0x4}]},
        {"t": 120.0, "cards": [{"index": 3, "throttle_reasons": 0x40 | 0x4}]},
    ]
    benchmark.acceptance_per_card([{"sustained": load}, {"sustained": load}])
    card2, card3 = checks(benchmark.data, "sustained")
    assert (card2["card"], card2["passed"]) == (2, True)
    assert "throttling" not in card2["note"]
    assert (card3["card"], card3["passed"]) == (3, False)
    assert "hardware throttling: hw_thermal_slowdown" in card3["note"]


def test_the_fp8_product_is_called_as_scaled_mm_takes_it(
    bench: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = torch._scaled_mm
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def recording(*args: Any, **kwargs: Any) -> Any:
        calls.append((args, kwargs))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", recording)
    product = bench["fp8_matmul"](torch.device("cpu"), 32, torch.float8_e4m3fn)()
    ((a, b), kwargs) = calls[0]
    assert a.is_contiguous()
    assert b.stride() == (1, 32)  # column-major
    for scale in (kwargs["scale_a"], kwargs["scale_b"]):
        assert (scale.dtype, scale.dim()) == (torch.float32, 0)
    assert kwargs["out_dtype"] == torch.bfloat16
    assert kwargs["use_fast_accum"] is True  # the datasheet peak's accumulation
    assert product.dtype == torch.bfloat16
    assert torch.allclose(product.float(), a.float() @ b.float(), rtol=0.02, atol=0.1)
    with pytest.raises(ValueError, match="multiple of 16"):
        bench["fp8_matmul"](torch.device("cpu"), 40, torch.float8_e4m3fn)


def test_a_one_card_lot_says_what_it_cannot_measure(tmp_path: Path) -> None:
    code, report, stderr = run(
        tmp_path,
        "--skip",
        "per_card,split",
        "--nvidia-smi",
        NVIDIA_SMI,
        "--thresholds",
        json.dumps(H200),
        cards="0",
    )
    assert code == 0, stderr[-3000:]
    assert report["collectives"] == {"skipped": "one card: no collectives"}
    for check_id in ("collective_correct", "all_reduce", "p2p", "cards_match"):
        (check,) = checks(report, check_id)
        assert check["passed"] is None  # neither passed nor failed
        assert check["value"] == "not measured: one card in the lot (it takes two)"
    assert report["verdict"]["code"] == "two_cards_not_run"


def script(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "PYTHON": sys.executable,
        "OUT": str(tmp_path / "report.json"),
        "PATH": "/usr/bin:/bin",  # no nvidia-smi: one card unless --cards says otherwise
    }
    environment.pop("CARDS", None)
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=150,
        env=environment,
    )


def test_the_gpu_script_takes_its_cards_from_cards_and_summarises_the_report(
    tmp_path: Path,
) -> None:
    done = script(tmp_path, "--cards", "0,1", "--quick", "--skip", "per_card,split")
    report = json.loads((tmp_path / "report.json").read_text())
    # the visible-device variable is set to --cards' 0,1: not a device mismatch (3) but no
    # GPU on this machine (6), with the report summarised
    assert done.returncode == 6, done.stdout + done.stderr
    assert report["devices"]["cards"] == [0, 1]
    assert report["devices"]["variable"] == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert "FAIL gpu_visible" in done.stdout
    assert "exit: 6 accepted: False" in done.stdout


def test_the_gpu_script_never_summarises_an_earlier_runs_report(tmp_path: Path) -> None:
    stale = {"acceptance": {"checks": [], "passed": True}, "sections": {}, "exit_code": 0}
    (tmp_path / "report.json").write_text(json.dumps(stale))
    done = script(tmp_path, "--hypothesis", "not_a_hypothesis")  # a usage error: no report
    assert done.returncode == 2
    assert "accepted: True" not in done.stdout
    assert "no report at" in done.stderr
    assert not (tmp_path / "report.json").exists()


def test_the_memory_estimate_counts_what_a_training_step_holds_at_its_peak() -> None:
    """Weights, gradients and AdamW's moments (16 B a parameter) are not the peak: autocast's
    16-bit copy of the weights (2 B) and the optimizer step's temporaries (4 B) come on top,
    or a model chosen to "fit one card" runs out of memory there."""
    from provisioning.validation import benchmark

    hidden, layers = 4096, 32
    params = layers * benchmark.block_params(hidden) + 2 * hidden
    config = {"workload": "training", "micro_batch": 1, "seq_len": 1, "measured_precision": "bf16"}
    bytes_needed = benchmark.memory_needed(layers, hidden, config, 1, sharded=False)
    assert bytes_needed >= 22 * params
    fp32 = benchmark.memory_needed(
        layers, hidden, {**config, "measured_precision": "fp32"}, 1, False
    )
    assert bytes_needed - fp32 == pytest.approx(2 * params, rel=0.01)
