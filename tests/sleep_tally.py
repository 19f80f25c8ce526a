"""How long the suite sleeps: the seconds of every sleep that ran to its end, summed per session.

A test that sleeps pays for it on every run, and a sleep that ends is time nobody asked for: a
background effect is waited for with :func:`tests.waiting.eventually`, and time-driven behaviour
is driven by the injected clock (tests/clocks.py). This tally keeps the cost in view: for the
whole session it wraps ``time.sleep``, ``asyncio.sleep`` and ``anyio.sleep`` (whoever calls them:
a test, a helper, the router, a server thread) and the fake upstream's scripted pauses, and adds
up the seconds asked of those that completed; a sleep cut short (cancelled, interrupted, a pause
the client left) is not counted, and one on a :class:`~tests.doubles.FakeClockLoop` (which takes
no real time) is counted apart. tests/conftest.py prints the sum and the count in pytest's
terminal summary. The wrappers hand every argument and result through, so nothing behaves
differently while they are in place.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import anyio

from asgi_router.testing.playback import PlayedCall

from .doubles import FakeClockLoop

__all__ = ["SleepTally"]


class SleepTally:
    """Completed sleeps (count, seconds) and completed upstream pauses, while installed."""

    def __init__(self) -> None:
        self.sleeps = 0
        self.seconds = 0.0
        self.pauses = 0
        self.pause_seconds = 0.0
        self.fake_sleeps = 0
        self.fake_seconds = 0.0
        self._lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []

    def _sleep_ended(self, seconds: float) -> None:
        with self._lock:
            self.sleeps += 1
            self.seconds += max(0.0, seconds)

    def _task_slept(self, seconds: float) -> None:
        if isinstance(asyncio.get_running_loop(), FakeClockLoop):
            with self._lock:
                self.fake_sleeps += 1
                self.fake_seconds += max(0.0, seconds)
        else:
            self._sleep_ended(seconds)

    def _pause_ended(self, seconds: float) -> None:
        with self._lock:
            self.pauses += 1
            self.pause_seconds += max(0.0, seconds)

    def install(self) -> None:
        """Wrap the sleeps and the fake upstream's pauses until :meth:`uninstall`."""
        tally = self
        thread_sleep = time.sleep
        asyncio_sleep = asyncio.sleep
        anyio_sleep = anyio.sleep
        pause = PlayedCall.pause

        def timed_sleep(seconds: float) -> None:
            thread_sleep(seconds)
            tally._sleep_ended(seconds)

        async def timed_asyncio_sleep(delay: float, result: Any = None) -> Any:
            value = await asyncio_sleep(delay, result)
            tally._task_slept(delay)
            return value

        async def timed_anyio_sleep(delay: float) -> None:
            await anyio_sleep(delay)
            tally._task_slept(delay)

        async def timed_pause(call: PlayedCall, seconds: float) -> bool:
            ended = await pause(call, seconds)
            if ended and seconds > 0:
                tally._pause_ended(seconds)
            return ended

        self._swap(time, "sleep", timed_sleep)
        self._swap(asyncio, "sleep", timed_asyncio_sleep)
        self._swap(anyio, "sleep", timed_anyio_sleep)
        self._swap(PlayedCall, "pause", timed_pause)

    def _swap(self, owner: Any, name: str, replacement: object) -> None:
        original = getattr(owner, name)
        setattr(owner, name, replacement)
        self._undo.append(lambda: setattr(owner, name, original))

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def summary(self) -> str:
        return (
            f"sleeps that completed: {self.sleeps}, {self.seconds:.1f} s; "
            f"fake upstream pauses that completed: {self.pauses}, {self.pause_seconds:.1f} s; "
            f"sleeps on a fake-clock loop (no real time): {self.fake_sleeps}, {self.fake_seconds:.1f} s"
        )
