"""Per-read time limits at the cost of a clock read, instead of a cancel scope per chunk.

The attempt loop and the relay bound every upstream read (first byte, then ``idle`` between
chunks, never past the attempt's ``total``), and the inbound body has its ``body_timeout``.
``anyio.fail_after`` around each read is the obvious spelling, but each one builds a cancel
scope and a timer: ~8 µs on uvloop, more than relaying the chunk itself, so a 20-chunk stream
paid ~150 µs for its timeouts alone.

A watchdog guards one cancel scope the caller already has: a :class:`TaskScope` is its own
(one object per scope, not two), anyio's get a :class:`ReadWatchdog` (:func:`watchdog_for`
picks). ``arm()`` before a read records when that read must be done by; ``disarm()`` after
it stops the count (time spent waiting on a slow *client* is not upstream idleness). On asyncio no timer is set per
watchdog: the loop's one :class:`Ticker` looks at it when its time slot comes and, if it was
re-armed meanwhile, moves it to a later slot; so a stream of chunks costs a clock read per
chunk, and a limit fires at most :data:`Ticker.RESOLUTION` late. When a read really overruns,
the watchdog cancels the scope and the caller sees ``scope.cancelled_caught``. On any other
anyio backend (trio) it moves the scope's own ``deadline`` instead: slower, same behaviour.

The scopes themselves come from :func:`new_scope`: a :class:`TaskScope` (asyncio's own
cancellation, as ``asyncio.timeout`` uses it) where the code inside is asyncio-native, else
anyio's.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import os
import threading
import weakref
from types import TracebackType
from typing import Final, Protocol

import anyio

# anyio's asyncio backend class (what ``anyio.CancelScope()`` returns on asyncio), built
# directly by new_scope(). A private module of anyio 4: tests/ exercise it on every request.
from anyio._backends._asyncio import CancelScope as _AsyncioCancelScope

__all__ = [
    "ARRIVING",
    "ReadWatchdog",
    "TaskScope",
    "Ticker",
    "Timed",
    "Watchdog",
    "new_scope",
    "running_loop",
    "ticker_for",
    "watchdog_for",
]


#: ``_slot`` of a watchdog or watch the ticker has not slotted yet (see :meth:`Ticker.arrive`).
ARRIVING: Final = -1


class _Armed:
    """What every watchdog does on the loop's :class:`Ticker`: keep the time the next read must be
    done by, sit in the ticker's slot for it, and call :meth:`_overrun` when it has passed.

    A first ``arm()`` only *arrives* at the ticker (:meth:`Ticker.arrive`, a list append); the
    next tick slots it by the time it is armed for then. Most watchdogs are closed before that
    tick (the read came) and so never cost a slot's insertion and removal.
    """

    __slots__ = ("_expires", "_slot", "_ticker", "_when")

    def __init__(self) -> None:
        self._ticker: Ticker | None = None
        self._expires = math.inf
        self._slot: int | None = None
        self._when = math.inf  # when the ticker will look at this watchdog next

    def _arm_on(self, loop: asyncio.AbstractEventLoop, seconds: float) -> None:
        self._expires = expires = loop.time() + seconds
        if expires < self._when:  # earlier than the pending check (or none pending): move it
            ticker = self._ticker
            if ticker is None:
                ticker = self._ticker = ticker_for(loop)
            elif self._slot is not None:  # in a later slot (an arriving one has _when -inf)
                ticker.unwatch(self, self._slot)
            self._slot = ARRIVING
            self._when = -math.inf  # looked at on the next tick, whatever it is armed for by then
            ticker.arrive(self)

    def disarm(self) -> None:
        """Stop counting until the next ``arm()`` (e.g. while the client is being written to)."""
        self._expires = math.inf

    def close(self) -> None:
        """Leave the ticker, if watched: no more limits (an arriving watchdog is dropped by the
        next tick, which finds it unarmed)."""
        slot = self._slot
        if slot is not None:
            if slot != ARRIVING:
                assert self._ticker is not None
                self._ticker.unwatch(self, slot)
            self._slot = None
        self._when = self._expires = math.inf

    def waiting(self) -> bool:
        return self._slot is not None

    def due(self, now: float) -> None:
        """The ticker's call: this watchdog's slot has come, or the tick after its arrival (it has
        left the slot or the arrivals)."""
        self._slot = None
        self._when = math.inf
        expires = self._expires
        if expires == math.inf:
            return
        if now >= expires:
            self._overrun()
        else:  # the read was re-armed since: look again when it is due
            assert self._ticker is not None
            self._slot = slot = self._ticker.watch(self, expires)
            self._when = slot * Ticker.RESOLUTION

    def _overrun(self) -> None:
        raise NotImplementedError


class TaskScope(_Armed):
    """A cancel scope for the current asyncio task, at a quarter of an anyio scope's cost, that
    is also its own :class:`Watchdog`.

    The router's own scopes (one around each request's upstream work, one per attempt, one per
    relay, one around reading the request body) are only ever cancelled by the router itself:
    from the disconnect watcher task or the loop's :class:`Ticker`, never from inside the task
    that runs the scope. For that use anyio's level-triggered machinery (a task-state registry,
    a cancel-delivery loop re-run every loop turn) is more than is needed and cost ~2.2 µs per
    scope on uvloop against ~0.6 µs here.

    Semantics are ``asyncio.timeout``'s, the standard library's own cancel scope: :meth:`cancel`
    calls ``Task.cancel()`` once; on exit, a ``CancelledError`` is swallowed (and
    :attr:`cancelled_caught` set) only if this scope asked for it and nobody else did
    meanwhile, which ``Task.uncancel()`` tells. So an enclosing scope's cancellation (or the
    server cancelling the request task) passes through an inner scope untouched, and an inner
    scope's own cancellation stops at it. Unlike anyio's, the cancellation is delivered once
    (edge-triggered): cleanup in ``finally`` blocks inside the scope is not cancelled again,
    which is what closing an upstream response needs.

    :meth:`arm`, :meth:`disarm` and :meth:`close` are :class:`ReadWatchdog`'s, for this scope
    itself: a scope and its watchdog are one object (each object a request holds while it waits
    on an upstream is one more for every young-generation garbage collection to walk). Leaving
    the scope leaves the ticker too.

    What it does not do is hold off anyio: a ``Task.cancel()`` pierces anyio's shields, and an
    anyio task group inside takes it for its own cancellation. So :func:`new_scope` builds one
    only around code that is asyncio-native throughout (the aiohttp transport), and never around
    the hedging race's task group.
    """

    __slots__ = ("_base", "_cancelled", "_exited", "_loop", "_task", "cancelled_caught")

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        # _Armed's fields set here rather than through super().__init__(): a scope is made per
        # attempt and per request, and the call cost more than the assignments.
        self._ticker = None
        self._expires = self._when = math.inf
        self._slot = None
        self._task: asyncio.Task[object] | None = None
        #: The running loop (new_scope() knows it already; otherwise looked up on entry).
        self._loop = loop
        self._base = 0
        self._cancelled = False
        self._exited = False
        #: Whether this scope's own cancellation ended the block (as anyio's attribute).
        self.cancelled_caught = False

    def __enter__(self) -> TaskScope:
        loop = self._loop or running_loop()
        task = None if loop is None else asyncio.current_task(loop)
        if loop is None or task is None:  # pragma: no cover - new_scope() only builds one inside a task
            raise RuntimeError("TaskScope must be entered inside an asyncio task")
        self._task = task
        self._loop = loop
        self._base = task.cancelling()
        return self

    def cancel(self) -> None:
        """Cancel the block (once); a no-op before entry, after exit, or when already called.

        Must not be called from the task running the block (the router never does): the
        cancellation would then land at that task's next ``await``, wherever it is by then.
        """
        if self._cancelled or self._exited or self._task is None:
            return
        self._cancelled = True
        self._task.cancel()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self._exited = True
        if self._slot is not None:
            self.close()
        task, self._task = self._task, None  # an arriving scope may outlive its block by a tick
        if not self._cancelled:
            return False
        assert task is not None
        # Take back our request either way (the block may have ended before it landed); swallow
        # the CancelledError only when no other cancellation is pending on the task.
        if task.uncancel() <= self._base and exc_type is asyncio.CancelledError:
            self.cancelled_caught = True
            return True
        return False

    def arm(self, seconds: float) -> None:
        """The next read must be done within ``seconds`` (0 or less: at once); inside the block."""
        assert self._loop is not None, "arm() inside the scope"
        self._arm_on(self._loop, seconds)

    def _overrun(self) -> None:
        self.cancel()


class Watchdog(Protocol):
    """A scope's read limits: a :class:`TaskScope` itself, or a :class:`ReadWatchdog` on an
    anyio scope (:func:`watchdog_for`)."""

    def arm(self, seconds: float) -> None: ...

    def disarm(self) -> None: ...

    def close(self) -> None: ...


def watchdog_for(scope: TaskScope | anyio.CancelScope) -> Watchdog:
    """The watchdog of ``scope`` (from :func:`new_scope`): the scope itself when it is a
    :class:`TaskScope`, else a :class:`ReadWatchdog` guarding it."""
    return scope if type(scope) is TaskScope else ReadWatchdog(scope)


class _LastLoop(threading.local):
    """This thread's running loop, as last seen (weakly: a finished loop is not kept), and the
    :class:`Ticker` last asked for."""

    loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
    ticker: weakref.ref[Ticker] | None = None


_last_loop = _LastLoop()


def _forget_loop() -> None:  # pragma: no cover - runs in a forked child
    global _last_loop
    _last_loop = _LastLoop()


# A child forked from inside a running loop must look its own loop up.
os.register_at_fork(after_in_child=_forget_loop)


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop, or ``None`` under another anyio backend (trio).

    Cached per thread: ``asyncio.get_running_loop()`` makes a ``getpid()`` system call on every
    call (CPython 3.11 checks for a fork), and the router asks several times per request. A
    thread runs one asyncio loop at a time (asyncio refuses to nest them), so the last loop seen
    in this thread is the running one exactly when it is still running; a fork forgets it.
    """
    seen = _last_loop.loop
    if seen is not None:
        loop = seen()
        if loop is not None and loop.is_running():
            return loop
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    _last_loop.loop = weakref.ref(loop)
    return loop


def new_scope(native: bool) -> TaskScope | anyio.CancelScope:
    """A cancel scope for the router's own use.

    ``native``: the code inside only needs asyncio's own cancellation semantics (the aiohttp
    transport: asyncio-native, its responses close without awaiting), so a :class:`TaskScope`
    will do. Otherwise (the httpx transport closes responses under an anyio shield, which a
    bare ``Task.cancel()`` would pierce; transports a test injects) an anyio scope: on asyncio
    the backend's class is built directly, as ``anyio.CancelScope()`` would look up the running
    backend (sniffio, ``current_task``) on every construction, a third of its cost on uvloop.
    On any other loop anyio supports (trio), ``anyio.CancelScope()``.
    """
    loop = running_loop()
    if loop is None:  # not asyncio (trio): let anyio pick the backend
        return anyio.CancelScope()
    return TaskScope(loop) if native else _AsyncioCancelScope()


class Timed(Protocol):
    """What a :class:`Ticker` keeps: something to tell when its time has come."""

    def due(self, now: float) -> None:
        """Called by the ticker once the time it was watched for has passed, or on the first tick
        after it arrived (then it checks the time itself). ``now``: loop time."""

    def waiting(self) -> bool:
        """Whether it is still in a slot or arriving (:meth:`Ticker.pending`)."""


class Ticker:
    """One coarse timer for every :class:`ReadWatchdog` of an event loop.

    A loop timer per watchdog (``loop.call_at`` and its cancel) cost ~2.5 µs on uvloop, and
    nearly every one is cancelled unfired: attempts and relays end long before their first-byte
    or idle limits. Instead a watchdog drops itself into a slot of :data:`RESOLUTION` seconds
    (a set in a dict: a fraction of a microsecond in and out), and one timer, set for the
    earliest slot that has watchdogs, checks a slot's watchdogs when it is due. So a limit
    fires up to :data:`RESOLUTION` late, never early, and the loop holds at most one timer for
    all of them however many requests are open.

    Cheaper still for the common case: a watchdog first only *arrives* (:meth:`arrive`, a list
    append), and the next tick (at most :data:`RESOLUTION` away) slots the ones still armed. A
    read that comes within the tick, as nearly all do, never touches a slot; the arrivals list
    holds a closed watchdog until that tick.
    """

    __slots__ = ("__weakref__", "_arrivals", "_due", "_handle", "_loop", "_slots", "_soon", "_when")

    #: Seconds per slot: how late a limit may fire.
    RESOLUTION = 0.01

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        # Weakly: the loop holds the ticker (through its timer), not the other way round, so a
        # finished loop is collected with its ticker (tests run a loop per test).
        self._loop = weakref.ref(loop)
        self._slots: dict[int, set[Timed]] = {}
        self._due: list[int] = []  # a heap of slot numbers; some may have emptied since
        self._handle: asyncio.TimerHandle | None = None
        self._when = math.inf  # the slot the timer is set for
        self._arrivals: list[Timed] = []
        self._soon = False  # a tick is set for the next slot boundary at the latest

    def watch(self, watchdog: Timed, expires: float) -> int:
        """Call ``watchdog.due(now)`` once ``expires`` (loop time) has passed; returns its slot."""
        slot = int(expires / self.RESOLUTION) + 1  # the first slot boundary after ``expires``
        members = self._slots.get(slot)
        if members is None:
            members = self._slots[slot] = set()
            heapq.heappush(self._due, slot)
            if slot < self._when:
                self._schedule(slot)
        members.add(watchdog)
        return slot

    def arrive(self, watchdog: Timed) -> None:
        """Call ``watchdog.due(now)`` on the next tick (at most :data:`RESOLUTION` away)."""
        self._arrivals.append(watchdog)
        if not self._soon:
            self._soon = True
            loop = self._loop()
            if loop is not None:
                slot = int(loop.time() / self.RESOLUTION) + 1
                if slot < self._when:
                    self._schedule(slot)

    def unwatch(self, watchdog: Timed, slot: int) -> None:
        members = self._slots.get(slot)
        if members is not None:
            members.discard(watchdog)
            if not members:
                del self._slots[slot]

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        return self._loop()

    def pending(self) -> int:
        """Watchdogs waiting for their slot or arriving (tests, leak checks)."""
        arriving = sum(1 for watchdog in self._arrivals if watchdog.waiting())
        return arriving + sum(len(members) for members in self._slots.values())

    def _schedule(self, slot: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        loop = self._loop()
        if loop is None or loop.is_closed():  # pragma: no cover - nothing left to time out
            return
        self._when = slot
        self._handle = loop.call_at(slot * self.RESOLUTION, self._tick)

    def _tick(self) -> None:
        self._handle = None
        self._when = math.inf
        self._soon = False
        loop = self._loop()
        if loop is None:  # pragma: no cover - a timer runs on its loop
            return
        now = loop.time()
        due, slots = self._due, self._slots
        while due and due[0] * self.RESOLUTION <= now:
            members = slots.pop(heapq.heappop(due), None)
            if members:
                for watchdog in members:
                    watchdog.due(now)  # may watch again, in a later slot
        arrivals = self._arrivals
        if arrivals:
            self._arrivals = []
            for watchdog in arrivals:
                if watchdog.waiting():  # closed since it arrived: nothing to do
                    watchdog.due(now)  # overdue, or into its slot
        while due and due[0] not in slots:  # slots that emptied before they were due
            heapq.heappop(due)
        if due and due[0] < self._when:  # unless a watch() meanwhile set the timer as early
            self._schedule(due[0])


# Each loop's ticker, weakly: a ticker lives while it has watchdogs or a timer pending (its
# timer handle holds the loop, so a strong entry here would keep every finished loop alive).
# Keyed by ``id(loop)`` (a weak key would be kept alive by that same handle); an id reused by a
# later loop is caught by the ticker's own weak reference to its loop.
_tickers: weakref.WeakValueDictionary[int, Ticker] = weakref.WeakValueDictionary()


def ticker_for(loop: asyncio.AbstractEventLoop) -> Ticker:
    """``loop``'s :class:`Ticker`. The thread's last one is remembered (weakly, as everywhere
    here: a finished loop's ticker, and whatever its arrivals still hold, must go with it), so
    this is an attribute read and two weak reference calls when a process runs one loop."""
    last = _last_loop.ticker
    if last is not None:
        ticker = last()
        if ticker is not None and ticker._loop() is loop:
            return ticker
    ticker = _tickers.get(id(loop))
    if ticker is None or ticker.loop is not loop:
        ticker = _tickers[id(loop)] = Ticker(loop)
    _last_loop.ticker = weakref.ref(ticker)
    return ticker


class ReadWatchdog(_Armed):
    """Cancels ``scope`` (anyio's) when an armed read outlives its allowance; see the module
    docstring. A :class:`TaskScope` needs none: it is its own."""

    __slots__ = ("_loop", "_scope")

    def __init__(self, scope: TaskScope | anyio.CancelScope) -> None:
        super().__init__()
        self._scope: TaskScope | anyio.CancelScope | None = scope
        # Off asyncio (trio) there is no ticker: the scope's own deadline is used instead.
        self._loop = running_loop()

    def arm(self, seconds: float) -> None:
        """The next read must be done within ``seconds`` (0 or less: at once)."""
        loop = self._loop
        if loop is None:
            self._trio_scope().deadline = anyio.current_time() + seconds
        else:
            self._arm_on(loop, seconds)

    def disarm(self) -> None:
        if self._loop is None:
            self._trio_scope().deadline = math.inf
        else:
            self._expires = math.inf

    def _trio_scope(self) -> anyio.CancelScope:
        scope = self._scope
        assert isinstance(scope, anyio.CancelScope)  # what new_scope() builds off asyncio
        return scope

    def close(self) -> None:
        """Leave the ticker and let the scope go (an arriving watchdog outlives its block by up
        to a tick, and the scope holds the task)."""
        super().close()
        self._scope = None

    def _overrun(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
