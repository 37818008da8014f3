"""``gpulots split-test``: the researcher's own job on one card, then two, run for real.

Two gloo processes stand in for the cards (the report says ``stand_in``). The jobs are
ordinary training scripts (tests/provisioning/split_jobs): a plain DDP loop, the Hugging Face
Trainer with a tiny GPT-2, Lightning. Every figure asserted here comes from the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.provisioning.shipped import TOOL

ROOT = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).resolve().parent / "split_jobs"
SHORT = ["--warmup", "2", "--steps", "4", "--profile-steps", "2"]


def split_test(
    tmp_path: Path,
    *args: str,
    job: str = "plain_loop.py",
    env: dict[str, str] | None = None,
    timeout: float = 240,
    launch: list[str] | None = None,
    job_args: list[str] | None = None,
) -> tuple[int, dict[str, Any], subprocess.CompletedProcess[str]]:
    out = tmp_path / "report.json"
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": "0,1", **(env or {})}
    for name in ("GPULOTS_TOKEN", "GPULOTS_PER_RANK_BATCH", "OMP_NUM_THREADS"):
        environment.pop(name, None)
    # No Django where the tool runs: it must work with the standard library alone.
    done = subprocess.run(
        [
            sys.executable,
            str(TOOL),
            "split-test",
            "--out",
            str(out),
            "--logs",
            str(tmp_path),
            *args,
            "--",
            *(launch or [sys.executable]),
            *(job_args or []),
            str(JOBS / job),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment,
        cwd=tmp_path,
    )
    report = json.loads(out.read_text()) if out.exists() else {}
    return done.returncode, report, done


def test_split_test_measures_a_plain_loop_on_one_card_then_two(tmp_path: Path) -> None:
    code, report, done = split_test(tmp_path, "--global-batch", "32", *SHORT)

    assert code == 0, done.stderr
    assert report["version"] == 2
    assert report["kind"] == "split_test"
    assert report["complete"] is True
    assert report["stand_in"] is True
    one, two = report["split"]["one_card"], report["split"]["two_cards"]
    assert (one["world"], one["global_batch"], one["per_rank_batch"]) == (1, 32, 32)
    assert (two["world"], two["global_batch"], two["per_rank_batch"]) == (2, 32, 16)
    assert one["cards"] == "0"
    assert two["cards"] == "0,1"
    for run in (one, two):
        assert run["status"] == "ok"
        assert run["fits"] is True
        assert run["marked_by"] == "optimizer.step (automatic)"
        assert run["steps_measured"] == 4
        assert run["median_step_ms"] > 0
        assert run["samples_per_s"] == pytest.approx(32 / (run["median_step_ms"] / 1000), 1e-3)
        assert run["backend"] == "gloo"
        assert run["memory_source"] == "process_peak_rss_gib"
    assert len(two["per_rank"]) == 2
    assert [r["rank"] for r in two["per_rank"]] == [0, 1]
    assert two["median_step_ms"] == max(r["median_step_ms"] for r in two["per_rank"])
    assert len(two["peak_memory_gib"]) == 2
    assert all(p > 0 for p in two["peak_memory_gib"])
    # The exchange: gloo's all-reduces seen by the profiler in the profiled steps.
    assert two["collective_source"] == "profiler: gloo operations"
    assert 0 < two["exchange_share"] < 1, two["per_rank"]
    assert two["exchange_ms"] == pytest.approx(two["exchange_share"] * two["median_step_ms"], 1e-2)
    assert all(r["collectives_seen"] > 0 for r in two["per_rank"])
    assert report["split"]["exchange_share"] == two["exchange_share"]
    verdict = report["verdict"]
    assert verdict["hypothesis"] == "shorter_step"
    speedup = round(one["median_step_ms"] / two["median_step_ms"], 2)
    assert verdict["speedup"] == speedup
    assert verdict["code"] == ("shorter" if speedup >= 1.1 else "not_shorter")
    assert "CPU stand-in" in verdict["measured"]
    assert "the same global batch (32 samples a step)" in verdict["held_constant"]
    assert verdict["measured"] in done.stdout
    assert (tmp_path / "split-test-one_card.log").exists()


def test_split_test_leaves_the_launching_to_a_command_that_does_its_own(tmp_path: Path) -> None:
    code, report, done = split_test(
        tmp_path,
        "--launcher",
        "none",
        "--global-batch",
        "16",
        *SHORT,
        launch=[sys.executable, "-m", "torch.distributed.run", "--standalone"],
        job_args=["--nproc-per-node", "{nproc}"],
    )

    assert code == 0, done.stderr
    one, two = report["split"]["one_card"], report["split"]["two_cards"]
    assert one["command"][:6] == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "1",
    ]
    assert two["command"][5] == "2"
    assert [r["rank"] for r in two["per_rank"]] == [0, 1]
    assert two["status"] == "ok"
    assert two["per_rank_batch"] == 8


def test_split_test_finds_the_ranks_of_a_job_that_spawns_its_own_processes(
    tmp_path: Path,
) -> None:
    code, report, done = split_test(
        tmp_path, "--launcher", "none", "--global-batch", "16", *SHORT, job="spawn_job.py"
    )

    assert code == 0, done.stderr + (tmp_path / "split-test-two_cards.log").read_text()[-2000:]
    two = report["split"]["two_cards"]
    # No RANK in their environment: each is known by its rank in the process group.
    assert [r["rank"] for r in two["per_rank"]] == [0, 1]
    assert two["status"] == "ok"
    assert two["backend"] == "gloo"


def test_split_test_uses_the_researchers_own_step_marks(tmp_path: Path) -> None:
    code, report, done = split_test(
        tmp_path, "--global-batch", "16", *SHORT, env={"SPLIT_JOB_MARK": "step"}
    )

    assert code == 0, done.stderr
    for name in ("one_card", "two_cards"):
        assert report["split"][name]["marked_by"] == "gpulots.step()"
        assert report["split"][name]["steps_measured"] == 4


def test_split_test_marks_a_step_within_a_step_once(tmp_path: Path) -> None:
    trace = tmp_path / "iterations"
    code, report, done = split_test(
        tmp_path,
        "--global-batch",
        "16",
        *SHORT,
        env={"SPLIT_JOB_NESTED_STEP": "1", "SPLIT_JOB_TRACE": str(trace)},
    )

    assert code == 0, done.stderr
    needed = 2 + 4 + (2 + 1)  # warm-up, timed, the profiler's warm-up and its steps
    for world in (1, 2):
        for rank in range(world):
            # Marked twice an iteration, the run would have been ended halfway.
            assert int(Path(f"{trace}.{world}.{rank}").read_text()) >= needed
    assert report["split"]["two_cards"]["steps_measured"] == 4


def test_split_test_refuses_a_command_that_launches_itself(tmp_path: Path) -> None:
    code, report, done = split_test(
        tmp_path,
        "--global-batch",
        "16",
        launch=[sys.executable, "-m", "torch.distributed.run", "--standalone"],
    )

    assert code == 2
    assert "torch.distributed.run launches the processes itself" in done.stderr
    assert "--launcher none" in done.stderr
    assert report == {}


def test_split_test_runs_a_hugging_face_trainer_job(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    code, report, done = split_test(
        tmp_path, "--global-batch", "8", *SHORT, job="hf_trainer_job.py"
    )

    assert code == 0, done.stderr + (tmp_path / "split-test-two_cards.log").read_text()[-2000:]
    one, two = report["split"]["one_card"], report["split"]["two_cards"]
    assert one["marked_by"] == two["marked_by"] == "Hugging Face Trainer callback"
    assert (one["per_rank_batch"], two["per_rank_batch"]) == (8, 4)
    assert two["status"] == "ok"
    assert two["exchange_share"] > 0
    assert report["verdict"]["answer"] in ("yes", "no")


def test_split_test_runs_a_lightning_job_without_a_callback(tmp_path: Path) -> None:
    pytest.importorskip("pytorch_lightning")
    code, report, done = split_test(
        tmp_path, "--global-batch", "64", *SHORT, job="lightning_job.py"
    )

    assert code == 0, done.stderr + (tmp_path / "split-test-two_cards.log").read_text()[-2000:]
    two = report["split"]["two_cards"]
    assert two["marked_by"] == "optimizer.step (automatic)"
    assert two["backend"] == "gloo"
    assert two["steps_measured"] == 4
    assert two["collective_source"] == "profiler: gloo operations"


def test_split_test_reports_an_out_of_memory_on_one_card_as_a_result(tmp_path: Path) -> None:
    code, report, done = split_test(
        tmp_path,
        "--hypothesis",
        "make_possible",
        "--global-batch",
        "16",
        *SHORT,
        env={"SPLIT_JOB_OOM_ON_ONE_CARD": "1"},
    )

    assert code == 0, done.stderr
    one, two = report["split"]["one_card"], report["split"]["two_cards"]
    assert one["status"] == "oom"
    assert one["fits"] is False
    assert "out of memory" in one["error"]
    assert "20.00 GiB" in one["error"]
    assert two["status"] == "ok"
    assert two["fits"] is True
    assert report["sections"]["one_card"]["status"] == "ok"
    assert report["verdict"]["answer"] == "yes"
    assert report["verdict"]["code"] == "fits_two_cards_only"
    assert "does not fit one card" in report["verdict"]["measured"]


def test_split_test_cuts_a_hang_at_its_timeout_and_reports_it(tmp_path: Path) -> None:
    started = time.monotonic()
    code, report, done = split_test(
        tmp_path,
        "--global-batch",
        "16",
        *SHORT,
        "--timeout",
        "25",
        env={"SPLIT_JOB_HANG_RANK": "1", "SPLIT_JOB_RUN": str(tmp_path)},
    )

    assert code == 5, done.stderr
    assert time.monotonic() - started < 120
    two = report["split"]["two_cards"]
    assert two["status"] == "timeout"
    assert "cut after 25 s" in two["error"]
    assert report["sections"]["two_cards"]["status"] == "timeout"
    assert report["verdict"]["code"] == "timeout"
    assert report["verdict"]["answer"] == "not_answered"
    assert report["complete"] is True
    assert report["exit_code"] == 5
    assert run_processes(str(tmp_path)) == [], "a process of the cut run was left behind"


def run_processes(run: str) -> list[int]:
    """The job's processes still alive that this run started (SPLIT_JOB_RUN in their
    environment): another test's job running beside it is not one of them."""
    found = subprocess.run(
        ["pgrep", "-f", str(JOBS / "plain_loop.py")], capture_output=True, text=True
    )
    mine = []
    for pid in found.stdout.split():
        try:
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue  # ended since
        if f"SPLIT_JOB_RUN={run}".encode() in environment:
            mine.append(int(pid))
    return mine


def test_split_test_flags_a_rank_that_computes_longer(tmp_path: Path) -> None:
    code, report, done = split_test(
        tmp_path, "--global-batch", "16", *SHORT, env={"SPLIT_JOB_SLOW_RANK": "1"}
    )

    assert code == 0, done.stderr
    two = report["split"]["two_cards"]
    fast, slow = two["compute_ms"]
    # Rank 1 sleeps 80 ms a step: rank 0 waits for it in the all-reduce.
    assert slow - fast > 40
    assert two["compute_imbalance"] > 1.15
    assert two["imbalanced"] is True
    assert "unbalanced" in report["verdict"]["measured"]


def test_split_test_keeps_the_environments_own_sitecustomize(tmp_path: Path) -> None:
    own = tmp_path / "own"
    own.mkdir()
    marker = tmp_path / "own-sitecustomize-ran"
    (own / "sitecustomize.py").write_text(
        f"import os\nopen({str(marker)!r} + '.' + str(os.getpid()), 'w').close()\n"
    )
    code, report, done = split_test(
        tmp_path, "--global-batch", "16", *SHORT, env={"PYTHONPATH": str(own)}
    )

    assert code == 0, done.stderr
    assert list(tmp_path.glob("own-sitecustomize-ran.*")), "the environment's was shadowed"
    assert report["split"]["two_cards"]["status"] == "ok"


def test_split_test_says_when_the_command_makes_too_few_steps(tmp_path: Path) -> None:
    job = tmp_path / "short_job.py"
    job.write_text(
        (JOBS / "plain_loop.py")
        .read_text()
        .replace('range(int(os.environ["GPULOTS_MAX_STEPS"]))', "range(3)")
    )
    code, report, _done = split_test(tmp_path, "--global-batch", "16", *SHORT, job=str(job))

    assert code == 1
    one = report["split"]["one_card"]
    assert one["status"] == "failed"
    assert "ended after 3 steps" in one["error"]
    assert "needs 9" in one["error"]
    assert report["verdict"]["code"] == "error"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "say how the batch is set"),
        (("--hypothesis", "shorter_step", "--per-card-batch", "8"), "same global batch"),
        (("--hypothesis", "bigger_batch", "--global-batch", "8"), "same batch per card"),
        (("--global-batch", "7"), "an even number"),
        (("--global-batch", "-4"), "--global-batch: at least 1 sample"),
        (("--hypothesis", "bigger_batch", "--per-card-batch", "0"), "at least 1 sample"),
    ],
)
def test_split_test_refuses_an_unclear_batch_before_running(
    tmp_path: Path, args: tuple[str, ...], says: str
) -> None:
    code, report, done = split_test(tmp_path, *args)

    assert code == 2
    assert says in done.stderr
    assert report == {}
    assert not (tmp_path / "split-test-one_card.log").exists()


def test_the_hooks_do_nothing_outside_a_split_test() -> None:
    code = (
        f"import sys; sys.path.insert(0, {str(TOOL)!r}); import gpulots\n"
        "with gpulots.step():\n    pass\n"
        "gpulots.mark_step(); print(gpulots._recorder)"
    )
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GPULOTS_")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


class _Span:
    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end


class _Event:
    def __init__(
        self,
        name: str,
        device: str,
        start: float,
        end: float,
        *,
        note: bool = False,
        thread: int = 1,
    ) -> None:
        self.name, self.device_type, self.time_range = name, device, _Span(start, end)
        self.is_user_annotation, self.thread = note, thread


class _Profile:
    def __init__(self, events: list[_Event]) -> None:
        self._events = events

    def events(self) -> list[_Event]:
        return self._events


def recorder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    sys.path.insert(0, str(TOOL))
    try:
        import gpulots  # type: ignore[import-not-found]  # the tool, by its own name
    finally:
        sys.path.remove(str(TOOL))
    for name, value in (("GPULOTS_WARMUP", "1"), ("GPULOTS_STEPS", "1"), ("LOCAL_RANK", "0")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GPULOTS_PROFILE_STEPS", "2")
    found = gpulots._Recorder(str(tmp_path), 0)
    found.window["first_step"] = 0
    found.durations = [0.010, 0.010]
    return found


def test_split_test_counts_nccl_kernels_on_the_card_once_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A unit check of the GPU path, which no GPU here can run: the profiler's device
    kernels named nccl (NCCL, and RCCL, which keeps the names) are the exchange, counted
    once where they overlap; the CPU side of a collective and compute kernels are not."""
    found = recorder(monkeypatch, tmp_path)
    found._trace_ready(
        _Profile(
            [
                _Event("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)", "DeviceType.CUDA", 0, 3000),
                _Event("ncclDevKernel_AllGather_RING_LL(...)", "DeviceType.CUDA", 2000, 4000),
                _Event("nccl:all_reduce", "DeviceType.CPU", 0, 9000),
                _Event("nccl:all_reduce", "DeviceType.CUDA", 0, 9000, note=True),
                _Event("ampere_bf16_s16816gemm_bf16_128x128", "DeviceType.CUDA", 3000, 9000),
                _Event("aten::mm", "DeviceType.CPU", 3000, 9000),
            ]
        )
    )

    assert found.window["source"] == "profiler: NCCL/RCCL kernels"
    assert found.window["collectives"] == 2
    assert found.window["collective_seconds"] == pytest.approx(0.004)
    # 1 ms of it under the matrix product: hidden, not exposed.
    assert found.window["exposed_seconds"] == pytest.approx(0.003)
    assert found.window["compute_seconds"] == pytest.approx(0.006)
    assert found.window["step_seconds"] == pytest.approx(0.020)


def test_on_a_card_the_hosts_calls_into_the_exchange_take_no_kernel_from_the_compute(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The host's c10d::allreduce_ is on the CPU's timeline: a compute kernel the card runs
    meanwhile is compute all the same, and hides the NCCL kernel it overlaps."""
    found = recorder(monkeypatch, tmp_path)
    found._trace_ready(
        _Profile(
            [
                _Event("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(...)", "DeviceType.CUDA", 0, 3000),
                _Event("ampere_bf16_s16816gemm_bf16_128x128", "DeviceType.CUDA", 2000, 5000),
                _Event("c10d::allreduce_", "DeviceType.CPU", 0, 5000),
            ]
        )
    )

    assert found.window["compute_seconds"] == pytest.approx(0.003)
    assert found.window["exposed_seconds"] == pytest.approx(0.002)


def test_split_test_counts_gloo_operations_on_a_cpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    found = recorder(monkeypatch, tmp_path)
    found._trace_ready(
        _Profile(
            [
                _Event("gloo:all_reduce", "DeviceType.CPU", 0, 1500, note=True, thread=7),
                _Event("gloo:all_reduce", "DeviceType.CPU", 5000, 6000, note=True, thread=7),
                _Event("ProfilerStep#3", "DeviceType.CPU", 0, 10000),
                _Event("aten::addmm", "DeviceType.CPU", 0, 1000),
                _Event("c10d::allreduce_", "DeviceType.CPU", 1000, 1100),
            ]
        )
    )

    assert found.window["source"] == "profiler: gloo operations"
    assert found.window["collective_seconds"] == pytest.approx(0.0025)
    # gloo works on its own thread: the job's thread's ops are the compute it may hide
    # under; c10d::allreduce_ is the job's thread launching the exchange, not compute.
    assert found.window["compute_seconds"] == pytest.approx(0.0010)
    assert found.window["exposed_seconds"] == pytest.approx(0.0015)


def test_the_exchanges_own_calls_never_hide_the_exchange(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Seen on a loaded machine: the gradient hook around c10d::allreduce_ (and DDP's
    reducer copying the bucket back) spanned the whole gloo all-reduce, so the exchange
    read as hidden under compute and its share as 0.0."""
    found = recorder(monkeypatch, tmp_path)
    hook = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
    found._trace_ready(
        _Profile(
            [
                _Event("gloo:all_reduce", "DeviceType.CPU", 1000, 3000, note=True, thread=7),
                _Event("aten::addmm", "DeviceType.CPU", 0, 900),
                _Event(hook, "DeviceType.CPU", 900, 3000),
                _Event("c10d::allreduce_", "DeviceType.CPU", 1000, 2500),
                _Event(
                    "torch.distributed.ddp.reducer::copy_bucket_to_grad",
                    "DeviceType.CPU",
                    2500,
                    3000,
                ),
                _Event("aten::add_", "DeviceType.CPU", 2900, 3200),
            ]
        )
    )

    assert found.window["collective_seconds"] == pytest.approx(0.0020)
    # The hook's own 100 us before its call, the addmm, and the add_ after the reducer.
    assert found.window["compute_seconds"] == pytest.approx(0.0012)
    assert found.window["exposed_seconds"] == pytest.approx(0.0020)
