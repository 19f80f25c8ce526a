"""Deliver finished requests to event sinks without ever touching the request path.

A sink is any callable taking a :class:`~asgi_router.observability.events.RequestRecord` (the request's
summary, with one :class:`~asgi_router.observability.events.AttemptEvent` per attempt in ``events``); it may
be ``async``. Each sink gets its own bounded queue and its own worker task, so a slow sink only
slows itself: when its queue is full, new records are dropped for that sink and counted
(:attr:`EventBus.dropped`); the request that produced them never waits. A sink that raises is
logged once and counted (:attr:`EventBus.failures`); the next record still reaches it.

Async sinks run on the event loop (they must not block it); plain functions run in a worker
thread of their own, a batch at a time, so blocking I/O (a log handler writing to a file) is
fine there. Workers run from the app's lifespan startup to its shutdown, where queued records
get a short grace period to drain. Without a lifespan (a mounted sub-app gets none) a
synchronous sink marked ``direct = True`` is called on the request's task instead: the built-in
log line is, since a request without its line is worse than one logging call on the loop.
Other sinks get nothing then: their records fill the queue, are dropped and counted (the router
warns once that they do not run).

Records are shared between sinks: treat them as read-only. A sink object may have a
``quiet()`` method: while it returns true, records are not even queued for it (the logging
sink is quiet while its logger is not enabled for INFO, so it then costs nothing); and a
``close()`` method, called once its worker has stopped at shutdown (a file sink closes its file).
"""

from __future__ import annotations

import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

import anyio
import anyio.to_thread
from anyio.abc import TaskStatus

from asgi_router.observability.events import RequestRecord, log_request, logger

__all__ = ["REFUSED_KEPT", "EventBus", "LogSink", "RecentRequests", "Sink", "default_sinks"]

#: A callable that receives each finished request; sync or async.
Sink = Callable[[RequestRecord], Awaitable[None] | None]

# Records handed to a synchronous sink in one thread hop.
_BATCH: Final = 256


#: Requests refused before routing kept apart by :class:`RecentRequests` (a few: they are alike).
REFUSED_KEPT: Final = 10


class RecentRequests:
    """An in-memory ring of the most recent finished requests (for status pages).

    The router fills its own ring in place with :meth:`add` (a deque append: queueing it for a
    worker would cost a task wake-up per request, more than the append); it is also a sink
    (``await ring(record)``) for anyone who wants a ring of their own behind a queue.
    """

    __slots__ = ("_refused", "_refused_by_status", "_ring", "_routed")

    def __init__(self, size: int) -> None:
        self._ring: deque[RequestRecord] = deque(maxlen=size)
        # Requests refused before routing (no plan: auth, the body, the model name) are also
        # kept apart, so that a flood of them cannot push routed traffic out of a status page.
        self._routed: deque[RequestRecord] = deque(maxlen=size)
        self._refused: deque[RequestRecord] = deque(maxlen=REFUSED_KEPT)
        self._refused_by_status: dict[int, int] = {}

    def add(self, record: RequestRecord) -> None:
        """Keep ``record`` (dropping the oldest when full)."""
        self._ring.append(record)
        if record.plan:
            self._routed.append(record)
        else:
            self._refused.append(record)
            self._refused_by_status[record.status] = self._refused_by_status.get(record.status, 0) + 1

    async def __call__(self, record: RequestRecord) -> None:
        self.add(record)

    def snapshot(self) -> list[RequestRecord]:
        """The kept records, oldest first (routed or not)."""
        return list(self._ring)

    def routed(self) -> list[RequestRecord]:
        """The kept records of requests that were routed (had a plan), oldest first."""
        return list(self._routed)

    def refused(self) -> list[RequestRecord]:
        """The last :data:`REFUSED_KEPT` requests refused before routing, oldest first."""
        return list(self._refused)

    def refused_by_status(self) -> dict[int, int]:
        """How many requests were refused before routing since the router started, by status."""
        return dict(self._refused_by_status)


def _is_async(sink: Sink) -> bool:
    return inspect.iscoroutinefunction(sink) or inspect.iscoroutinefunction(type(sink).__call__)


class _SinkWorker:
    """One sink's queue and the task that empties it."""

    def __init__(self, sink: Sink, capacity: int) -> None:
        self.sink = sink
        self.capacity = capacity
        self.is_async = _is_async(sink)
        #: Called on the publishing task while no worker runs (see the module docstring).
        self.direct = not self.is_async and getattr(sink, "direct", False) is True
        self.queue: deque[RequestRecord] = deque()
        self.dropped = 0
        self.failures = 0
        self.busy = False
        #: The sink's ``quiet()``, asked before each record is queued or delivered.
        self.quiet: Callable[[], bool] | None = getattr(sink, "quiet", None)
        self._wake: anyio.Event | None = None
        #: Set (by the worker) whenever its queue runs empty: what :meth:`EventBus.drain` waits on.
        self.settled: anyio.Event | None = None
        # One thread per synchronous sink: a blocked sink cannot take the host app's threads.
        self._limiter: anyio.CapacityLimiter | None = None

    def call_now(self, record: RequestRecord) -> None:
        """Deliver ``record`` on the caller's task (a ``direct`` sink while no worker runs; the
        publisher has asked :attr:`quiet` first)."""
        try:
            self.sink(record)
        except Exception:
            self._failed()

    def offer(self, record: RequestRecord) -> bool:
        """Queue ``record`` (the publisher has asked :attr:`quiet` first); ``False``: the queue
        was full and it was dropped."""
        if len(self.queue) >= self.capacity:
            self.dropped += 1
            return False
        self.queue.append(record)
        if self._wake is not None:
            self._wake.set()
        return True

    async def run(self) -> None:
        while True:
            if not self.queue:
                if self.settled is not None:
                    self.settled.set()
                self._wake = anyio.Event()
                await self._wake.wait()
                continue
            batch = [self.queue.popleft() for _ in range(min(_BATCH, len(self.queue)))]
            self.busy = True
            try:
                await self._deliver(batch)
            finally:
                self.busy = False

    async def _deliver(self, batch: list[RequestRecord]) -> None:
        if self.is_async:
            for record in batch:
                try:
                    await self.sink(record)  # type: ignore[misc]
                except Exception:
                    self._failed()
            return
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)
        failed = await anyio.to_thread.run_sync(self._call_each, batch, limiter=self._limiter, abandon_on_cancel=True)
        for _ in range(failed):
            self._failed(logged=True)

    def _call_each(self, batch: list[RequestRecord]) -> int:
        failed = 0
        for record in batch:
            try:
                self.sink(record)
            except Exception:
                if self.failures + failed == 0:
                    logger.exception("event sink %r failed (further failures are only counted)", self.sink)
                failed += 1
        return failed

    def close(self) -> None:
        """The bus stops (lifespan shutdown): a sink with a ``close()`` method is closed."""
        close = getattr(self.sink, "close", None)
        if callable(close):
            try:
                close()
            except Exception:
                logger.exception("event sink %r failed to close", self.sink)

    def _failed(self, *, logged: bool = False) -> None:
        if self.failures == 0 and not logged:
            logger.exception("event sink %r failed (further failures are only counted)", self.sink)
        self.failures += 1


class EventBus:
    """Fans finished requests out to sinks through bounded per-sink queues."""

    def __init__(self, sinks: Iterable[Sink], capacity: int) -> None:
        self._workers = [_SinkWorker(sink, capacity) for sink in sinks]
        self._running = False

    @property
    def dropped(self) -> int:
        """Records not delivered to some sink because its queue was full (summed over sinks)."""
        return sum(worker.dropped for worker in self._workers)

    @property
    def failures(self) -> int:
        """Deliveries that raised (summed over sinks)."""
        return sum(worker.failures for worker in self._workers)

    @property
    def pending(self) -> bool:
        """Whether some record is still queued for, or being delivered to, a sink."""
        return any(worker.queue or worker.busy for worker in self._workers)

    def publish(self, record: RequestRecord) -> None:
        """Queue ``record`` for every sink (or, with no worker running, call a ``direct`` one);
        never blocks, never raises."""
        running = self._running
        for worker in self._workers:
            quiet = worker.quiet
            if quiet is not None and quiet():  # checked here: one call fewer per sink and record
                continue
            if running or not worker.direct:
                worker.offer(record)
            else:
                worker.call_now(record)

    def lifespan_only(self) -> list[str]:
        """The names of the sinks that get nothing without a lifespan (all but ``direct`` ones)."""
        return [_name(worker.sink) for worker in self._workers if not worker.direct]

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Deliver until cancelled (the router runs this from lifespan startup to shutdown)."""
        self._running = True
        task_status.started()
        try:
            async with anyio.create_task_group() as tasks:
                for worker in self._workers:
                    tasks.start_soon(worker.run)
        finally:
            self._running = False
            for worker in self._workers:
                worker.close()

    async def drain(self, grace: float) -> bool:
        """Wait until every queue is empty and no sink is busy, at most ``grace`` seconds."""
        with anyio.move_on_after(grace):
            for worker in self._workers:
                while self._running and (worker.queue or worker.busy):
                    worker.settled = anyio.Event()
                    await worker.settled.wait()
        return not self.pending


def _name(sink: Sink) -> str:
    name = getattr(sink, "__qualname__", None)
    return name if isinstance(name, str) else type(sink).__qualname__


class LogSink:
    """The stdlib ``logging`` sink: one structured line per request (:func:`log_request`)."""

    #: Written on the request's task while no worker runs (no lifespan): the line is not lost.
    direct = True

    def __call__(self, record: RequestRecord) -> None:
        log_request(record)

    def quiet(self) -> bool:
        return not logger.isEnabledFor(logging.INFO)


def default_sinks(extra: Iterable[Sink]) -> list[Sink]:
    """The built-in sink (the one-line-per-request log) then the user's."""
    return [LogSink(), *extra]
