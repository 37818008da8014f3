"""Many threads doing one thing at the same instant, each on its own database connection."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connections

T = TypeVar("T")


def at_once(count: int, action: Callable[[int], T]) -> list[T | Exception]:
    """Run ``action(i)`` for i in range(count), in threads released together by a barrier.

    Each outcome is the return value, or the exception raised (for the test to judge);
    the list is in finishing order. Every thread closes its own connections.
    """
    barrier = threading.Barrier(count)
    outcomes: list[T | Exception] = []
    lock = threading.Lock()

    def run(index: int) -> None:
        outcome: T | Exception
        try:
            barrier.wait()
            outcome = action(index)
        except Exception as exc:  # the outcome is the assertion's subject
            outcome = exc
        finally:
            connections.close_all()
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes
