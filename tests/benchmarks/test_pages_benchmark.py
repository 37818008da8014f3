"""The pages benchmark drives the real server on a year of business (scaled down)."""

from __future__ import annotations

from tests.benchmarks.run import run_bench


def test_the_pages_benchmark_drives_the_real_server() -> None:
    code, report = run_bench(
        "booking_pages.py", "--clients", "4", "--requests", "5", "--orders", "3000"
    )
    assert code == 0
    pages = ("landing", "quote", "quote_uncached", "order_unpaid", "order_partly_paid")
    for page in (*pages, "order_active", "api_order"):
        figures = report[page]
        assert isinstance(figures, dict)
        assert figures["requests"] == 20
        assert 0 < figures["p50_ms"] <= figures["p95_ms"]
