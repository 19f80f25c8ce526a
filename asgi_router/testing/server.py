"""Serve an ASGI app on a free 127.0.0.1 port (or one chosen), from a thread of its own, for the length of a test.

Real sockets are what make a test of a gateway worth having: streaming, chunk timing, client
disconnects and connection pools behave as in production, where an in-process client
(``httpx.ASGITransport``) buffers whole responses and never disconnects. The server runs uvicorn
in its own thread and event loop, so a synchronous test can use it as well as an async one, and
nothing a test does on its own loop can stall it.

It leaves the process's logging alone (uvicorn's logging configuration is not applied): its
loggers, ``uvicorn.error`` and ``uvicorn.access``, propagate to whatever the test run set up.
"""

from __future__ import annotations

import socket
import threading
from abc import ABC, abstractmethod
from types import TracebackType
from typing import Any, Literal, Self

import anyio.to_thread

try:
    import uvicorn
except ImportError as missing:  # pragma: no cover - depends on the installation
    raise ImportError("asgi_router.testing serves apps with uvicorn: pip install 'asgi-router[testing]'") from missing

__all__ = ["AppServer", "Served", "url_host"]

_START_TIMEOUT = 10.0
_STOP_TIMEOUT = 10.0


class Served(ABC):
    """:meth:`start` and :meth:`stop` as a context manager, sync (``with``) and async
    (``async with``: starting and stopping wait on a server thread, off the caller's loop)."""

    @abstractmethod
    def start(self) -> Self:
        """Start serving; return once the server answers."""

    @abstractmethod
    def stop(self) -> None:
        """Stop serving; return once the server has stopped."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await anyio.to_thread.run_sync(self.start)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await anyio.to_thread.run_sync(self.stop)


def url_host(host: str) -> str:
    """How a URL names a server listening on ``host``: a wildcard address as loopback, an
    IPv6 address in brackets."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


class _Server(uvicorn.Server):
    """uvicorn's server, telling the thread that started it when its start-up is over (listening,
    or given up: ``started`` says which), so that the start is waited for, not polled."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.started_up = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets=sockets)
        finally:
            self.started_up.set()


class AppServer(Served):
    """``app`` served by uvicorn on ``127.0.0.1`` (a free port) until :meth:`stop`.

    ``with AppServer(app) as server:`` (or ``async with``) starts it and gives ``server.url``
    (``http://127.0.0.1:PORT``). ``host`` and ``port`` choose another address or a fixed port
    (for an app whose configuration names the URL: a ``router.toml`` with fixed ``base_url`` s);
    a port in use fails :meth:`start`. ``lifespan`` is uvicorn's setting (``"on"`` runs the app's
    startup and shutdown, which a router's upstream client and event sinks need). :meth:`stop`
    lets open requests finish for up to ``graceful_shutdown`` seconds, then cancels them.
    ``http`` picks uvicorn's HTTP implementation (``"auto"``: httptools if installed, else h11).
    """

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        lifespan: Literal["auto", "on", "off"] = "on",
        graceful_shutdown: float = 2.0,
        http: Literal["auto", "h11", "httptools"] = "auto",
        log_level: str | int | None = None,
    ) -> None:
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_config=None,
            log_level=log_level,
            lifespan=lifespan,
            loop="asyncio",
            http=http,
            # Typed int, used as an asyncio timeout: a fraction of a second works.
            timeout_graceful_shutdown=graceful_shutdown,  # type: ignore[arg-type]
        )
        self.server = _Server(config)
        self._thread = threading.Thread(target=self._run, name="asgi-router-test-server", daemon=True)
        self.host = host
        self._asked = port
        #: The port served on, once started (the one asked for, or the free one chosen).
        self.port = 0

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (``127.0.0.1`` by default), once started."""
        if not self.port:
            raise RuntimeError("the server is not running: use 'with AppServer(app) as server:' or start()")
        return f"http://{url_host(self.host)}:{self.port}"

    def _run(self) -> None:
        try:
            self.server.run()
        except SystemExit:  # uvicorn exits when it cannot bind: start() reports it
            pass
        finally:  # ended before its start-up did (or without one): start() stops waiting
            self.server.started_up.set()

    def start(self) -> Self:
        """Start serving; return once the server accepts connections."""
        self._thread.start()
        if not (self.server.started_up.wait(_START_TIMEOUT) and self.server.started):
            self.server.should_exit = True
            fixed = f" (is {self.host} port {self._asked} in use?)" if self._asked else ""
            raise RuntimeError(f"the test server did not start{fixed}")
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Stop accepting, let open requests finish (bounded), and wait for the thread."""
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=_STOP_TIMEOUT)
        if self._thread.is_alive():  # pragma: no cover - a hung server is a test failure
            raise RuntimeError("the test server did not stop")
