"""A second beat started by mistake does no harm: each periodic message carries its period's
number (infra.beat.SlottedScheduler) and the task claims it in the database first, so every
periodic task runs once a period however many beats send it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from celery.schedules import crontab
from django.conf import settings

from infra import beat
from infra.models import BeatClaim
from tests.workers import ROOT, current_database_url, start_worker, wait_for

SCAN = "payments.tasks.scan_open_invoices"


def test_a_period_is_read_from_each_kind_of_schedule() -> None:
    assert beat.period_seconds(timedelta(seconds=5)) == 5
    assert beat.period_seconds(crontab(minute="*")) == 60
    assert beat.period_seconds(crontab(minute="*/5")) == 300
    assert beat.period_seconds(crontab(minute="17")) == 3600
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        assert beat.period_seconds(entry["schedule"]) >= 1, name


def test_every_periodic_task_claims_its_slot() -> None:
    from config.celery import app

    app.loader.import_default_modules()
    for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
        task = app.tasks[entry["task"]]
        assert getattr(task.run, "__wrapped__", None) is not None, name  # once_per_slot


@pytest.mark.django_db
def test_a_slot_is_claimed_once() -> None:
    assert beat.claim(SCAN, 100) is True
    assert beat.claim(SCAN, 100) is False  # the other beat's message for the same period
    assert beat.claim(SCAN, 101) is True
    assert beat.claim("payments.tasks.check_refunds", 100) is True  # each task its own


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_beats_run_each_periodic_task_once_a_period(tmp_path: Path) -> None:
    worker_runs = start_worker()
    worker = next(worker_runs)
    environ = {
        **os.environ,
        "DATABASE_URL": current_database_url(),
        "CELERY_TASK_DEFAULT_QUEUE": worker.queue,
        "DJANGO_DEBUG": "1",
        "PAYMENT_SCAN_SECONDS": "1",
    }
    beats = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                str(tmp_path / f"beat-{number}"),
            ],
            cwd=ROOT,
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for number in (1, 2)
    ]
    done_pattern = rf"Task {re.escape(SCAN)}\[[^\]]+\] succeeded in [\d.]+s: (\S+)"
    started = time.monotonic()
    window_from = 0
    try:
        # Both beats sending (a scan skipped shows the second has sent a period the first ran;
        # on a loaded machine one beat can start many seconds after the other), then ten
        # periods of the scan's counted from there.
        assert wait_for(lambda: "None" in re.findall(done_pattern, worker.log()), 90), worker.log()[
            -2000:
        ]
        window_from = len(worker.log())
        started = time.monotonic()
        time.sleep(10)
    finally:
        for process in beats:
            process.terminate()
            process.wait(timeout=15)
        elapsed = time.monotonic() - started
    try:
        time.sleep(2)  # what was sent before the beats stopped is run
        log = worker.log()
        claims = BeatClaim.objects.filter(task=SCAN).count()
    finally:
        worker_runs.close()
    every = re.findall(done_pattern, log)
    window = re.findall(done_pattern, log[window_from:])
    scanned = [result for result in window if result != "None"]  # a scan returns its count
    skipped = [result for result in window if result == "None"]  # its slot ran already
    # Both beats sent every period's scan; it ran once a period, not twice.
    assert len(skipped) >= len(scanned) - 3, (len(scanned), len(skipped))
    assert len(scanned) <= elapsed + 2, (len(scanned), elapsed)
    # and over the whole run, each scan that ran holds a claim of its own
    assert len([result for result in every if result != "None"]) == claims
