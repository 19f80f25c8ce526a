"""Noticing a client that leaves, without a task per request for the answers that come fast.

ASGI tells an app that its client left only through ``receive()`` returning ``http.disconnect``,
so noticing it while the router waits on an upstream takes a second task blocked in
``receive()``. That task is work on every request (created, scheduled, cancelled), and a request
answered within a few milliseconds never needs it: there is nothing left to cancel by the time a
disconnect could be noticed.

So the listener starts late: the request's scope, a :class:`ListeningScope`, arms its one timer
for :data:`WATCH_AFTER` seconds and starts listening when it fires. A request done by then never
creates the task; a longer one (every real model call, every stream) gets it, and a client that
leaves is noticed at most that much later than with a listener from the first moment. Waiting
on ``receive()`` earlier would not notice anything sooner in the common case anyway: servers
report a disconnect when the connection closes, which a client that just sent its request
rarely does within 10 ms.

The middleware enters the scope when the request arrives, ``held``: the body is still to be
read through ``receive()``, so nothing listens before :meth:`ListeningScope.listen` (called
once upstreams are involved), and a mark passed by then starts the listener at once. Entered
that early, its timer is the request's only one: it bounds the body read, the attempts' reads
and the relay's (each a :func:`~asgi_router.core.deadlines.reading` block in the request's own
task), and the deadlines of a hedge's racers, in tasks of their own, ride on it (it lends its
timer).

The scope is the request's :class:`~asgi_router.core.deadlines.Deadline` too: the client
leaving cancels it, which cancels whatever the request is waiting on (an attempt, the hedging
race, the relay), and the upstream response is closed on the way out.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import MutableMapping
from types import TracebackType
from typing import Any, Final

from asgi_router.core.deadlines import Deadline
from asgi_router.observability.events import logger
from asgi_router.request.request_state import RequestState

__all__ = ["WATCH_AFTER", "ListeningScope"]

#: Seconds into the scope (the request, for the middleware's) at which the disconnect listener
#: starts, if the scope is listening by then (else once it does).
WATCH_AFTER: Final = 0.01


class ListeningScope(Deadline):
    """``with ListeningScope(party):`` a :class:`~asgi_router.core.deadlines.Deadline` whose
    timer, :data:`WATCH_AFTER` seconds in, starts the disconnect listener instead of cancelling;
    the client leaving cancels it (through ``party.client_left(scope)``). ``held``: no listener
    before :meth:`listen`. It lends its timer to the deadlines entered inside it.

    The listener is ``party.receive()``'s own awaitable run as a task, with a done-callback: a
    message other than ``http.disconnect`` starts the next ``receive()``; a ``receive()`` that
    fails is logged and taken as the client being gone, since nobody awaits the task. On the
    way out the listener is cancelled, not awaited (it only waits in ``receive()``), and the
    party let go, so a finished request leaves no reference cycle behind.
    """

    __slots__ = ("_after", "_held", "_listener", "_overdue", "_party")

    def __init__(self, party: RequestState, after: float = WATCH_AFTER, *, held: bool = False) -> None:
        super().__init__(lends=True)  # the request's one timer: what is entered inside rides on it
        self._party: RequestState | None = party
        self._after = after
        # Not listening before :meth:`listen` (the block reads the request body first), and
        # whether the mark passed meanwhile.
        self._held = held
        self._overdue = False
        self._listener: asyncio.Future[MutableMapping[str, Any]] | None = None

    @property
    def listening(self) -> bool:
        """Whether the listener task is running (tests)."""
        return self._listener is not None

    def __enter__(self) -> ListeningScope:
        super().__enter__()
        if self._held:
            # The mark is only noted: the first deadline armed inside, or listen(), sets the
            # timer, so a request refused before reading its body makes none.
            assert self._loop is not None
            self._expires = self._loop.time() + self._after
        else:
            self.arm(self._after)
        return self

    def listen(self) -> None:
        """A scope made ``held``: from now on the client is listened to, at once if the mark
        has passed (a request whose body or plan took that long)."""
        self._held = False
        if self._overdue:
            self._overdue = False
            self._listen()
        elif self._expires < self._when:  # the mark noted, no timer set for it yet
            assert self._loop is not None
            if self._loop.time() >= self._expires:
                self._expires = math.inf
                self._listen()
            else:
                self._schedule(self._expires)

    def _overrun(self) -> None:
        """The timer's call once :data:`WATCH_AFTER` has passed: the block is still going."""
        if self._held:
            self._overdue = True
        else:
            self._listen()

    def _listen(self) -> None:
        if self._party is None:  # pragma: no cover - the block is over
            return
        task = asyncio.ensure_future(self._party.receive())
        task.add_done_callback(self._heard)
        self._listener = task

    def _heard(self, task: asyncio.Future[MutableMapping[str, Any]]) -> None:
        if task is not self._listener or task.cancelled():  # stopped meanwhile
            return
        self._listener = None
        failure = task.exception()
        if failure is not None:
            logger.error("receive() failed while waiting for a disconnect", exc_info=failure)
        elif task.result().get("type") != "http.disconnect":
            self._listen()
            return
        if self._party is not None:
            self._party.client_left(self)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool:
        if self._party is not None:
            self._party.complete()
            self._party = None
        if self._listener is not None:
            task, self._listener = self._listener, None
            task.cancel()
        return super().__exit__(exc_type, exc, tb)
