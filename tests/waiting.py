"""Waiting for something another task or thread does: the one polling helper of the suite.

A test that must see a background effect (a record reaching the ring of recent requests, a
breaker adopted from the fleet, a pool going quiet) waits for the condition, never for a fixed
time: a fixed sleep is either too short on a busy machine or wasted on a quiet one. Where the
code under test offers an event (``anyio.Event``, :meth:`CapturedEvents.wait`), wait on that
instead; polling is for state owned by another thread or process, which no event can cross.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

__all__ = ["eventually"]


async def eventually(condition: Callable[[], object], within: float = 5.0, every: float = 0.01) -> float:
    """Seconds until ``condition()`` holds, asked every ``every`` seconds; fails after ``within``."""
    started = time.monotonic()
    with anyio.fail_after(within):
        while not condition():
            await anyio.sleep(every)
    return time.monotonic() - started
