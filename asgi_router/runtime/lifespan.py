"""The host app's lifespan, with the router's own work around it.

On ``lifespan.startup`` the router opens the serving loop's upstream client (and the shared
state's connection, when the state is shared) and starts its background work (the event sinks'
workers, the opt-in health probes, a metrics worker's gauge refresh); ``gc_freeze`` runs once
the app's startup is complete. On shutdown the sinks get a short grace to drain, the background
work stops, the client is closed, and only then is the app's ``lifespan.shutdown.complete``
forwarded: a server takes that message as leave to stop the loop (uvicorn returns and
``asyncio.run`` cancels whatever still runs), so anything of the router's still winding down
after it would die as a ``CancelledError`` traceback (uvicorn's "Exception in 'lifespan'
protocol" on every clean Ctrl-C).

Requests are served without any of this (a sub-app mounted under a prefix gets no lifespan, nor
does ``TestClient(app)`` without ``with``): :meth:`Lifespan.warn_if_missing` says once, at
WARNING, what does not run then.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol, runtime_checkable

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from asgi_router.config.settings import RouterSettings
from asgi_router.ledger.database import LedgerRefused
from asgi_router.ledger.start_tallies import StartTallies
from asgi_router.observability.events import logger
from asgi_router.observability.sinks import EventBus
from asgi_router.runtime.health import HealthProber
from asgi_router.transports.transport import Transport

__all__ = ["Connected", "Lifespan", "LedgerLike"]


class LedgerLike(Protocol):
    """The ledger as the lifespan drives it (``ledger/service.py``)."""

    async def start(self) -> StartTallies | None: ...

    async def run(self) -> None: ...

    async def close(self) -> None: ...


class _StartRefused(Exception):
    """The ledger cannot be opened: the start fails with its message."""


@runtime_checkable
class Connected(Protocol):
    """Something with a connection opened on startup and closed on shutdown (the shared state)."""

    def start(self) -> None: ...

    async def aclose(self) -> None: ...


class Lifespan:
    """Runs the host app's lifespan with the router's start-up and shut-down around it."""

    def __init__(
        self,
        app: ASGIApp,
        settings: RouterSettings,
        transport: Transport,
        events: EventBus,
        health: HealthProber,
        connected: Sequence[Connected] = (),
        background: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
        ledger: LedgerLike | None = None,
        seed: Callable[[StartTallies], Coroutine[Any, Any, None] | None] | None = None,
    ) -> None:
        self._app = app
        #: Opened before the app's startup goes on (a ledger it cannot use fails the start),
        #: written from the background, closed (its rows written) at shutdown.
        self._ledger = ledger
        #: Given the tallies the ledger kept, so that a restart changes no cap; it may hand back
        #: work to run in the background (seeding a fleet's empty store).
        self._seed = seed
        self._seeding: Coroutine[Any, Any, None] | None = None
        #: Opened with the upstream client, closed after it (the shared state's connection).
        self._connected = tuple(connected)
        #: More work to run from startup to shutdown (the metrics' gauge refresh).
        self._more = tuple(background)
        self._settings = settings
        self._transport = transport
        self._events = events
        self._health = health
        #: Whether a lifespan startup reached the router, or the lack of one was reported.
        self.seen = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        stop = anyio.Event()
        ended: list[Message] = []

        async def receive_startup(*_: Any) -> Message:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.seen = True
                self._transport.start()
                for part in self._connected:
                    part.start()
                await self._start_ledger()
                background.start_soon(self._background, stop)
            return message

        async def send_shutdown(message: Message) -> None:
            if message["type"] in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
                await self._events.drain(self._settings.events.shutdown_grace)
                stop.set()
                ended.append(message)  # forwarded once the router's own work has ended
                return
            if message["type"] == "lifespan.startup.complete" and self._settings.gc_freeze:
                gc.collect()
                gc.freeze()  # the startup heap stays: stop re-scanning it on every full collection
            await send(message)

        failure: Exception | None = None
        async with anyio.create_task_group() as background:
            try:
                await self._app(scope, receive_startup, send_shutdown)
            except _StartRefused as exc:
                ended.append({"type": "lifespan.startup.failed", "message": str(exc)})
            except Exception as exc:  # re-raised as itself, not wrapped in an ExceptionGroup
                failure = exc
            finally:
                stop.set()
        await self._transport.aclose()
        if self._ledger is not None:
            await self._ledger.close()  # after the background work ended: one writer at a time
        for part in self._connected:
            await part.aclose()
        if ended:
            await send(ended[0])  # the last await: the server may end the loop from here on
        if failure is not None:
            raise failure

    async def _start_ledger(self) -> None:
        """Open the ledger and seed the caps with what it kept; a ledger that cannot be the
        router's (a corrupted or foreign file, a newer schema) fails the start, naming why."""
        if self._ledger is None:
            return
        try:
            found = await self._ledger.start()
        except LedgerRefused as exc:
            logger.error("%s", exc)
            raise _StartRefused(str(exc)) from None
        if found is not None and self._seed is not None:
            self._seeding = self._seed(found)

    async def _background(self, stop: anyio.Event) -> None:
        """Event sink workers and health probes, from lifespan startup until ``stop``."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._events.run)
            tasks.start_soon(self._health.run)
            for work in self._more:
                tasks.start_soon(work)
            if self._ledger is not None:
                tasks.start_soon(self._ledger.run)
            if self._seeding is not None:
                seeding, self._seeding = self._seeding, None
                tasks.start_soon(lambda: seeding)
            await stop.wait()
            tasks.cancel_scope.cancel()

    def warn_if_missing(self) -> None:
        """On a request: say once what does not run without a lifespan startup. Requests are
        served and the log line written either way; other sinks, health probes and
        ``gc_freeze`` need the lifespan."""
        if self.seen:
            return
        self.seen = True
        idle = []
        sinks = self._events.lifespan_only()
        if sinks:
            idle.append("event sinks " + ", ".join(sinks))
        if self._health.providers:
            idle.append("health probes of " + ", ".join(self._health.providers))
        if self._settings.gc_freeze:
            idle.append("gc_freeze")
        if self._ledger is not None:
            idle.append("the ledger (spend rows are kept in memory, never written)")
        if idle:
            logger.warning(
                "serving without a lifespan startup (a mounted sub-app, or a server or "
                "test client without lifespan); these run only from lifespan startup to shutdown "
                "and do not run: %s",
                "; ".join(idle),
            )
