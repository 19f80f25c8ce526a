"""Run ASGI apps as real HTTP servers on 127.0.0.1, each in its own thread and event loop.

Tests talk to them through real sockets, so streaming, chunk timing, disconnects and the
upstream connection pool behave as they do in production (``httpx.ASGITransport`` buffers
whole responses and cannot show any of that). The server is the kit's
:class:`~asgi_router.testing.AppServer`, as users run theirs.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypeVar

from asgi_router.testing import AppServer

App = TypeVar("App")


class ServerThread(AppServer):
    """The kit's server with the suite's defaults: the pure-Python ``h11`` unless a test asks for
    ``httptools`` (what production runs), and uvicorn's own log lines silenced."""

    def __init__(self, app: Any, **options: Any) -> None:
        super().__init__(app, **{"http": "h11", "log_level": "critical", **options})


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
