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

import anyio

# anyio's asyncio backend class (what ``anyio.CancelScope()`` returns on asyncio), built
# directly by new_scope(). A private module of anyio 4: tests/ exercise it on every request.
from anyio._backends._asyncio import CancelScope as _AsyncioCancelScope

__all__ = ["ReadWatchdog", "new_scope"]


def new_scope(*, shield: bool = False) -> anyio.CancelScope:
    """``anyio.CancelScope(shield=shield)``, built without asking which async library runs.

    ``anyio.CancelScope()`` looks up the running backend (sniffio's ``current_async_library``
    and a ``current_task`` call) on every construction: a third of a scope's cost on uvloop,
    paid several times per request. On asyncio the backend's own class is built directly (it is
    the same class ``anyio.CancelScope()`` returns there); any other loop takes the usual way.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (trio): let anyio pick the backend
        return anyio.CancelScope(shield=shield)
    return _AsyncioCancelScope(shield=shield)


class ReadWatchdog:
    """Cancels ``scope`` when an armed read outlives its allowance; see the module docstring."""

    __slots__ = ("_expires", "_handle", "_loop", "_scope", "_when")

    def __init__(self, scope: anyio.CancelScope) -> None:
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
            self._scope.deadline = anyio.current_time() + seconds
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
            self._scope.deadline = math.inf
        else:
            self._expires = math.inf

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
