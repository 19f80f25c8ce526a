"""Listening for a client that leaves, without a task per request for the answers that come fast.

ASGI tells an app that its client left only through ``receive()`` returning ``http.disconnect``,
so noticing it while the router waits on an upstream takes a second task blocked in
``receive()``. Creating, running and cancelling that task costs ~5 µs on uvloop, a fair share
of a fast request's whole cost, and a request answered within a few milliseconds never needs
it: there is nothing left to cancel by the time a disconnect could be noticed.

So the listener starts late: :class:`DisconnectWatch` asks the loop's
:class:`~asgi_router.watchdog.Ticker` to start it :data:`WATCH_AFTER` seconds into the upstream
work (one or two ticker slots: 10 to 20 ms). A request done by then never creates it; a longer
one (every real model call, every stream) gets it, and a client that leaves is noticed at most
that much later than with a listener from the first moment. Waiting on ``receive()`` early
would not notice anything sooner in the common case anyway: servers report the disconnect
when the connection closes, which a client that just sent its request rarely does within 20 ms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from types import TracebackType
from typing import Any, Final

import anyio

from .events import logger
from .watchdog import TaskScope, Ticker, ticker_for

__all__ = ["WATCH_AFTER", "DisconnectWatch", "Watching"]

#: Seconds into the upstream work at which the disconnect listener starts (plus up to one
#: ticker slot, :data:`Ticker.RESOLUTION`).
WATCH_AFTER: Final = 0.01


class DisconnectWatch:
    """Awaits ``receive()`` from :data:`WATCH_AFTER` seconds on; calls ``left()`` on a disconnect.

    The listener is ``receive()``'s own awaitable run as a task, with a done-callback (no
    coroutine of ours around it: that frame would be held for every open stream). A message
    other than ``http.disconnect`` starts the next ``receive()``; a ``receive()`` that fails is
    logged and taken as the client being gone, since nobody awaits the task.
    """

    __slots__ = ("_left", "_loop", "_receive", "_slot", "_task", "_ticker")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        receive: Callable[[], Awaitable[Mapping[str, Any]]],
        left: Callable[[], None],
        after: float = WATCH_AFTER,
    ) -> None:
        self._loop = loop
        self._receive = receive
        self._left = left
        self._task: asyncio.Future[Mapping[str, Any]] | None = None
        self._ticker: Ticker = ticker_for(loop)
        self._slot: int | None = self._ticker.watch(self, loop.time() + after)

    @property
    def listening(self) -> bool:
        """Whether the listener task has been started (tests)."""
        return self._task is not None

    def due(self, now: float) -> None:
        """The ticker's call: the request is still going, so start listening."""
        self._slot = None
        self._listen()

    def _listen(self) -> None:
        task = asyncio.ensure_future(self._receive(), loop=self._loop)
        task.add_done_callback(self._heard)
        self._task = task

    def _heard(self, task: asyncio.Future[Mapping[str, Any]]) -> None:
        if task is not self._task or task.cancelled():  # closed meanwhile
            return
        self._task = None
        failure = task.exception()
        if failure is not None:
            logger.error("asgi_router: receive() failed while waiting for a disconnect", exc_info=failure)
        elif task.result().get("type") != "http.disconnect":
            self._listen()
            return
        self._left()

    def close(self) -> None:
        """The work is done: never start the listener, or cancel it (not awaited: it only waits
        in ``receive()``, and ending it needs nothing from the request)."""
        if self._slot is not None:
            self._ticker.unwatch(self, self._slot)
            self._slot = None
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()


class Watching:
    """``with Watching(...):`` runs the block in ``scope``, which a client leaving cancels.

    A plain context manager rather than a coroutine wrapping the block: the request's work is
    awaited by the caller's own frame, so no extra coroutine frame is held per open stream.
    ``left(scope)`` decides what a disconnect does (the router cancels ``scope`` unless the
    response is complete); ``done()`` runs first on the way out (the router marks the response
    finished, so a disconnect heard from then on is no abort).
    """

    __slots__ = ("_done", "_left", "_loop", "_receive", "_scope", "_watch")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        scope: TaskScope | anyio.CancelScope,
        receive: Callable[[], Awaitable[Mapping[str, Any]]],
        left: Callable[[TaskScope | anyio.CancelScope], None],
        done: Callable[[], None],
    ) -> None:
        self._loop = loop
        self._scope = scope
        self._receive = receive
        self._left = left
        self._done = done
        self._watch: DisconnectWatch | None = None

    def __enter__(self) -> TaskScope | anyio.CancelScope:
        scope = self._scope
        scope.__enter__()
        # partial(), not a method of self: the watch must not refer back to this object (a
        # reference cycle per request would leave each one to the cyclic garbage collector).
        self._watch = DisconnectWatch(self._loop, self._receive, partial(self._left, scope))
        return scope

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._done()
        watch, self._watch = self._watch, None
        if watch is not None:
            watch.close()
        return self._scope.__exit__(exc_type, exc, tb)
