"""Listening for a client that leaves, without a task per request for the answers that come fast.

ASGI tells an app that its client left only through ``receive()`` returning ``http.disconnect``,
so noticing it while the router waits on an upstream takes a second task blocked in
``receive()``. Creating, running and cancelling that task costs ~5 µs on uvloop, a fair share
of a fast request's whole cost, and a request answered within a few milliseconds never needs
it: there is nothing left to cancel by the time a disconnect could be noticed.

So the listener starts late: :class:`Watching` asks the loop's
:class:`~asgi_router.watchdog.Ticker` to start it :data:`WATCH_AFTER` seconds into the upstream
work (one or two ticker slots: 10 to 20 ms). A request done by then never creates it; a longer
one (every real model call, every stream) gets it, and a client that leaves is noticed at most
that much later than with a listener from the first moment. Waiting on ``receive()`` early
would not notice anything sooner in the common case anyway: servers report the disconnect
when the connection closes, which a client that just sent its request rarely does within 20 ms.

One object per request does it all (the context manager, the ticker's entry, the listener's
callback), and it talks to the request through one :class:`Party` rather than through bound
methods and partials: every object a request holds while it waits on an upstream is one more
for each young-generation garbage collection to walk (see docs/performance.rst).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import MutableMapping
from types import TracebackType
from typing import Any, Final, Protocol

import anyio
from starlette.types import Receive

from .events import logger
from .watchdog import ARRIVING, TaskScope, ticker_for

__all__ = ["WATCH_AFTER", "Party", "Watching"]

#: Seconds into the upstream work at which the disconnect listener starts (plus up to one
#: ticker slot, :data:`~asgi_router.watchdog.Ticker.RESOLUTION`).
WATCH_AFTER: Final = 0.01


class Party(Protocol):
    """The request being watched: where to listen, what to do when its client leaves."""

    @property
    def receive(self) -> Receive: ...

    def client_left(self, scope: TaskScope | anyio.CancelScope) -> None:
        """The client disconnected while the block ran (typically: cancel ``scope``)."""

    def complete(self) -> None:
        """The block is over (called first on the way out): a disconnect heard from now on is
        no abort."""


class Watching:
    """``with Watching(loop, scope, party):`` runs the block in ``scope``, which the client
    leaving cancels (through ``party.client_left(scope)``).

    A plain context manager rather than a coroutine wrapping the block: the request's work is
    awaited by the caller's own frame, so no extra coroutine frame is held per open stream.
    From :data:`WATCH_AFTER` seconds into the block, the listener is ``party.receive()``'s own
    awaitable run as a task with a done-callback (no coroutine of ours around it). A message
    other than ``http.disconnect`` starts the next ``receive()``; a ``receive()`` that fails is
    logged and taken as the client being gone, since nobody awaits the task.

    Nothing refers back to this object but the ticker (while it waits for its slot) and the
    listener's callback (until the listener ends), so a finished request leaves no cycle.
    """

    __slots__ = ("_after", "_listen_at", "_loop", "_party", "_scope", "_slot", "_task", "_ticker")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        scope: TaskScope | anyio.CancelScope,
        party: Party,
        after: float = WATCH_AFTER,
    ) -> None:
        self._loop = loop
        self._scope = scope
        self._party = party
        self._after = after
        self._ticker = ticker_for(loop)
        self._listen_at = math.inf
        self._slot: int | None = None
        self._task: asyncio.Future[MutableMapping[str, Any]] | None = None

    @property
    def listening(self) -> bool:
        """Whether the listener task is running (tests)."""
        return self._task is not None

    def __enter__(self) -> TaskScope | anyio.CancelScope:
        scope = self._scope
        scope.__enter__()
        self._listen_at = self._loop.time() + self._after
        self._slot = ARRIVING  # the next tick slots it (a block over by then never is)
        self._ticker.arrive(self)
        return scope

    def waiting(self) -> bool:
        return self._slot is not None

    def due(self, now: float) -> None:
        """The ticker's call: its slot has come, or the tick after it arrived."""
        if self._slot is None:  # the block is over
            return
        if now < self._listen_at:
            self._slot = self._ticker.watch(self, self._listen_at)
            return
        self._slot = None
        self._listen()

    def _listen(self) -> None:
        task = asyncio.ensure_future(self._party.receive(), loop=self._loop)
        task.add_done_callback(self._heard)
        self._task = task

    def _heard(self, task: asyncio.Future[MutableMapping[str, Any]]) -> None:
        if task is not self._task or task.cancelled():  # closed meanwhile
            return
        self._task = None
        failure = task.exception()
        if failure is not None:
            logger.error("asgi_router: receive() failed while waiting for a disconnect", exc_info=failure)
        elif task.result().get("type") != "http.disconnect":
            self._listen()
            return
        self._party.client_left(self._scope)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._party.complete()
        slot = self._slot
        if slot is not None:  # never started: leave the ticker (an arrival is dropped by its tick)
            if slot != ARRIVING:
                self._ticker.unwatch(self, slot)
            self._slot = None
        if self._task is not None:
            # Cancelled, not awaited: it only waits in receive(), and ending it needs nothing
            # from the request.
            task, self._task = self._task, None
            task.cancel()
        return self._scope.__exit__(exc_type, exc, tb)
