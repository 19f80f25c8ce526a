"""Waiting for something another task, thread or process does: the suite's polling helpers.

A test that must see a background effect (a record reaching the ring of recent requests, a
breaker adopted from the fleet, a pool going quiet) waits for the condition, never for a fixed
time: a fixed sleep is either too short on a busy machine or wasted on a quiet one. Where the
code under test offers an event (``anyio.Event``, :meth:`CapturedEvents.wait`), wait on that
instead; polling is for state owned by another thread or process, which no event can cross.
:func:`eventually` waits in a task; :func:`polled` blocks a thread (a sync test, or a helper a
sync test calls), as when a server process or a browser has to come up.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import TypeVar

import anyio

__all__ = ["eventually", "polled"]

T = TypeVar("T")


async def eventually(condition: Callable[[], object], within: float = 5.0, every: float = 0.01) -> float:
    """Seconds until ``condition()`` holds, asked every ``every`` seconds; fails after ``within``.
    A condition may be asked by awaiting (a scrape, a store query): it returns an awaitable then."""
    started = time.monotonic()
    with anyio.fail_after(within):
        while not await _held(condition()):
            await anyio.sleep(every)
    return time.monotonic() - started


async def _held(answer: object) -> object:
    return await answer if inspect.isawaitable(answer) else answer


def polled(probe: Callable[[], T], within: float = 5.0, every: float = 0.01, *, what: str = "the condition") -> T:
    """The first truthy value of ``probe()``, asked every ``every`` seconds, blocking the thread;
    an :class:`AssertionError` naming ``what`` after ``within``. A probe raises to give up early
    (a process that exited will never answer)."""
    deadline = time.monotonic() + within
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within} s")
        time.sleep(every)
    return value
