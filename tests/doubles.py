"""The suite's stand-ins for time and for where records go: one fake clock, one record sink.

Time-driven behaviour (a breaker's ``open_for``, a caller's rolling minute, an affinity's ttl, a
capacity mark running out) is tested on :class:`FakeClock`, handed to the code under test as its
``clock`` (``ModelRouter(clock=...)`` and the parts that take one): "a minute later" is
``clock.advance(60)``, at once and the same on a busy machine. Code whose timers are the event
loop's own (read limits, cancel scopes, the disconnect watch) is tested on a loop that keeps its
time on a :class:`FakeClock` (:data:`FAKE_CLOCK_BACKEND`): when every task waits for a timer, the
clock jumps to the next one instead of waiting for it. What a router records about each request is
read from :class:`RecordSink`: given as a sink (``ModelRouter(sinks=[records])``), or listening to
the logging sink's records for a block (:meth:`RecordSink.logged`).
"""

from __future__ import annotations

import asyncio
import logging
import selectors
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from asgi_router.core import deadlines
from asgi_router.core.deadlines import Deadline
from asgi_router.observability.events import RequestRecord

__all__ = ["FAKE_CLOCK_BACKEND", "FakeClock", "FakeClockLoop", "RecordSink", "on_fake_clock"]

_WALL_START = 10 * 86_400 + 3_600
"""Where the wall clock starts: 01:00 UTC of a day, far from the midnight a daily cap resets at."""


class FakeClock:
    """Monotonic seconds that pass only when a test moves them, and a wall clock moving with them.

    Call it for the monotonic reading (``now``; a test may also set ``now`` outright); ``wall``
    is the UTC wall clock (seconds since the epoch) for the code that takes one, such as the
    caller caps' daily tallies.
    """

    def __init__(self, now: float = 1000.0, *, wall: float = _WALL_START) -> None:
        self.now = now
        self.wall_now = wall

    def __call__(self) -> float:
        return self.now

    def wall(self) -> float:
        return self.wall_now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.wall_now += seconds


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without waiting; where the loop would wait for its next timer, moves the clock there."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:  # no timer due: wait for I/O or another thread, as a real loop does
            return super().select(None)
        ready = super().select(0)
        if not ready and timeout > 0:
            self._clock.advance(timeout)
        return ready


class FakeClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose time is a :class:`FakeClock` that jumps to the next timer when every
    task is waiting: ``asyncio.sleep``, ``call_later``, ``asyncio.timeout`` and anyio's scopes all
    run on it, in their real order, taking no real time. For code that does no real I/O and has no
    threads: time would jump ahead of a socket or a thread that is about to answer."""

    def __init__(self) -> None:
        self.clock = FakeClock(0.0)
        super().__init__(_JumpingSelector(self.clock))

    def time(self) -> float:
        return self.clock.now


FAKE_CLOCK_BACKEND: tuple[str, dict[str, Any]] = ("asyncio", {"loop_factory": FakeClockLoop})
"""An ``anyio_backend`` for tests whose timers are the event loop's: a module overrides the
``anyio_backend`` fixture with it to run its tests on a :class:`FakeClockLoop`."""

on_fake_clock = pytest.mark.parametrize("anyio_backend", [FAKE_CLOCK_BACKEND], ids=["fake-clock"])
"""Runs one test on a :class:`FakeClockLoop` (its ``anyio_backend``, given outright)."""


class RecordSink(list[RequestRecord]):
    """Every :class:`RequestRecord` a router delivered to it, in the order they arrived."""

    async def __call__(self, record: RequestRecord) -> None:
        self.append(record)

    def of(self, request_id: str) -> RequestRecord:
        """The one record of ``request_id`` (fails if there is none, or more than one)."""
        found = [record for record in self if record.request_id == request_id]
        assert len(found) == 1, f"{len(found)} records for {request_id}"
        return found[0]

    @classmethod
    @contextmanager
    def logged(cls) -> Iterator[RecordSink]:
        """The records the logging sink (the default one) logs during the block, whichever router
        logs them."""
        records = cls()
        handler = _Listener(records)
        logger = logging.getLogger("asgi_router")
        level = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        try:
            yield records
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)


class _Listener(logging.Handler):
    """Hands each request record the logging sink logs (its ``extra``) to a :class:`RecordSink`."""

    def __init__(self, records: RecordSink) -> None:
        super().__init__(logging.INFO)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        found = getattr(record, "asgi_router", None)
        if isinstance(found, RequestRecord):
            self.records.append(found)


class RelayProgress:
    """What a relay tells the request's state (bytes and chunks relayed, the last chunk sent, that
    the response is complete), for a unit test that drives a relay without a request."""

    def __init__(self) -> None:
        self.bytes_relayed = self.chunks_relayed = 0
        self.last_sent = b""
        self.completed = False

    def complete(self) -> None:
        self.completed = True


def counting_deadlines(monkeypatch: pytest.MonkeyPatch) -> list[Deadline]:
    """The ``Deadline`` scopes of their own that read blocks make from now on (``core/deadlines.py``)."""
    made: list[Deadline] = []

    class Counted(Deadline):
        __slots__ = ()

        def __init__(self) -> None:
            super().__init__()
            made.append(self)

    monkeypatch.setattr(deadlines, "Deadline", Counted)
    return made
