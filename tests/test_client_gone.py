"""A client that leaves before the first byte, under a real host app whose outer middleware is
Starlette's ``BaseHTTPMiddleware`` (the host's choice; the router itself stays pure ASGI): the
router still ends the request with a response start, so the host logs no "No response returned"
traceback, once per abandoned request."""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator

import pytest
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from asgi_router import ModelRouter
from asgi_router.testing import FakeUpstream, reply

from .conftest import make_settings
from .servers import ServerThread
from .waiting import polled


class HostTiming(BaseHTTPMiddleware):
    """What a host app commonly wraps everything in (timing, request ids)."""

    async def dispatch(self, request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        response.headers["x-host-timing"] = "1"
        return response


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


@pytest.fixture(scope="module")
def slow_upstream() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        up.script("slow", reply.slow(3))
        yield up


class InFlight:
    """The outermost layer: counts the requests that reached the app, those still in it, and
    those it raised out of (uvicorn logs those)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.arrived = self.inside = self.raised = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.arrived += 1
        self.inside += 1
        try:
            await self.app(scope, receive, send)
        except BaseException:
            self.raised += 1
            raise
        finally:
            self.inside -= 1


@pytest.fixture
def host(slow_upstream: FakeUpstream) -> Iterator[tuple[ServerThread, InFlight]]:
    app = Starlette(routes=[Route("/hello", hello)])
    settings = make_settings("http://127.0.0.1:9", providers={"fake": slow_upstream.provider()})
    app.add_middleware(ModelRouter, settings=settings)
    app.add_middleware(HostTiming)  # added last: the outermost
    counted = InFlight(app)
    with ServerThread(counted, log_level="error") as server:
        yield server, counted


def _leave(port: int, body: bytes, declared: int, mid_request: Callable[[], bool]) -> None:
    """Send a chat request's head and ``body`` (of a declared ``declared`` bytes), wait until it
    is ``mid_request``, then leave."""
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {declared}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head + body)
        polled(mid_request, what="the request under way")


BODY = json.dumps({"model": "fake/slow", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.mark.parametrize(
    ("body", "declared"),
    [(BODY[:10], len(BODY)), (BODY, len(BODY))],
    ids=["while-sending-the-body", "while-the-upstream-thinks"],
)
def test_a_client_leaving_before_the_first_byte_logs_no_traceback_under_an_outer_base_http_middleware(
    host: tuple[ServerThread, InFlight],
    slow_upstream: FakeUpstream,
    caplog: pytest.LogCaptureFixture,
    body: bytes,
    declared: int,
) -> None:
    server, counted = host
    caplog.set_level(logging.ERROR)
    for _ in range(3):
        arrived, asked = counted.arrived, len(slow_upstream.hits)
        if len(body) < declared:  # the router is reading the rest of the body
            _leave(server.port, body, declared, lambda: counted.arrived > arrived)  # noqa: B023
        else:  # the upstream has the request, and thinks
            _leave(server.port, body, declared, lambda: len(slow_upstream.hits) > asked)  # noqa: B023
    # the router notices, ends the request, and the host's middleware returns
    polled(lambda: counted.inside == 0, what="every abandoned request ended")
    assert counted.raised == 0
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert errors == [], [record.getMessage() for record in errors]
    # And the host still serves.
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")
