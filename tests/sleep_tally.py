"""How long the suite sleeps: the seconds of every sleep that ran to its end, summed per session.

A test that sleeps pays for it on every run, and a sleep that ends is time nobody asked for: a
background effect is waited for with :func:`tests.waiting.eventually`, and time-driven behaviour
is driven by the injected clock (:class:`tests.doubles.FakeClock`). This tally keeps the cost in
view: for the whole session it wraps ``time.sleep``, ``asyncio.sleep`` and ``anyio.sleep`` and the
fake upstream's scripted pauses, and adds up the seconds asked of those that completed; a sleep
cut short (cancelled, interrupted, a pause the client left) is not counted. Each sleep is put down
to who called it:

- the suite (a test or a helper in ``tests/``) and the library (a router's backoff, a health
  probe's interval, the fake upstream's pauses): the time tests spend sleeping, the sum to keep
  small;
- anyone else (uvicorn's idle tick in every served test server, a client library's pauses): shown
  apart, as it runs alongside the tests and is no test's choice;
- the router's keep-fresh ticks (:data:`BACKGROUND_TICKS`: the ledger's flush, the key table's
  refresh, a multiprocess worker's metrics write): shown apart. Each is the sleep of a loop the
  router's lifespan runs in its own task from startup to shutdown; no test awaits that task (it
  ends cancelled), so the tick runs alongside the test. A test that needs a tick's effect (rows
  written, a key seen) waits for it through :func:`tests.waiting.eventually`, whose sleeps are the
  suite's and counted. Health probes and reconnection backoffs are not among them: tests time their
  scripts to those intervals, so they stay counted as the library's;
- any caller on a :class:`~tests.doubles.FakeClockLoop`: shown apart, it takes no real time;
- a sleep of zero seconds (or less): shown apart as a yield (``await asyncio.sleep(0)`` lets the other tasks
  run), it waits for nothing.

tests/conftest.py prints the lines in pytest's terminal summary, with the tests that slept the
most (a sleep is put down to the test being set up, run or torn down when it ended). The wrappers hand every argument
and result through, so nothing behaves differently while they are in place.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

import asgi_router
from asgi_router.endpoints.metrics_page import MetricsEndpoint
from asgi_router.keys.key_ring import KeyRing
from asgi_router.ledger.service import Ledger
from asgi_router.testing.playback import PlayedCall

from .doubles import FakeClockLoop

__all__ = ["SleepTally"]

_SUITE = str(Path(__file__).resolve().parent)
_LIBRARY = str(Path(asgi_router.__file__).resolve().parent)

#: The loops whose own sleeps are the router's keep-fresh ticks (see the module docstring): a sleep
#: is one of them when the function that asked for it is one of these, not a helper they call.
BACKGROUND_TICKS = frozenset({Ledger.run.__code__, KeyRing.keep_fresh.__code__, MetricsEndpoint.keep_fresh.__code__})


@dataclass
class _Sum:
    count: int = 0
    seconds: float = 0.0

    def __str__(self) -> str:
        return f"{self.count} sleeps, {self.seconds:.1f} s"


class SleepTally:
    """Completed sleeps (count and seconds), by who called them, while installed."""

    def __init__(self) -> None:
        self.suite = _Sum()
        self.library = _Sum()
        self.elsewhere = _Sum()
        self.ticks = _Sum()
        self.fake_clock = _Sum()
        self.yields = _Sum()
        self.sites: Counter[str] = Counter()
        """Seconds slept by the suite and the library, per calling line: where the time goes."""
        self.tests: Counter[str] = Counter()
        """Seconds slept by the suite and the library, per test (the one running when the sleep
        ended; a session fixture's sleeps go to the test that first asked for it)."""
        self.calls_by_test: Counter[str] = Counter()
        self.current_test = ""
        """The node id of the test being set up, run or torn down (set by tests/conftest.py)."""
        self._lock = threading.Lock()
        self._undo: list[Callable[[], None]] = []

    def _add(self, into: tuple[_Sum, str], seconds: float) -> None:
        total, site = into
        with self._lock:
            total.count += 1
            total.seconds += max(0.0, seconds)
            if site:
                self.sites[site] += max(0.0, seconds)
                self.tests[self.current_test or "(between tests)"] += max(0.0, seconds)
                self.calls_by_test[self.current_test or "(between tests)"] += 1

    def _caller(self, seconds: float, on_fake_clock: bool = False) -> tuple[_Sum, str]:
        """Whose sleep this is (and from which line, for the suite and the library): asked of the
        frame that called the wrapper, before it sleeps."""
        if on_fake_clock:
            return self.fake_clock, ""
        if seconds <= 0:
            return self.yields, ""
        frame = inspect.currentframe()
        try:  # the caller of the wrapper; this frame is let go at once (held, it would be a cycle)
            caller = frame.f_back.f_back if frame is not None and frame.f_back is not None else None
        finally:
            del frame
        if caller is None:
            return self.elsewhere, ""
        if caller.f_code in BACKGROUND_TICKS:
            return self.ticks, ""
        path = str(Path(caller.f_code.co_filename).resolve())
        if path.startswith(_SUITE):
            return self.suite, f"tests/{path[len(_SUITE) + 1 :]}:{caller.f_lineno}"
        if path.startswith(_LIBRARY):
            return self.library, f"asgi_router/{path[len(_LIBRARY) + 1 :]}:{caller.f_lineno}"
        return self.elsewhere, ""

    def install(self) -> None:
        """Wrap the sleeps and the fake upstream's pauses until :meth:`uninstall`."""
        tally = self
        thread_sleep = time.sleep
        asyncio_sleep = asyncio.sleep
        anyio_sleep = anyio.sleep
        pause = PlayedCall.pause

        def on_fake_clock() -> bool:
            return isinstance(asyncio.get_running_loop(), FakeClockLoop)

        def timed_sleep(seconds: float) -> None:
            into = tally._caller(seconds)
            thread_sleep(seconds)
            tally._add(into, seconds)

        async def timed_asyncio_sleep(delay: float, result: Any = None) -> Any:
            into = tally._caller(delay, on_fake_clock())
            value = await asyncio_sleep(delay, result)
            tally._add(into, delay)
            return value

        async def timed_anyio_sleep(delay: float) -> None:
            into = tally._caller(delay, on_fake_clock())
            await anyio_sleep(delay)
            tally._add(into, delay)

        async def timed_pause(call: PlayedCall, seconds: float) -> bool:
            ended = await pause(call, seconds)
            if ended and seconds > 0:
                tally._add((tally.library, "the fake upstream's scripted pauses"), seconds)
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

    def summary(self) -> list[str]:
        spent = _Sum(self.suite.count + self.library.count, self.suite.seconds + self.library.seconds)
        return [
            f"sleeps that completed, asked by the suite or the library: {spent}",
            f"  by the suite (tests/): {self.suite}; by the library (asgi_router/, the fake upstream's pauses): "
            f"{self.library}",
            f"  apart: by others (servers' idle ticks, client libraries): {self.elsewhere}; "
            f"the router's keep-fresh ticks (ledger, key table, metrics files): {self.ticks}; "
            f"on a fake-clock loop (no real time): {self.fake_clock}; yields (sleep(0)): {self.yields.count}",
            "  most seconds: " + "; ".join(f"{site} {seconds:.1f} s" for site, seconds in self.sites.most_common(8)),
            "  most seconds by test:",
            *(
                f"    {seconds:6.2f} s in {self.calls_by_test[test]:4d} sleeps  {test}"
                for test, seconds in self.tests.most_common(15)
            ),
        ]
