"""Run ASGI apps as real HTTP servers on 127.0.0.1, each in its own thread and event loop.

Tests talk to them through real sockets, so streaming, chunk timing, disconnects and the
upstream connection pool behave as they do in production (``httpx.ASGITransport`` buffers
whole responses and cannot show any of that).
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

import uvicorn


class ServerThread:
    """``uvicorn`` serving ``app`` on a free loopback port until :meth:`stop`."""

    def __init__(self, app: Any, *, lifespan: str = "on") -> None:
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            log_level="critical",
            lifespan=lifespan,
            loop="asyncio",
            http="h11",
            timeout_graceful_shutdown=2,
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
