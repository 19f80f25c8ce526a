"""Run ASGI apps as real HTTP servers on 127.0.0.1, each in its own thread and event loop.

Tests talk to them through real sockets, so streaming, chunk timing, disconnects and the
upstream connection pool behave as they do in production (``httpx.ASGITransport`` buffers
whole responses and cannot show any of that).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypeVar

import uvicorn

App = TypeVar("App")


class ServerThread:
    """``uvicorn`` serving ``app`` on a free loopback port until :meth:`stop`.

    :meth:`stop` waits up to ``graceful_shutdown`` seconds for open requests to finish, then
    cancels them. ``http`` is uvicorn's HTTP implementation: the pure-Python ``h11`` unless a
    test asks for ``httptools`` (what production runs).
    """

    def __init__(self, app: Any, *, lifespan: str = "on", graceful_shutdown: float = 2, http: str = "h11") -> None:
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="critical",
            lifespan=lifespan,
            loop="asyncio",
            http=http,
            timeout_graceful_shutdown=graceful_shutdown,
        )
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, name="test-uvicorn", daemon=True)
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerThread:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("test server did not start")
            time.sleep(0.005)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=10)
        if self._thread.is_alive():  # pragma: no cover - a hung server is a test failure
            raise RuntimeError("test server did not stop")

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class ServersByTransport(Generic[App]):
    """An app served on loopback per upstream transport, each started when a test first asks for
    it and all stopped together.

    For a module whose tests only send requests and read answers: they share one router (per
    transport) instead of starting one each (a server takes ~0.2 s to stop). ``build(kind)``
    makes the app for transport ``kind`` (``conftest.shared_routers`` builds routers).
    """

    def __init__(self, build: Callable[[str], App]) -> None:
        self._build = build
        self._running: dict[str, tuple[App, ServerThread]] = {}

    def __call__(self, kind: str) -> tuple[App, ServerThread]:
        """The app for transport ``kind`` and its server, started on first use."""
        if kind not in self._running:
            app = self._build(kind)
            self._running[kind] = app, ServerThread(app).start()
        return self._running[kind]

    def stop(self) -> None:
        while self._running:
            _, server = self._running.popitem()[1]
            server.stop()

    def __enter__(self) -> ServersByTransport[App]:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
