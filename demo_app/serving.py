"""Run several uvicorn servers in one event loop: the host app and its mock upstreams.

uvicorn's ``Server.serve()`` installs its own SIGINT/SIGTERM handlers and re-raises the signal
when it is done, which is right for one server per process and wrong for four sharing a loop.
:class:`LoopServer` leaves signals alone; the demo's entry point handles them once and stops
the servers in order (host first, so in-flight relays finish, then the mocks).

Sockets are bound here, before uvicorn starts, so that a port that is taken fails with a
plain ``OSError`` (not uvicorn's ``sys.exit``) and a port of 0 is known as soon as it is bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp

__all__ = ["LoopServer", "ServerHandle", "bind_socket"]


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound (not yet listening) to ``host:port``; port 0 picks a free port."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


def url_for(sock: socket.socket) -> str:
    """``http://host:port`` for a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class LoopServer(uvicorn.Server):
    """A uvicorn server that can share its event loop: no signal handling, a ``ready`` event."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the demo's entry point owns SIGINT/SIGTERM

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


class ServerHandle:
    """One ASGI app served by uvicorn on an already-bound socket, as a task of the running loop."""

    def __init__(
        self,
        name: str,
        app: ASGIApp,
        sock: socket.socket,
        *,
        lifespan: bool = False,
        graceful_shutdown: int = 2,
    ) -> None:
        self.name = name
        self.url = url_for(sock)
        self._sock = sock
        # log_config=None: never reconfigure the process's logging (the entry point does that).
        config = uvicorn.Config(
            app,
            log_config=None,
            lifespan="on" if lifespan else "off",
            timeout_graceful_shutdown=graceful_shutdown,
        )
        self.server = LoopServer(config)
        self._task: asyncio.Task[None] | None = None

    async def _serve(self) -> None:
        try:
            await self.server.serve(sockets=[self._sock])
        except SystemExit as exc:  # uvicorn exits the process when startup fails; we only fail
            raise RuntimeError(f"{self.name} server failed to start (exit code {exc.code})") from None

    async def start(self) -> None:
        """Start serving and return once the server accepts connections."""
        self._task = asyncio.create_task(self._serve(), name=f"uvicorn:{self.name}")
        ready = asyncio.create_task(self.server.ready.wait())
        try:
            await asyncio.wait({self._task, ready}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if self._task.done():
            self._task.result()  # raises the startup failure
            raise RuntimeError(f"{self.name} server stopped during startup")

    async def wait(self) -> None:
        """Return when the server has stopped (for whatever reason)."""
        if self._task is not None:
            await asyncio.wait({self._task})

    async def stop(self, *, force: bool = False) -> None:
        """Stop accepting, let in-flight requests finish (bounded), and wait for the task."""
        task, self._task = self._task, None
        try:
            if task is None:
                return
            if task.done():  # failed at startup: start() already raised that failure
                if not task.cancelled():
                    task.exception()
                return
            self.server.should_exit = True
            self.server.force_exit = self.server.force_exit or force
            await task
        finally:
            self._sock.close()

    def force_stop(self) -> None:
        """Skip the graceful wait (a second Ctrl-C)."""
        self.server.should_exit = True
        self.server.force_exit = True
