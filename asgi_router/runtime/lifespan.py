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
from asgi_router.observability.events import logger
from asgi_router.observability.sinks import EventBus
from asgi_router.runtime.health import HealthProber
from asgi_router.transports.transport import Transport

__all__ = ["Connected", "Lifespan"]


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
    ) -> None:
        self._app = app
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
            except Exception as exc:  # re-raised as itself, not wrapped in an ExceptionGroup
                failure = exc
            finally:
                stop.set()
        await self._transport.aclose()
        for part in self._connected:
            await part.aclose()
        if ended:
            await send(ended[0])  # the last await: the server may end the loop from here on
        if failure is not None:
            raise failure

    async def _background(self, stop: anyio.Event) -> None:
        """Event sink workers and health probes, from lifespan startup until ``stop``."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._events.run)
            tasks.start_soon(self._health.run)
            for work in self._more:
                tasks.start_soon(work)
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
        if idle:
            logger.warning(
                "serving without a lifespan startup (a mounted sub-app, or a server or "
                "test client without lifespan); these run only from lifespan startup to shutdown "
                "and do not run: %s",
                "; ".join(idle),
            )
