"""Time limits on reads: a cancel scope whose deadline moves with every read.

The router bounds every read it waits on: the request body (``body_timeout``), an upstream's
first byte, each later chunk (``idle``), never past an attempt's ``total``. Each of those blocks
of code runs in one :class:`Deadline`, a cancel scope with :func:`asyncio.timeout`'s semantics:
``arm(seconds)`` before a read says by when that read must be done, ``disarm()`` after it stops
the count (time spent writing to a slow *client* is not upstream idleness), and a read that
overruns cancels the block, which then ends with :attr:`Deadline.expired` set instead of raising.

Why not ``asyncio.timeout()`` with ``Timeout.reschedule()`` per read: each reschedule cancels
the loop timer and sets a new one, so a stream would make a timer per chunk. Here the one timer
of a block is only moved *earlier*; a later deadline is noted in an attribute, and the timer,
when it fires early, finds that and sets itself again for the new time. The invariant: a clock
read per chunk and one timer per block, whatever the stream's length (``docs/performance.md``
has the figures). The cancellation itself is
asyncio's own, told apart from anyone else's as ``asyncio.timeout`` does (``Task.cancelling`` /
``Task.uncancel``): a client that leaves, or a server that cancels the request, goes through a
:class:`Deadline` untouched, and a :class:`Deadline`'s own cancellation stops at it.

Unlike a scope of anyio's, the cancellation is delivered once (edge-triggered): clean-up in a
``finally`` inside the block (closing an upstream response) is not cancelled again. The router
runs on asyncio (uvloop welcome), which is what this module relies on.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType

__all__ = ["Deadline"]


class Deadline:
    """``with Deadline() as deadline:`` inside an asyncio task; see the module docstring.

    :meth:`cancel` (from another task or a callback, never from the block's own task) ends the
    block at its next ``await``; :meth:`arm` makes the scope cancel itself once that much time
    has passed without a :meth:`disarm` or a later :meth:`arm`. Subclasses change what an
    overrun does by overriding :meth:`_overrun`.
    """

    __slots__ = ("_base", "_cancelled", "_exited", "_expires", "_handle", "_loop", "_task", "expired")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[object] | None = None
        self._base = 0
        self._expires = math.inf
        self._handle: asyncio.TimerHandle | None = None
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
        self._loop = task.get_loop()
        self._base = task.cancelling()
        return self

    def arm(self, seconds: float) -> None:
        """The next read must be done within ``seconds`` (0 or less: at once)."""
        loop = self._loop
        assert loop is not None, "arm() inside the block"
        expires = self._expires = loop.time() + seconds
        handle = self._handle
        if handle is None:
            self._handle = loop.call_at(expires, self._due)
        elif expires < handle.when():  # earlier than the timer: move it (later ones wait for it)
            handle.cancel()
            self._handle = loop.call_at(expires, self._due)

    def disarm(self) -> None:
        """Stop counting until the next :meth:`arm`."""
        self._expires = math.inf

    def cancel(self) -> None:
        """Cancel the block (once); nothing before entry, after exit, or when already done."""
        if self._cancelled or self._exited or self._task is None:
            return
        self._cancelled = True
        self._task.cancel()

    def _due(self) -> None:
        """The timer fired: cancel if the armed read is overdue, else wait for its new time."""
        self._handle = None
        if self._exited:  # pragma: no cover - exit cancels the timer
            return
        expires = self._expires
        if expires == math.inf:
            return
        assert self._loop is not None
        if self._loop.time() >= expires:
            self._overrun()
        else:  # re-armed later since the timer was set
            self._handle = self._loop.call_at(expires, self._due)

    def _overrun(self) -> None:
        self.cancel()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self._exited = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
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
