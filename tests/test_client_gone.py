"""A client that leaves before the first byte, under a real host app whose outer middleware is
Starlette's ``BaseHTTPMiddleware`` (the host's choice; the router itself stays pure ASGI): the
router still ends the request with a response start, so the host logs no "No response returned"
traceback, once per abandoned request."""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterator

import pytest
from starlette.applications import Starlette
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from asgi_router import ModelRouter
from asgi_router.testing import FakeUpstream, reply

from .conftest import make_settings
from .servers import ServerThread


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


@pytest.fixture
def host(slow_upstream: FakeUpstream) -> Iterator[ServerThread]:
    app = Starlette(routes=[Route("/hello", hello)])
    settings = make_settings("http://127.0.0.1:9", providers={"fake": slow_upstream.provider()})
    app.add_middleware(ModelRouter, settings=settings)
    app.add_middleware(HostTiming)  # added last: the outermost
    with ServerThread(app, log_level="error") as server:
        yield server


def _leave(port: int, body: bytes, declared: int, wait: float) -> None:
    """Send a chat request's head and ``body`` (of a declared ``declared`` bytes), wait, then leave."""
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {declared}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head + body)
        time.sleep(wait)


BODY = json.dumps({"model": "fake/slow", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.mark.parametrize(
    ("body", "declared"),
    [(BODY[:10], len(BODY)), (BODY, len(BODY))],
    ids=["while-sending-the-body", "while-the-upstream-thinks"],
)
def test_a_client_leaving_before_the_first_byte_logs_no_traceback_under_an_outer_base_http_middleware(
    host: ServerThread, caplog: pytest.LogCaptureFixture, body: bytes, declared: int
) -> None:
    caplog.set_level(logging.ERROR)
    for _ in range(3):
        _leave(host.port, body, declared, wait=0.3)
    time.sleep(0.5)  # the router notices, ends the request, and the host's middleware returns
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert errors == [], [record.getMessage() for record in errors]
    # And the host still serves.
    with socket.create_connection(("127.0.0.1", host.port), timeout=5) as sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        assert sock.recv(1024).startswith(b"HTTP/1.1 200")
