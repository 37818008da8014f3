"""The inventory attack: the unpaid limits hold it to its share, and without them the
measurement fails."""

from __future__ import annotations

from tests.benchmarks.run import run_bench


def test_the_inventory_attack_holds_no_more_than_the_share_and_can_fail() -> None:
    code, report = run_bench("inventory_attack.py", "--max-attempts", "24")
    assert code == 0, report
    assert int(str(report["placed"])) >= 1, report  # the attack really books
    assert float(str(report["share_held"])) <= float(str(report["target_share"])), report
    assert report["meets_target"] is True
    code, unlimited = run_bench("inventory_attack.py", "--max-attempts", "24", "--no-limits")
    assert code == 0, unlimited
    assert unlimited["meets_target"] is False, unlimited  # the measurement can fail
