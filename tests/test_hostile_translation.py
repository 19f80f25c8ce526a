"""The OpenAI-to-Anthropic translation under hostile input, at the client's boundary: a request
shape the translation cannot read skips the Anthropic member (``protocol_mismatch``), an error
event's type is bounded, and a huge stream event is refused before commit and ended in-band
after it, without holding the event loop."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from asgi_lifespan import LifespanManager

from asgi_router import ModelRouter
from asgi_router.testing import FakeUpstream, reply

from .conftest import host_app, make_settings

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def openai_up() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def claude_up() -> Iterator[FakeUpstream]:
    with FakeUpstream(kind="anthropic") as up:
        yield up


@asynccontextmanager
async def routed(
    claude: FakeUpstream, openai: FakeUpstream | None = None, client_timeout: float = 60, **settings: Any
) -> AsyncIterator[httpx2.AsyncClient]:
    providers = {"claude": claude.provider()}
    members = ["claude/m"]
    if openai is not None:
        providers["gpt"] = openai.provider()
        members.append("gpt/m")
    settings = {"groups": {"g": {"members": members}}, **settings}
    router = ModelRouter(host_app(), settings=make_settings("http://127.0.0.1:9", providers=providers, **settings))
    async with LifespanManager(router):
        transport = httpx2.ASGITransport(app=router)
        async with httpx2.AsyncClient(transport=transport, base_url="http://router", timeout=client_timeout) as client:
            yield client


def _with_tool_calls(value: Any) -> dict[str, Any]:
    return {
        "model": "group/g",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": value},
            {"role": "user", "content": "and?"},
        ],
    }


# --- 5. a request the translation cannot read ---------------------------------------------------------


@pytest.mark.parametrize("tool_calls", [5, True, "call", {"id": "x"}, 1.5], ids=repr)
async def test_tool_calls_that_are_not_a_list_skip_the_anthropic_member_for_the_next(
    claude_up: FakeUpstream, openai_up: FakeUpstream, tool_calls: Any
) -> None:
    async with routed(claude_up, openai_up) as client:
        response = await client.post("/v1/chat/completions", json=_with_tool_calls(tool_calls))
    assert response.status_code == 200, response.text
    assert response.headers["x-router-model"] == "gpt/m"


@pytest.mark.parametrize("tool_calls", [5, True], ids=repr)
async def test_tool_calls_that_are_not_a_list_are_a_400_protocol_mismatch_when_no_member_can_take_them(
    claude_up: FakeUpstream, tool_calls: Any
) -> None:
    async with routed(claude_up) as client:
        response = await client.post("/v1/chat/completions", json=_with_tool_calls(tool_calls))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "protocol_mismatch"
    assert "tool_calls" in error["message"]


# --- 8. an error event's type ----------------------------------------------------------------------


def _events(*events: dict[str, Any]) -> list[bytes]:
    return [f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events]


_START = {
    "type": "message_start",
    "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "usage": {}},
}
_TEXT = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "hello"}}


async def test_an_error_events_megabyte_type_reaches_the_client_bounded(claude_up: FakeUpstream) -> None:
    huge = "overloaded" + "x" * 1_000_000
    error = {"type": "error", "error": {"type": huge, "message": "busy"}}
    claude_up.script("m", reply.raw(*_events(_START, _TEXT, error)))
    async with routed(claude_up) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "group/g", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        )
    assert response.status_code == 200
    assert "hello" in response.text  # committed: the error is in-band
    assert len(response.content) < 4000, len(response.content)
    assert "overloadedxxx" in response.text  # the type, cut short


# --- 4. events bounded, translation linear ---------------------------------------------------------------


def _big_text_event(size: int) -> bytes:
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "y" * size}}
    return b"event: content_block_delta\ndata: " + json.dumps(delta).encode() + b"\n\n"


def _pieces(data: bytes, size: int) -> list[bytes]:
    return [data[at : at + size] for at in range(0, len(data), size)]


async def test_an_event_over_max_event_bytes_before_commit_fails_over_as_upstream_5xx(
    claude_up: FakeUpstream, openai_up: FakeUpstream
) -> None:
    claude_up.script("m", reply.raw(*_events(_START), _big_text_event(2 * 1024 * 1024)))  # default bound: 1 MiB
    async with routed(claude_up, openai_up) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "group/g", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        )
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "gpt/m"
    assert response.headers["x-router-attempts"] == "2"


async def test_an_event_over_max_event_bytes_after_commit_ends_the_stream_with_an_in_band_error(
    claude_up: FakeUpstream,
) -> None:
    # Written apart (interval): the text commits before the big event begins.
    claude_up.script("m", reply.raw(*_events(_START, _TEXT), *_pieces(_big_text_event(5000), 700), interval=0.05))
    async with routed(claude_up, max_event_bytes=4096) as client:
        response = await client.post(
            "/v1/chat/completions",
            json={"model": "group/g", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        )
    assert response.status_code == 200
    assert "hello" in response.text
    assert '"error"' in response.text and "larger than 4096 bytes" in response.text
    assert "data: [DONE]" not in response.text and "yyyy" not in response.text


@pytest.mark.load
async def test_a_huge_event_in_small_pieces_costs_linear_time_and_never_holds_the_loop(
    claude_up: FakeUpstream,
) -> None:
    """30 MB of one event in 16 KiB pieces: refused at the bound, quickly, while a ticker on the
    same event loop keeps ticking (the translation never holds the loop for long)."""
    pieces = _pieces(_big_text_event(30 * 1024 * 1024), 16 * 1024)
    claude_up.script("m", reply.raw(*_events(_START, _TEXT), *pieces))
    gaps: list[float] = []
    stop = asyncio.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    try:
        async with routed(claude_up, client_timeout=20) as client:
            response = await client.post(
                "/v1/chat/completions",
                json={"model": "group/g", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
            )
    finally:
        stop.set()
        await ticker
    assert response.status_code == 200
    assert "larger than 1048576 bytes" in response.text
    assert max(gaps) < 0.5, max(gaps)  # generous: two shared cores
