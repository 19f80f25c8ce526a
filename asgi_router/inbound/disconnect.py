"""Listening for a client that leaves, without a task per request for the answers that come fast.

ASGI tells an app that its client left only through ``receive()`` returning ``http.disconnect``,
so noticing it while the router waits on an upstream takes a second task blocked in
``receive()``. Creating, running and cancelling that task costs ~5 µs on uvloop, a fair share
of a fast request's whole cost, and a request answered within a few milliseconds never needs
it: there is nothing left to cancel by the time a disconnect could be noticed.

So the listener starts late: the request's cancel scope asks the loop's
:class:`~asgi_router.core.deadlines.Ticker` to start it :data:`WATCH_AFTER` seconds into the upstream
work (one or two ticker slots: 10 to 20 ms). A request done by then never creates it; a longer
one (every real model call, every stream) gets it, and a client that leaves is noticed at most
that much later than with a listener from the first moment. Waiting on ``receive()`` early
would not notice anything sooner in the common case anyway: servers report the disconnect
when the connection closes, which a client that just sent its request rarely does within 20 ms.

:func:`watching` gives the block's scope. On the asyncio-native path it is one object, a
:class:`ListeningScope`: the request's :class:`~asgi_router.core.deadlines.TaskScope`, its ticker
entry and the listener's callback at once (every object a request holds while it waits on an
upstream is one more for each young-generation garbage collection to walk, see
docs/performance.rst). An anyio scope (hedged plans, the httpx transport) is wrapped by a
:class:`Watching` instead. Either talks to the request through one :class:`Party`, not through
bound methods.
"""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from types import TracebackType
from typing import Any, Final, Protocol

import anyio
from starlette.types import Receive

from asgi_router.core.deadlines import TaskScope, _Armed, new_scope
from asgi_router.observability.events import logger

__all__ = ["ListeningScope", "Party", "WATCH_AFTER", "Watching", "watching"]

#: Seconds into the upstream work at which the disconnect listener starts (plus up to one
#: ticker slot, :data:`~asgi_router.core.deadlines.Ticker.RESOLUTION`).
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


class _Listening:
    """The listener: ``party.receive()``'s own awaitable run as a task, with a done-callback (no
    coroutine of ours around it). A message other than ``http.disconnect`` starts the next
    ``receive()``; a ``receive()`` that fails is logged and taken as the client being gone,
    since nobody awaits the task. Started by the ticker (``_overrun``: the watch's time has
    come), stopped on the way out of the block.

    Nothing refers back to the object but the ticker (while it waits) and the listener's
    callback (until the listener ends), so a finished request leaves no cycle.
    """

    # Empty: the two classes below declare the slots (two bases with slots of their own cannot
    # be combined); mypy cannot see that, hence the ignores where the mixin assigns them.
    __slots__ = ()

    _loop: asyncio.AbstractEventLoop | None  # the scope's loop (a TaskScope's own, for ListeningScope)
    _party: Party | None  # dropped on the way out: the ticker may hold this object a tick longer
    _listener: asyncio.Future[MutableMapping[str, Any]] | None

    @property
    def listening(self) -> bool:
        """Whether the listener task is running (tests)."""
        return self._listener is not None

    def _watched_scope(self) -> TaskScope | anyio.CancelScope:
        raise NotImplementedError

    def _overrun(self) -> None:
        """The ticker's call once :data:`WATCH_AFTER` has passed: the block is still going."""
        self._listen()

    def _listen(self) -> None:
        if self._party is None:  # pragma: no cover - the block is over: the ticker dropped it
            return
        task = asyncio.ensure_future(self._party.receive(), loop=self._loop)
        task.add_done_callback(self._heard)
        self._listener = task  # type: ignore[misc]

    def _heard(self, task: asyncio.Future[MutableMapping[str, Any]]) -> None:
        if task is not self._listener or task.cancelled():  # stopped meanwhile
            return
        self._listener = None  # type: ignore[misc]
        failure = task.exception()
        if failure is not None:
            logger.error("asgi_router: receive() failed while waiting for a disconnect", exc_info=failure)
        elif task.result().get("type") != "http.disconnect":
            self._listen()
            return
        if self._party is not None:
            self._party.client_left(self._watched_scope())

    def _leave(self) -> None:
        """On the way out of the block: tell the party, stop the listener, let the party go (an
        arriving entry stays in the ticker's list until its tick, and must not keep the request
        alive that long)."""
        if self._party is not None:
            self._party.complete()
            self._party = None  # type: ignore[misc]
        # Cancelled, not awaited: it only waits in receive(), and ending it needs nothing from
        # the request.
        if self._listener is not None:
            task, self._listener = self._listener, None  # type: ignore[misc]
            task.cancel()


class ListeningScope(_Listening, TaskScope):
    """``with ListeningScope(loop, party):`` a :class:`~asgi_router.core.deadlines.TaskScope` whose own
    ticker entry, armed for :data:`WATCH_AFTER` on entry, starts the disconnect listener instead
    of cancelling; the client leaving cancels it (through ``party.client_left(scope)``)."""

    __slots__ = ("_after", "_listener", "_party")

    def __init__(self, loop: asyncio.AbstractEventLoop, party: Party, after: float = WATCH_AFTER) -> None:
        TaskScope.__init__(self, loop)
        self._party = party
        self._after = after
        self._listener = None

    def _watched_scope(self) -> TaskScope:
        return self

    def __enter__(self) -> ListeningScope:
        TaskScope.__enter__(self)
        self.arm(self._after)  # arrives at the ticker: a block over within the tick never slots
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        self._leave()
        return TaskScope.__exit__(self, exc_type, exc, tb)


class Watching(_Listening, _Armed):
    """``with Watching(loop, scope, party):`` runs the block in ``scope`` (anyio's), which the
    client leaving cancels; the listener starts as for :class:`ListeningScope`. A plain context
    manager rather than a coroutine wrapping the block: the request's work is awaited by the
    caller's own frame, so no extra coroutine frame is held per open stream."""

    __slots__ = ("_after", "_listener", "_loop", "_party", "_scope")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        scope: TaskScope | anyio.CancelScope,
        party: Party,
        after: float = WATCH_AFTER,
    ) -> None:
        _Armed.__init__(self)
        self._loop = loop
        self._scope: TaskScope | anyio.CancelScope | None = scope
        self._party = party
        self._after = after
        self._listener = None

    def _watched_scope(self) -> TaskScope | anyio.CancelScope:
        assert self._scope is not None, "inside the block"
        return self._scope

    def __enter__(self) -> TaskScope | anyio.CancelScope:
        scope = self._watched_scope()
        scope.__enter__()
        assert self._loop is not None  # set by __init__
        self._arm_on(self._loop, self._after)
        return scope

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        self._leave()
        self.close()
        scope, self._scope = self._watched_scope(), None  # the ticker may hold this a tick longer
        return scope.__exit__(exc_type, exc, tb)


def watching(loop: asyncio.AbstractEventLoop, native: bool, party: Party) -> ListeningScope | Watching:
    """The block's scope, which the client leaving cancels: a :class:`ListeningScope` when the
    code inside is asyncio-native (see :func:`~asgi_router.core.deadlines.new_scope`), else anyio's
    scope in a :class:`Watching`."""
    if native:
        return ListeningScope(loop, party)
    return Watching(loop, new_scope(False), party)
