"""The benchmarks without a stack of their own keep running: each prints one JSON line,
and the race one judges itself."""

from __future__ import annotations

import pytest

from tests.benchmarks.run import profile_of, run_bench, run_bench_printing


def test_the_booking_race_never_overbooks() -> None:
    code, report = run_bench("booking_race.py", "--clients", "12", "--capacity", "3")
    assert code == 0, report
    assert report["succeeded"] == 3
    assert report["unavailable"] == 9
    assert (report["overbooked"], report["orphans"], report["errors"]) == (0, 0, 0)


def test_the_throughput_benchmark_reports_both_rates() -> None:
    code, report = run_bench("booking_throughput.py", "--rounds", "1", "--per-round", "20")
    assert code == 0
    orders = float(str(report["orders_per_second"]))
    same_rows = float(str(report["same_rows_bare_per_second"]))
    one_row = float(str(report["one_row_inserts_per_second"]))
    assert min(orders, same_rows, one_row) > 0
    assert float(str(report["ratio"])) == pytest.approx(orders / same_rows, rel=0.01)
    assert float(str(report["ratio_to_one_row"])) == pytest.approx(orders / one_row, rel=0.01)
    assert report["target_ratio"] == 0.5


def test_the_year_of_business_seeds_what_it_says() -> None:
    code, report = run_bench(
        "yearseed.py", "--orders", "3000", "--database", "gpulots_bench_yearseed_test"
    )
    assert code == 0, report
    assert report["orders"] == 3000
    assert report["lots"] == 200
    holds, invoices = int(str(report["holds"])), int(str(report["invoices"]))
    assert holds > 2 * 3000  # 1 to 5 lots an abandoned order, 1 to 4 a live one
    assert 0 < invoices <= 3000  # none while the coin is not chosen
    assert report["transfers"] == invoices
    assert report["ssh_keys"] == 3000
    assert report["events"] == 6000
    assert report["meets_target"] is (float(str(report["seconds"])) < 60)


def test_the_payment_scan_benchmark_stays_within_its_request_bound() -> None:
    code, report, printed = run_bench_printing(
        "payment_scan.py",
        "--sizes",
        "3,30",
        "--latency-samples",
        "1",
        "--profile",
        env={"PAYMENT_SCAN_SECONDS": "1"},
    )
    assert code == 0, report
    # --profile: the largest size's steady cycle, profiled on standard error.
    assert "== steady cycle, 30 open invoices" in printed
    assert "scan_chain" in printed
    sizes = report["sizes"]
    assert isinstance(sizes, list)
    assert [s["invoices"] for s in sizes] == [3, 30]
    for size in sizes:
        cycles = size["cycles"]
        assert [c["cycle"] for c in cycles] == ["catch_up", "steady", "quiet"]
        assert all(c["rpc_requests"] <= size["bound"] for c in cycles)
        # The catch-up reads 50,000 blocks behind a 2,000-block proxy in one bounded cycle.
        assert cycles[0]["blocks_read"] == 50_000
        assert cycles[1]["settled"] == min(size["invoices"], 10)
    assert report["proxy_refusals"] == 0


def test_the_validation_benchmark_runs_on_the_cpu_in_time() -> None:
    code, report = run_bench("validation_cpu.py")
    assert code == 0, report
    assert float(str(report["seconds"])) < 120
    assert report["essentials"]["all_reduce"]["correct"] is True  # type: ignore[index]


def test_the_throughput_benchmark_profiles_placing_orders() -> None:
    printed = profile_of("booking_throughput.py", "--per-round", "20")
    assert "place_order" in printed
    assert "cumulative" in printed
