"""What an upstream's headers may make the router do, at the client's boundary: real loopback
servers (the kit's fake upstream), the router on uvicorn, httpx as the client.

A rate-limit answer's wait is believed up to ``max_rate_limit_reset`` only.
"""

from __future__ import annotations

import json
import socketserver
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import pytest

from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import FakeUpstream, reply

from .conftest import host_app
from .resilient import tag
from .servers import ServerThread
from .waiting import eventually

_FAST = {"connect": 1, "first_byte": 5, "idle": 5, "total": 10}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as upstream:
        yield upstream


def _settings(fake: FakeUpstream, members: list[str], **overrides: Any) -> RouterSettings:
    providers = {name: fake.provider(timeouts=_FAST) for name in ("p1", "p2")}
    groups = {"g": {"members": members}}
    return RouterSettings(providers=providers, groups=groups, allow_unauthenticated=True, **overrides)


def _ask(server: ServerThread) -> httpx2.Response:
    body = {"model": "group/g", "messages": [{"role": "user", "content": "hi"}]}
    return httpx2.post(f"{server.url}/v1/chat/completions", json=body, timeout=10)


@pytest.mark.parametrize(
    "answer",
    [
        reply.status(429, retry_after="999999999"),
        reply.ok(headers={"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "999999999h"}),
        reply.ok(
            headers={
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": "9999-12-31T23:59:59Z",
            }
        ),
    ],
    ids=["retry-after", "x-ratelimit-reset", "anthropic-reset"],
)
def test_an_upstream_reset_longer_than_max_rate_limit_reset_is_cut_to_it(fake: FakeUpstream, answer: Any) -> None:
    t = tag()
    fake.script(f"a{t}", answer)
    with ServerThread(ModelRouter(host_app(), settings=_settings(fake, [f"p1/a{t}"]))) as server:
        _ask(server)  # the member says when it may be called again
        benched = _ask(server)  # skipped until then: the router's own answer says when
    assert benched.status_code in (429, 503), benched.text
    assert benched.headers["retry-after"].isdigit()
    assert 290 <= int(benched.headers["retry-after"]) <= 300
    assert len([hit for hit in fake.hits if hit.model == f"a{t}"]) == 1


def test_max_rate_limit_reset_is_the_longest_retry_after_the_router_sends(fake: FakeUpstream) -> None:
    t = tag()
    fake.script(f"a{t}", reply.status(429, retry_after="3600"))
    settings = _settings(fake, [f"p1/a{t}"], max_rate_limit_reset=42)
    with ServerThread(ModelRouter(host_app(), settings=settings)) as server:
        first, benched = _ask(server), _ask(server)
    assert first.status_code == 429 and int(first.headers["retry-after"]) <= 42
    assert benched.headers["retry-after"].isdigit() and 30 <= int(benched.headers["retry-after"]) <= 42


# --- header values the client's server cannot send ----------------------------------------------

_ANSWER = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()


class _ControlBytes(socketserver.StreamRequestHandler):
    """An upstream that answers every request with header values holding control bytes (as no
    well-behaved HTTP server would send them: written on the socket by hand)."""

    def handle(self) -> None:
        length = 0
        while (line := self.rfile.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        self.rfile.read(length)
        head = (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"x-start: a\x01b\r\nx-escape: \x1b[31mred\r\nx-delete: a\x7fb\r\n"
            b"x-tab: a\tb\r\nx-plain: fine\r\n"
            b"content-length: " + str(len(_ANSWER)).encode() + b"\r\nconnection: close\r\n\r\n"
        )
        self.wfile.write(head + _ANSWER)


@pytest.fixture
def control_bytes() -> Iterator[str]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _ControlBytes)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_an_upstream_header_value_with_a_control_byte_is_dropped_and_counted(control_bytes: str) -> None:
    providers = {"odd": {"base_url": control_bytes, "api_key": "sk-odd-0123456789"}}
    settings = RouterSettings(providers=providers, allow_unauthenticated=True)
    router = ModelRouter(host_app(), settings=settings)
    with ServerThread(router) as server:
        body = {"model": "odd/m", "messages": [{"role": "user", "content": "hi"}]}
        answer = httpx2.post(f"{server.url}/v1/chat/completions", json=body, timeout=10)
        anyio.run(eventually, lambda: len(router.recent.snapshot()) == 1)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"] == "hi"
    assert (answer.headers["x-tab"], answer.headers["x-plain"]) == ("a\tb", "fine")
    assert not {"x-start", "x-escape", "x-delete"} & set(answer.headers)
    [event] = router.recent.snapshot()[0].events
    assert (event.outcome, event.dropped_headers) == ("served", 3)
