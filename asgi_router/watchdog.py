"""Per-read time limits at the cost of a clock read, instead of a cancel scope per chunk.

The attempt loop and the relay bound every upstream read (first byte, then ``idle`` between
chunks, never past the attempt's ``total``). ``anyio.fail_after`` around each read is the
obvious spelling, but each one builds a cancel scope and a timer: ~8 µs on uvloop, more than
relaying the chunk itself, so a 20-chunk stream paid ~150 µs for its timeouts alone.

A :class:`ReadWatchdog` guards one cancel scope the caller already has. :meth:`arm` before a
read records when that read must be done by; :meth:`disarm` after it stops the count (time
spent waiting on a slow *client* is not upstream idleness). On asyncio a single timer is
scheduled lazily and re-armed only when it fires early, so a stream of chunks costs one timer
per ``idle`` period rather than one per chunk; when a read really overruns, the watchdog
cancels the scope and the caller sees ``scope.cancelled_caught``. On any other anyio backend
(trio) it moves the scope's own ``deadline`` instead: slower, same behaviour.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType

import anyio

# anyio's asyncio backend class (what ``anyio.CancelScope()`` returns on asyncio), built
# directly by new_scope(). A private module of anyio 4: tests/ exercise it on every request.
from anyio._backends._asyncio import CancelScope as _AsyncioCancelScope

__all__ = ["ReadWatchdog", "TaskScope", "new_scope"]


class TaskScope:
    """A cancel scope for the current asyncio task, at a quarter of an anyio scope's cost.

    The router's own scopes (one around each request's upstream work, one per attempt, one per
    relay) are only ever cancelled by the router itself: from the disconnect watcher task or a
    watchdog's timer callback, never from inside the task that runs the scope. For that use
    anyio's level-triggered machinery (a task-state registry, a cancel-delivery loop re-run every
    loop turn) is more than is needed and cost ~2.2 µs per scope on uvloop against ~0.6 µs here.

    Semantics are ``asyncio.timeout``'s, the standard library's own cancel scope: :meth:`cancel`
    calls ``Task.cancel()`` once; on exit, a ``CancelledError`` is swallowed (and
    :attr:`cancelled_caught` set) only if this scope asked for it and nobody else did
    meanwhile, which ``Task.uncancel()`` tells. So an enclosing scope's cancellation (or the
    server cancelling the request task) passes through an inner scope untouched, and an inner
    scope's own cancellation stops at it. Unlike anyio's, the cancellation is delivered once
    (edge-triggered): cleanup in ``finally`` blocks inside the scope is not cancelled again,
    which is what closing an upstream response needs.

    What it does not do is hold off anyio: a ``Task.cancel()`` pierces anyio's shields, and an
    anyio task group inside takes it for its own cancellation. So :func:`new_scope` builds one
    only around code that is asyncio-native throughout (the aiohttp transport), and never around
    the hedging race's task group.
    """

    __slots__ = ("_base", "_cancelled", "_exited", "_task", "cancelled_caught")

    def __init__(self) -> None:
        self._task: asyncio.Task[object] | None = None
        self._base = 0
        self._cancelled = False
        self._exited = False
        #: Whether this scope's own cancellation ended the block (as anyio's attribute).
        self.cancelled_caught = False

    def __enter__(self) -> TaskScope:
        task = asyncio.current_task()
        if task is None:  # pragma: no cover - new_scope() only builds one inside a task
            raise RuntimeError("TaskScope must be entered inside an asyncio task")
        self._task = task
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
        if not self._cancelled:
            return False
        assert self._task is not None
        # Take back our request either way (the block may have ended before it landed); swallow
        # the CancelledError only when no other cancellation is pending on the task.
        if self._task.uncancel() <= self._base and exc_type is asyncio.CancelledError:
            self.cancelled_caught = True
            return True
        return False


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
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): let anyio pick the backend
        return anyio.CancelScope()
    return TaskScope() if native else _AsyncioCancelScope()


class ReadWatchdog:
    """Cancels ``scope`` when an armed read outlives its allowance; see the module docstring."""

    __slots__ = ("_expires", "_handle", "_loop", "_scope", "_when")

    def __init__(self, scope: TaskScope | anyio.CancelScope) -> None:
        self._scope = scope
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio: use the scope's own deadline
            self._loop = None
        self._expires = math.inf
        self._handle: asyncio.TimerHandle | None = None
        self._when = math.inf

    def arm(self, seconds: float) -> None:
        """The next read must be done within ``seconds`` (0 or less: at once)."""
        loop = self._loop
        if loop is None:
            self._trio_scope().deadline = anyio.current_time() + seconds
            return
        self._expires = expires = loop.time() + seconds
        if expires < self._when:  # earlier than the pending check (or none pending): move it
            if self._handle is not None:
                self._handle.cancel()
            self._when = expires
            self._handle = loop.call_at(expires, self._check)

    def disarm(self) -> None:
        """Stop counting until the next :meth:`arm` (e.g. while the client is being written to)."""
        if self._loop is None:
            self._trio_scope().deadline = math.inf
        else:
            self._expires = math.inf

    def _trio_scope(self) -> anyio.CancelScope:
        scope = self._scope
        assert isinstance(scope, anyio.CancelScope)  # what new_scope() builds off asyncio
        return scope

    def close(self) -> None:
        """Drop the pending timer, if any; the watchdog is done."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._when = self._expires = math.inf

    def _check(self) -> None:
        assert self._loop is not None
        self._handle = None
        self._when = math.inf
        expires = self._expires
        if expires == math.inf:
            return
        if self._loop.time() >= expires:
            self._scope.cancel()
        else:  # the read was re-armed since this timer was set: check again when it is due
            self._when = expires
            self._handle = self._loop.call_at(expires, self._check)
