"""Hostile requests through the whole router: the right 4xx, never a 500, never an upstream call.

Size and time limits are proven over raw loopback sockets, where the test controls exactly
which bytes have been sent when the answer arrives: a 413 or 408 that arrives while the client
is still holding back most of its body was given without reading the rest.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest
from anyio.abc import SocketStream
from asgi_lifespan import LifespanManager
from starlette.types import Receive, Scope, Send

from asgi_router import ModelRouter, RouterSettings
from asgi_router.core.refs import MAX_MODEL_ID_LENGTH
from asgi_router.inbound.safejson import MAX_JSON_DEPTH, MAX_NUMBER_CHARS
from asgi_router.inbound.screen import FORBIDDEN_FIELDS

from .conftest import host_app, make_settings, shared_routers
from .mock_upstream import MockUpstream
from .servers import ServersByTransport, ServerThread

pytestmark = pytest.mark.anyio

CHAT = {"model": "mock/ok", "messages": [{"role": "user", "content": "hi"}]}


class Attacker:
    """A loopback server standing in for a host that is not in the config: counts what reaches it."""

    def __init__(self) -> None:
        self.requests = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.requests += 1
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}"})


@pytest.fixture(scope="module")
def attacker() -> Iterator[tuple[Attacker, str]]:
    app = Attacker()
    with ServerThread(app, lifespan="off") as server:
        yield app, server.url


@asynccontextmanager
async def routed(settings: RouterSettings) -> AsyncIterator[httpx2.AsyncClient]:
    router = ModelRouter(host_app(), settings=settings)
    async with (
        LifespanManager(router) as manager,
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=manager.app), base_url="http://router") as client,
    ):
        yield client


def assert_openai_error(response: httpx2.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"
    assert error["param"] is None and error["message"]
    assert "Traceback" not in response.text


# --- raw sockets: size and time limits ---------------------------------------------------------


async def read_response(stream: SocketStream) -> tuple[int, bytes]:
    """Status and body of one HTTP/1.1 response with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += await stream.receive()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += await stream.receive()
    return int(lines[0].split()[1]), body


def request_head(port: int, *fields: str) -> bytes:
    lines = ["POST /v1/chat/completions HTTP/1.1", f"host: 127.0.0.1:{port}", "content-type: application/json", *fields]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


@pytest.fixture(scope="module")
def routers(upstream: MockUpstream) -> Iterator[ServersByTransport[ModelRouter]]:
    """Routers with a 1 KiB body cap and a 0.5 s body deadline."""
    with shared_routers(upstream, max_body_bytes=1024, body_timeout=0.5) as served:
        yield served


@pytest.fixture
def small_router(server: ServerThread) -> ServerThread:
    """The module's router (1 KiB body cap, 0.5 s body deadline), served on loopback."""
    return server


async def test_declared_length_over_the_cap_is_413_before_a_single_body_byte_is_sent(
    small_router: ServerThread, upstream: MockUpstream
) -> None:
    hits = upstream.counts()
    async with await anyio.connect_tcp("127.0.0.1", small_router.port) as stream:
        await stream.send(request_head(small_router.port, "content-length: 50000000"))
        with anyio.fail_after(5):
            status, body = await read_response(stream)
    assert status == 413
    assert json.loads(body)["error"]["code"] == "request_too_large"
    assert upstream.counts() == hits


async def test_chunked_body_crossing_the_cap_is_413_while_the_client_still_holds_the_rest(
    small_router: ServerThread, upstream: MockUpstream
) -> None:
    hits = upstream.counts()
    async with await anyio.connect_tcp("127.0.0.1", small_router.port) as stream:
        await stream.send(request_head(small_router.port, "transfer-encoding: chunked"))
        for _ in range(5):  # 5 x 256 bytes: crosses 1 KiB; no terminating chunk is ever sent
            await stream.send(b"100\r\n" + b"x" * 256 + b"\r\n")
        with anyio.fail_after(5):
            status, body = await read_response(stream)
    assert status == 413
    assert json.loads(body)["error"]["code"] == "request_too_large"
    assert upstream.counts() == hits


async def test_body_trickling_slower_than_body_timeout_is_408(
    small_router: ServerThread, upstream: MockUpstream
) -> None:
    hits = upstream.counts()
    payload = json.dumps(CHAT).encode()
    async with await anyio.connect_tcp("127.0.0.1", small_router.port) as stream:
        await stream.send(request_head(small_router.port, f"content-length: {len(payload)}"))
        async with anyio.create_task_group() as tasks:

            async def trickle() -> None:
                for index in range(len(payload)):  # a byte every 0.1 s: ~6 s for the whole body
                    await stream.send(payload[index : index + 1])
                    await anyio.sleep(0.1)

            tasks.start_soon(trickle)
            with anyio.fail_after(5):  # the 0.5 s deadline answers, not the ~6 s body
                status, body = await read_response(stream)
            tasks.cancel_scope.cancel()
    assert status == 408
    assert json.loads(body)["error"]["code"] == "request_timeout"
    assert upstream.counts() == hits


async def test_body_in_pieces_within_body_timeout_is_served(small_router: ServerThread) -> None:
    payload = json.dumps(CHAT).encode()
    async with await anyio.connect_tcp("127.0.0.1", small_router.port) as stream:
        await stream.send(request_head(small_router.port, f"content-length: {len(payload)}"))
        await stream.send(payload[:10])
        await anyio.sleep(0.2)
        await stream.send(payload[10:])
        with anyio.fail_after(5):
            status, body = await read_response(stream)
    assert status == 200
    assert json.loads(body)["choices"][0]["message"]["content"] == "hello from ok"


# --- content type and encoding ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "content", "code"),
    [
        ({"content-type": "text/plain"}, json.dumps(CHAT).encode(), "unsupported_media_type"),
        ({"content-type": "application/x-www-form-urlencoded"}, b"model=mock%2Fok", "unsupported_media_type"),
        ({}, json.dumps(CHAT).encode(), "unsupported_media_type"),
        (
            {"content-type": "application/json", "content-encoding": "gzip"},
            gzip.compress(json.dumps(CHAT).encode()),
            "unsupported_content_encoding",
        ),
        (
            {"content-type": "application/json", "content-encoding": "gzip"},
            gzip.compress(b" " * 10_000_000),  # a 10 MB bomb in ~10 KB: never inflated
            "unsupported_content_encoding",
        ),
    ],
    ids=["text-plain", "form", "no-content-type", "gzip", "gzip-bomb"],
)
async def test_wrong_content_type_or_compressed_body_is_415_and_no_upstream_call(
    settings: RouterSettings, upstream: MockUpstream, headers: dict[str, str], content: bytes, code: str
) -> None:
    hits = upstream.counts()
    async with routed(settings) as client:
        response = await client.post("/v1/chat/completions", content=content, headers=headers)
    assert_openai_error(response, 415, code)
    assert upstream.counts() == hits


# --- bodies that parse badly, or too well ------------------------------------------------------


def _deep(depth: int) -> bytes:
    inner = b'"x"'
    for _ in range(depth - 1):
        inner = b'{"a":' + inner + b"}"
    return b'{"model":"mock/ok","deep":' + inner + b"}"


HOSTILE_BODIES = [
    (_deep(MAX_JSON_DEPTH + 1), "invalid_json"),
    (b'{"model":"mock/ok","x":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "invalid_json"),
    (b'{"model":"mock/ok","seed":' + b"9" * (MAX_NUMBER_CHARS + 1) + b"}", "invalid_json"),
    (b'{"model":"mock/ok","seed":' + b"9" * 5000 + b"}", "invalid_json"),
    (b'{"model":"mock/ok","temperature":1e999}', "invalid_json"),
    (b'{"model":"mock/ok","temperature":NaN}', "invalid_json"),
    (b'"mock/ok"', "invalid_request"),
    (b"null", "invalid_request"),
    (b"42", "invalid_request"),
    (b"[]", "invalid_request"),
    (b"", "invalid_json"),
    (b"\x00\x01\x02", "invalid_json"),
    (b'{"model":"mock/ok"', "invalid_json"),
    # JSON text is UTF-8 (RFC 8259): what cannot be read as UTF-8 is refused, not forwarded raw.
    (b'{"model":"mock/ok","messages":[{"role":"user","content":"\xed\xa0\x80"}]}', "invalid_json"),  # a surrogate
    (b'{"model":"mock/ok","user":"\xff"}', "invalid_json"),
    (b'{"model":"mock/ok","user":"\xc0\xaf"}', "invalid_json"),  # overlong "/"
    (b'{"model":"mock/ok","user":"\xe4\xbd"}', "invalid_json"),  # a character cut short
    (b'{"model":"mock/ok","user":"\xf4\x90\x80\x80"}', "invalid_json"),  # past U+10FFFF
    (b'{"model":"mock/\xed\xa0\x80"}', "invalid_json"),
    ('{"model":"mock/ok"}'.encode("utf-16"), "invalid_json"),
    ('{"model":"mock/ok"}'.encode("utf-32-le"), "invalid_json"),
]


@pytest.mark.parametrize(("content", "code"), HOSTILE_BODIES, ids=[f"b{i}" for i in range(len(HOSTILE_BODIES))])
async def test_hostile_json_body_is_400_never_500_and_no_upstream_call(
    settings: RouterSettings, upstream: MockUpstream, content: bytes, code: str
) -> None:
    hits = upstream.counts()
    async with routed(settings) as client:
        response = await client.post(
            "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
        )
    assert_openai_error(response, 400, code)
    assert upstream.counts() == hits


async def test_body_nested_to_the_cap_is_routed(settings: RouterSettings) -> None:
    async with routed(settings) as client:
        response = await client.post(
            "/v1/chat/completions", content=_deep(MAX_JSON_DEPTH - 1), headers={"content-type": "application/json"}
        )
    assert response.status_code == 200


# --- fields that would redirect traffic or swap credentials ------------------------------------


@pytest.mark.parametrize("field", FORBIDDEN_FIELDS)
async def test_redirecting_or_credential_field_is_400_and_nothing_reaches_any_host(
    settings: RouterSettings, upstream: MockUpstream, attacker: tuple[Attacker, str], field: str
) -> None:
    app, url = attacker
    before, hits = app.requests, upstream.counts()
    value: Any = {"authorization": "Bearer x"} if "header" in field else f"{url}/v1"
    async with routed(settings) as client:
        response = await client.post("/v1/chat/completions", json={**CHAT, field: value})
    assert_openai_error(response, 400, "forbidden_parameter")
    assert field in response.json()["error"]["message"]
    assert upstream.counts() == hits
    assert app.requests == before


@pytest.mark.both_transports
async def test_upstream_redirect_to_another_host_is_not_followed(
    upstream: MockUpstream, attacker: tuple[Attacker, str]
) -> None:
    app, url = attacker

    async def redirecting(scope: Scope, receive: Receive, send: Send) -> None:
        location = f"{url}/v1/chat/completions".encode()
        await send({"type": "http.response.start", "status": 307, "headers": [(b"location", location)]})
        await send({"type": "http.response.body", "body": b""})

    before = app.requests
    with ServerThread(redirecting, lifespan="off") as redirector:
        settings = make_settings(
            upstream.url,  # type: ignore[attr-defined]
            providers={"redir": {"base_url": f"{redirector.url}/v1", "api_key": "redir-key-0123456789"}},
            backoff={"base": 0.005, "cap": 0.01},
        )
        async with routed(settings) as client:
            response = await client.post("/v1/chat/completions", json={**CHAT, "model": "redir/x"})
    assert response.status_code == 502
    # a one-candidate plan retries in place (``retries = 2``), always on the configured host
    assert (
        response.json()["error"]["attempts"] == [{"candidate": "redir/x", "reason": "upstream_5xx", "status": 307}] * 3
    )
    assert app.requests == before


# --- model ids -------------------------------------------------------------------------------

HOSTILE_MODELS = [
    "mock/ok\r\nx-injected: 1",
    "mock/ok\nx-injected: 1",
    "mock/ok\rx",
    "mock/ok\x00",
    "mock/\x1b[31mred\x1b[0m",
    "mock/ok\x7f",
    "mock/ok\tx",
    "mock/ok x",
    "mock/\u202eko",
    "mock/\uff4fk",
    "\x1b]0;title\x07/zq9",  # a tail that no log field name contains
    "group/\x1b[2J",
    "mock/" + "a" * (MAX_MODEL_ID_LENGTH + 1),
]


@pytest.mark.parametrize("model", HOSTILE_MODELS, ids=[f"m{i}" for i in range(len(HOSTILE_MODELS))])
async def test_model_with_control_escape_or_overlong_id_is_400_and_never_echoed(
    settings: RouterSettings, upstream: MockUpstream, caplog: pytest.LogCaptureFixture, model: str
) -> None:
    caplog.set_level(logging.DEBUG, logger="asgi_router")
    hits = upstream.counts()
    async with routed(settings) as client:
        response = await client.post("/v1/chat/completions", json={**CHAT, "model": model})
    assert_openai_error(response, 400, "invalid_model_reference")
    raw_tail = model.split("/", 1)[1] if "/" in model else model
    message = response.json()["error"]["message"]
    assert raw_tail not in message and raw_tail not in response.text
    assert "x-injected" not in response.headers
    assert all(raw_tail not in value for value in response.headers.values())
    logged = [record.getMessage() for record in caplog.records]
    assert any("request_id=" in line for line in logged)  # the request line was written...
    assert all(raw_tail not in line and "\x1b" not in line for line in logged)  # ...without the raw model
    assert upstream.counts() == hits


async def test_model_id_at_the_length_cap_is_routed(settings: RouterSettings, upstream: MockUpstream) -> None:
    model_id = "status-404-" + "a" * (MAX_MODEL_ID_LENGTH - len("status-404-"))
    async with routed(settings) as client:
        response = await client.post("/v1/chat/completions", json={**CHAT, "model": f"mock/{model_id}"})
    assert response.status_code == 502  # routed, and the upstream said 404
    assert response.json()["error"]["attempts"][0]["candidate"] == f"mock/{model_id}"
