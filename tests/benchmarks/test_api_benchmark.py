"""The API benchmark places orders through a real stack, once per Idempotency-Key."""

from __future__ import annotations

from tests.benchmarks.run import run_bench


def test_the_api_benchmark_books_once_per_key() -> None:
    code, report = run_bench("api_orders.py", "--clients", "4", "--orders", "2")
    assert code == 0, report
    assert report["placed"] == 8
    assert report["same_key_orders"] == 1
    assert report["overbooked"] == 0
