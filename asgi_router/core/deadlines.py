"""Time limits on reads: a cancel scope whose deadline moves with every read.

The router bounds every read it waits on: the request body (``body_timeout``), an upstream's
first byte, each later chunk (``idle``), never past an attempt's ``total``. Each of those blocks
of code runs in one :class:`Deadline`, a cancel scope with :func:`asyncio.timeout`'s semantics:
``arm(seconds)`` before a read says by when that read must be done, ``disarm()`` after it stops
the count (time spent writing to a slow *client* is not upstream idleness), and a read that
overruns cancels the block, which then ends with :attr:`Deadline.expired` set instead of raising.

Why not ``asyncio.timeout()`` with ``Timeout.reschedule()`` per read: each reschedule cancels
the loop timer and sets a new one, so a stream would make a timer per chunk. Here a timer is
only moved *earlier*; a later deadline is noted in an attribute, and the timer, when it fires
early, finds that and sets itself again for the new time. The invariant: a clock read per chunk
and one timer per block, whatever the stream's length (``docs/performance.md`` has the figures).

**One timer per request, not per block.** A loop timer is made, scheduled and cancelled for
every block that has one, and most blocks end long before their limit. So a scope can *lend*
its timer (``Deadline(lends=True)``, for as long as the scope lasts): every :class:`Deadline`
entered inside it, in its task or in a task started from it (a hedge's racer), keeps no timer
of its own but has the lender's fire by its deadline. The lender's one timer is set for the
earliest deadline of the lender and of the scopes riding on it; when it fires, it ends every
scope whose deadline has passed and sets itself again for the earliest one left. The request's
listening scope (``inbound/disconnect.py``) lends its timer: its own 10 ms mark is the earliest
deadline of nearly every request, so a request answered within it makes one loop timer for its
attempts and its relay, however many. Which scope ends, when, and how is what it was with a
timer each: a scope's deadline is checked against the loop's clock when the shared timer fires,
as its own timer's would have been. The lender is found through a context variable, which a
task started inside the scope inherits; scopes still open when the lender ends (a racer that
outlives it) get timers of their own at that moment.

**Reads, bounded through one helper.** Code that waits on a read (the request body, an
upstream's answer, each chunk a relay reads) holds no scope of its own: it runs its reads in a
:func:`reading` block, which bounds them in the request's listening scope when the block runs in
the request's task (no timer, no scope per attempt), and in a :class:`Deadline` of its own
otherwise (a hedge's racer, whose bound on the request's scope would cancel the request's task,
or code outside a request). The block as a whole may be bounded (``seconds``: the body's
``body_timeout``, an attempt's first byte), and each read made through :meth:`Reads.next` is
bounded by ``idle``, never past ``deadline`` (or each read begun by :meth:`Reads.start`, for a
stream's reads), until :meth:`Reads.done` says it came: between
reads nothing is timed (a slow client is backpressure, not upstream idleness). A read that
overruns cuts the block short: it ends without an exception and :attr:`Reads.expired` says so.
Underneath, a stretch of the block is bounded on the scope (:meth:`Deadline.bound`, moved read
after read, stopped between reads, ended by :meth:`Deadline.unbound`), timed by the scope's
timer or its lender's; :func:`reading` is the only user of those (a unit test scans the
package).

The cancellation itself is asyncio's own, told apart from anyone else's as ``asyncio.timeout``
does (``Task.cancelling`` / ``Task.uncancel``): a client that leaves, or a server that cancels
the request, goes through a :class:`Deadline` untouched, and a :class:`Deadline`'s own
cancellation stops at it.

Unlike a scope of anyio's, the cancellation is delivered once (edge-triggered): clean-up in a
``finally`` inside the block (closing an upstream response) is not cancelled again. The router
runs on asyncio (uvloop welcome), which is what this module relies on.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar, Token
from types import TracebackType

__all__ = ["Deadline", "Reads", "reading"]

# The scope lending its timer to the scopes entered inside it (see the module docstring); a
# value per task context, set and reset by the lending scope itself.
_lender: ContextVar[Deadline | None] = ContextVar("asgi_router_deadline_lender", default=None)

# asyncio's own loops tell time with time.monotonic: a read bounded on one of them reads the
# clock once, not once more through the loop (docs/performance.md). Any other loop (uvloop, a
# test's fake clock) is asked through its own time().
_STDLIB_LOOP_TIME = asyncio.BaseEventLoop.time


class Deadline:
    """``with Deadline() as deadline:`` inside an asyncio task; see the module docstring.
    ``lends``: the scopes entered inside it ride on its timer.

    :meth:`cancel` (from another task or a callback, never from the block's own task) ends the
    block at its next ``await``; :meth:`arm` makes the scope cancel itself once that much time
    has passed without a :meth:`disarm` or a later :meth:`arm`. Subclasses change what an
    overrun does by overriding :meth:`_overrun`.
    """

    __slots__ = (
        "_base",
        "_bound",
        "_bound_cut",
        "_cancelled",
        "_exited",
        "_expires",
        "_handle",
        "_host",
        "_lends",
        "_loop",
        "_now",
        "_reads",
        "_riders",
        "_task",
        "_token",
        "_when",
        "expired",
    )

    def __init__(self, *, lends: bool = False) -> None:
        self._lends = lends
        self._loop: asyncio.AbstractEventLoop | None = None
        # The loop's clock, read directly when it is time.monotonic (set on entry).
        self._now: Callable[[], float] = time.monotonic
        self._task: asyncio.Task[object] | None = None
        self._base = 0
        self._expires = math.inf
        # A stretch of the block bounded by :meth:`bound`: by when it must end, and whether the
        # bound cancelled the task.
        self._bound = math.inf
        self._bound_cut = False
        # This scope's loop timer, and the time it is set for (``inf``: none).
        self._handle: asyncio.TimerHandle | None = None
        self._when = math.inf
        # The lender whose timer this scope rides on (``None``: its own timer, if any).
        self._host: Deadline | None = None
        # The scopes riding on this one's timer, while it lends it.
        self._riders: list[Deadline] | None = None
        self._token: Token[Deadline | None] | None = None
        # A lender's block of reads, made once and used by each block in its task in turn.
        self._reads: Reads | None = None
        self._cancelled = False
        self._exited = False
        #: Whether this scope's own cancellation ended the block (a read overran, or
        #: :meth:`cancel`): the block was left early, without an exception.
        self.expired = False

    def __enter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - the router only enters one inside a request's task
            raise RuntimeError("a Deadline must be entered inside an asyncio task")
        self._task = task
        loop = self._loop = task.get_loop()
        if type(loop).time is not _STDLIB_LOOP_TIME:
            self._now = loop.time
        self._base = task.cancelling()
        host = _lender.get()
        if host is not None and host._riders is not None and host._loop is loop:
            self._host = host
            host._riders.append(self)
        if self._lends:  # from now until this scope ends, scopes entered inside ride on its timer
            self._riders = []
            self._token = _lender.set(self)
        return self

    def arm(self, seconds: float) -> None:
        """The next read must be done within ``seconds`` (0 or less: at once)."""
        loop = self._loop
        assert loop is not None, "arm() inside the block"
        expires = self._expires = loop.time() + seconds
        owner = self._host or self
        if expires < owner._when:  # earlier than the timer: move it (later ones wait for it)
            mark = owner._expires  # a lender's own deadline may be noted with no timer set yet
            owner._schedule(expires if expires <= mark else mark)

    def disarm(self) -> None:
        """Stop counting until the next :meth:`arm`."""
        self._expires = math.inf

    def bound(self, seconds: float) -> None:
        """Bound a stretch of the block to ``seconds`` from now, until :meth:`unbound`: past it,
        the block's task is cancelled. No scope of its own: the stretch is timed by this scope's
        timer (or its lender's) and its cancellation taken back by :meth:`unbound`, which the
        code that bounds the stretch calls in ``except asyncio.CancelledError`` and after it.
        One stretch at a time; a later :meth:`bound` moves it (a read after a read)."""
        loop = self._loop
        assert loop is not None, "bound() inside the block"  # a bound after it cuts nothing (_cut)
        expires = self._bound = loop.time() + seconds
        owner = self._host or self
        if expires < owner._when:  # as arm(): the timer only ever moves earlier
            mark = owner._expires
            owner._schedule(expires if expires <= mark else mark)

    def lift(self) -> None:
        """The bounded read is done: its time stops counting until the next :meth:`bound` (as
        :meth:`disarm` after :meth:`arm`; per chunk of a stream, so nothing more). Whether the
        bound cut the stretch is still :meth:`unbound`'s to say, where the stretch ends."""
        self._bound = math.inf

    def unbound(self) -> bool:
        """End the stretch :meth:`bound` began; ``True`` when the bound cut it short and the
        ``CancelledError`` it caused is to be swallowed (no other cancellation is pending on the
        task, as :meth:`__exit__` decides for the scope's own). Its request is taken back either
        way; a second call says ``False``."""
        self._bound = math.inf
        if not self._bound_cut:
            return False
        self._bound_cut = False
        assert self._task is not None
        return self._task.uncancel() <= self._base

    def cancel(self) -> None:
        """Cancel the block (once); nothing before entry, after exit, or when already done."""
        if self._cancelled or self._exited or self._task is None:
            return
        self._cancelled = True
        self._task.cancel()

    def _schedule(self, when: float) -> None:
        assert self._loop is not None
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(when, self._due)
        self._when = when

    def _due(self) -> None:
        """The timer fired: end every scope it serves whose read is overdue, then set it again
        for the earliest deadline left (a read re-armed later since the timer was set)."""
        self._handle = None
        self._when = math.inf
        if self._exited:  # pragma: no cover - exit cancels the timer
            return
        assert self._loop is not None
        now = self._loop.time()
        earliest = self._expires
        if earliest <= now:
            self._expires = earliest = math.inf
            self._overrun()
        if self._bound < math.inf:
            earliest = self._cut(now, earliest)
        if self._riders:
            for rider in tuple(self._riders):
                expires = rider._expires
                if expires <= now:
                    rider._expires = math.inf
                    rider._overrun()
                elif expires < earliest:
                    earliest = expires
                if rider._bound < math.inf:
                    earliest = rider._cut(now, earliest)
        if earliest < math.inf and not self._exited:
            self._schedule(earliest)

    def _overrun(self) -> None:
        self.cancel()

    def _cut(self, now: float, earliest: float) -> float:
        """The timer fired with a stretch bounded: cancel the task if it is overdue; the
        earliest time the timer is needed for, this bound included."""
        bound = self._bound
        if bound > now:
            return bound if bound < earliest else earliest
        self._bound = math.inf
        if not self._exited and self._task is not None:
            self._bound_cut = True
            self._task.cancel()
        return earliest

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self._exited = True
        host = self._host
        if host is not None:
            self._host = None
            riders = host._riders
            if riders:
                if riders[-1] is self:
                    riders.pop()
                elif self in riders:  # pragma: no cover - scopes of racing tasks end in any order
                    riders.remove(self)
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._riders is not None:
            self._release()
        task, self._task = self._task, None
        if not self._cancelled:
            return False
        assert task is not None
        # Take back our request either way (the block may have ended before it landed); swallow
        # the CancelledError only when no other cancellation is pending on the task.
        if task.uncancel() <= self._base and exc_type is asyncio.CancelledError:
            self.expired = True
            return True
        return False

    def _release(self) -> None:
        """Stop lending: scopes still riding (a racer's that outlives this one) get timers of
        their own, and the context variable is as it was."""
        riders, self._riders = self._riders, None
        token, self._token = self._token, None
        self._reads = None  # its block of reads refers back to it: no cycle left behind
        if token is not None:
            _lender.reset(token)
        for rider in riders or ():
            rider._host = None
            when = min(rider._expires, rider._bound)
            if when < math.inf:
                rider._schedule(when)


class Reads:
    """A block of reads (:func:`reading` makes it): ``with reading(...) as reads:``; each read
    made through :meth:`next` is bounded, a read that overruns ends the block without an
    exception (:attr:`expired`), any other cancellation (the client leaving, the server) goes
    through it."""

    __slots__ = ("_clock", "_loop_now", "_own", "_scope", "_seconds", "deadline", "expired", "idle")

    # Set by reading(), which makes the block (no __init__ to call: docs/performance.md).
    _scope: Deadline
    #: Whether the scope is the block's own (entered and left with it).
    _own: bool
    _seconds: float
    _clock: Callable[[], float]
    # The scope's loop clock when it is not the block's own clock (``None``: one reading serves both).
    _loop_now: Callable[[], float] | None
    #: How long each read may take, and by when (on the block's clock) the last one must be
    #: done; a block may move them between reads (an attempt's reads after its first byte).
    idle: float
    deadline: float
    #: Whether a read (or the block's own limit) overran and cut the block short.
    expired: bool

    def __enter__(self) -> Reads:
        scope = self._scope
        if self._own:
            scope.__enter__()
        loop_now = scope._now  # known once the scope is entered
        self._loop_now = None if self._clock is loop_now else loop_now
        if self._seconds < math.inf:
            scope.bound(self._seconds)
        return self

    def start(self) -> None:
        """A read starts now, to be awaited at once (``await chunks.__anext__()``): cut once
        ``idle`` has passed or ``deadline`` has come, and not counted once it came (call
        :meth:`done`: a slow client is not upstream idleness)."""
        # Deadline.bound's work inline, once per chunk of a stream (docs/performance.md).
        scope = self._scope
        now = self._clock()
        left = self.deadline - now
        idle = self.idle
        loop_now = self._loop_now
        if loop_now is not None:
            now = loop_now()
        expires = scope._bound = now + (idle if idle < left else left)
        owner = scope._host or scope
        if expires < owner._when:  # as bound(): the timer only ever moves earlier
            mark = owner._expires
            owner._schedule(expires if expires <= mark else mark)

    def next(self, chunks: AsyncIterator[bytes]) -> Awaitable[bytes]:
        """The next of ``chunks``, to await: a read :meth:`start` ed (then :meth:`done`)."""
        self.start()
        return chunks.__anext__()  # no anext() wrapper held while idle

    def done(self) -> None:
        """The read made by :meth:`next` came in: from now until the next one, nothing is timed."""
        self._scope._bound = math.inf  # Deadline.lift's work inline

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        scope = self._scope
        scope._bound = math.inf
        cut = scope._bound_cut and scope.unbound()  # a bound of this block cut it: taken back
        if self._own:
            scope.__exit__(exc_type, exc, tb)
        if cut and exc_type is asyncio.CancelledError:
            self.expired = True
            return True
        return False


def reading(
    seconds: float = math.inf,
    idle: float = math.inf,
    deadline: float = math.inf,
    clock: Callable[[], float] = time.monotonic,
) -> Reads:
    """``with reading(seconds, idle, deadline, clock) as reads:`` a block of reads done within
    ``seconds`` of entering it, each read made through :meth:`Reads.next` within ``idle`` and
    before ``deadline`` (on ``clock``); ``math.inf``: no such limit. Enter it in the task that
    reads (see the module docstring).

    In the request's task the block is the request's own (one per request, its blocks one after
    another: docs/performance.md), bounded on its scope; elsewhere (a hedge's racer, whose bound
    on the request's scope would cancel the request's task, or no request) a block with a scope
    of its own.
    """
    scope = _lender.get()
    if scope is not None and scope._task is asyncio.current_task():
        reads = scope._reads
        if reads is None:
            reads = scope._reads = Reads()
            reads._scope = scope
            reads._own = False
    else:
        reads = Reads()
        reads._scope = Deadline()
        reads._own = True
    reads._seconds = seconds
    reads.idle = idle
    reads.deadline = deadline
    reads._clock = clock
    reads.expired = False
    return reads
