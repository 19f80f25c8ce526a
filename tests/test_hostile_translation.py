"""The OpenAI-to-Anthropic translation under hostile input, at the client's boundary: a request
shape the translation cannot read skips the Anthropic member (``protocol_mismatch``), an error
event's type is bounded, and a huge stream event is refused before commit and ended in-band
after it, without holding the event loop."""

from __future__ import annotations

import json
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
    claude: FakeUpstream, openai: FakeUpstream | None = None, **settings: Any
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
        async with httpx2.AsyncClient(transport=transport, base_url="http://router", timeout=60) as client:
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
