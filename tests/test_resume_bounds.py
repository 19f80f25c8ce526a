"""Continuing a broken stream within bounds: a held event bounded by ``max_event_bytes``, the text
kept for a continuation bounded by ``max_body_bytes`` (and what the relay keeps by
``max_response_bytes``), a Messages continuation that opens a tool block at the next index, and
the order candidates are asked in after repeated breaks and stalls.

Real parts: the kit's :class:`FakeUpstream` servers, the router on a real socket, the official
``openai`` and ``anthropic`` SDKs as clients (raw HTTP where the bytes themselves matter).
"""

from __future__ import annotations

import json
from typing import Any

import anthropic as anthropic_sdk
import httpx2
import pytest

from asgi_router import ModelRouter
from asgi_router.config.settings import RouterSettings
from asgi_router.testing import FakeUpstream, reply

from .conftest import host_app
from .doubles import RecordSink
from .servers import ServerThread
from .test_resume import _FAST, _HI, TEXT, _outcomes, _records, _router, _stream_text
from .test_stream_ends import _chunk

pytestmark = pytest.mark.anyio

#: Sixty words of 26 characters: forty of them are over a kilobyte of text.
LONG_TEXT = " ".join(f"word{index:02d}" + "x" * 20 for index in range(1, 61))


async def _raw(server: ServerThread, model: str) -> bytes:
    async with httpx2.AsyncClient(timeout=10) as client:
        body = {"model": model, "messages": _HI, "stream": True}
        response = await client.post(f"{server.url}/v1/chat/completions", json=body)
    assert response.status_code == 200
    return response.content


async def test_an_event_past_max_event_bytes_on_a_resumable_plan_ends_the_stream_as_upstream_5xx(
    fake_upstream: FakeUpstream,
) -> None:
    opened = b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    never_ends = [opened + b'"delta":{"content":"'] + [b"x" * 1024] * 64  # 64 KiB, no end in sight
    writes = [_chunk({"role": "assistant", "content": ""}), _chunk({"content": "Hello"}), *never_ends]
    fake_upstream.script("m", reply.raw(*writes))
    router, records = _router(fake_upstream, max_event_bytes=16 * 1024)
    with ServerThread(router) as server:
        raw = await _raw(server, "a/m")
    assert b"Hello" in raw and b"x" * 1024 not in raw  # the events before it went out, it did not
    assert b"upstream_5xx" in raw and b"[DONE]" not in raw
    assert b"max_event_bytes" in raw
    (record,) = await _records(router, records, 1)
    assert _outcomes(record) == [("a/m", "failed", "upstream_5xx")]
    assert len(fake_upstream.hits) == 1  # not continued


@pytest.mark.parametrize(
    "limit",
    [{"max_body_bytes": 1024}, {"max_response_bytes": 4096}],
    ids=["the-continuation-request-would-pass-max_body_bytes", "the-events-sent-pass-max_response_bytes"],
)
async def test_a_break_whose_text_is_too_long_to_continue_gets_the_in_band_error(
    fake_upstream: FakeUpstream, limit: dict[str, Any]
) -> None:
    # 41 events: the role and forty words (over a kilobyte of text, 7 KiB of events).
    fake_upstream.script("m", reply.broken_stream(41, text=LONG_TEXT), reply.ok(LONG_TEXT))
    router, records = _router(fake_upstream, **limit)
    with ServerThread(router) as server:
        raw = await _raw(server, "a/m")
    assert b"stream_interrupted" in raw and b"[DONE]" not in raw
    assert len(fake_upstream.hits) == 1  # no continuation asked
    (record,) = await _records(router, records, 1)
    assert _outcomes(record) == [("a/m", "failed", "stream_interrupted")]


async def test_a_short_text_is_still_continued_under_a_small_max_body_bytes(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("m", reply.broken_stream(11, text=TEXT), reply.ok(TEXT))
    router, _ = _router(fake_upstream, max_body_bytes=1024)
    with ServerThread(router) as server:
        text, _ = await _stream_text(server, "a/m")
    assert text == TEXT
    continued = fake_upstream.hits[1]
    assert continued.body["messages"][-1]["content"] == " ".join(TEXT.split()[:10])
    assert len(json.dumps(continued.body, separators=(",", ":"))) <= 1024


async def test_a_messages_continuation_that_opens_with_a_tool_call_gets_the_next_block_index() -> None:
    with FakeUpstream(kind="anthropic") as claude:
        claude.script(
            "m", reply.broken_stream(13, text=TEXT, mid_event=True), reply.tool_call("lookup", {"q": "forty"})
        )
        settings = RouterSettings(
            allow_unauthenticated=True,
            providers={"claude": claude.provider(timeouts=_FAST, resume="prefill")},
            routes=["/v1/chat/completions", "/v1/messages"],
        )
        records = RecordSink()
        router = ModelRouter(host_app(), settings=settings, sinks=[records])
        with ServerThread(router) as server:
            client = anthropic_sdk.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0)
            async with client:
                async with client.messages.stream(model="claude/m", max_tokens=100, messages=_HI) as stream:  # type: ignore[arg-type]
                    message = await stream.get_final_message()
    assert [block.type for block in message.content] == ["text", "tool_use"]
    tool = message.content[1]
    assert tool.type == "tool_use" and tool.input == {"q": "forty"} and tool.name == "lookup"
    assert message.stop_reason == "tool_use"
    (record,) = await _records(router, records, 1)
    assert _outcomes(record) == [("claude/m", "resumed", "stream_interrupted"), ("claude/m", "served", "served")]


async def test_a_candidate_that_broke_once_is_asked_again_only_after_the_others(fake_upstream: FakeUpstream) -> None:
    # a/m breaks, its continuation breaks too: the next continuation is b's, not a third of a's.
    fake_upstream.script("m", reply.broken_stream(11, text=TEXT), reply.broken_stream(5, text=TEXT), reply.ok(TEXT))
    fake_upstream.script("ok", reply.ok(TEXT))
    router, records = _router(fake_upstream, groups={"g": {"members": ["a/m", "b/ok"]}})
    with ServerThread(router) as server:
        raw = await _raw(server, "group/g")
    assert raw.endswith(b"data: [DONE]\n\n")
    (record,) = await _records(router, records, 1)
    assert _outcomes(record) == [
        ("a/m", "resumed", "stream_interrupted"),
        ("a/m", "resumed", "stream_interrupted"),
        ("b/ok", "served", "served"),
    ]


async def test_a_cut_after_a_silence_of_half_the_idle_timeout_is_continued_on_the_next_candidate_first(
    fake_upstream: FakeUpstream,
) -> None:
    # a/m goes quiet for 0.6 s (its idle is 1 s), then drops the connection: a stall, not a mere cut.
    fake_upstream.script("slow", reply.stall_after_headers(0.6, after_chunks=11, text=TEXT))
    fake_upstream.script("ok", reply.ok(TEXT))
    router, records = _router(
        fake_upstream, a_timeouts={**_FAST, "idle": 1.0}, groups={"g": {"members": ["a/slow", "b/ok"]}}
    )
    with ServerThread(router) as server:
        text, _ = await _stream_text(server, "group/g")
    assert text == TEXT
    (record,) = await _records(router, records, 1)
    assert _outcomes(record) == [("a/slow", "resumed", "stream_interrupted"), ("b/ok", "served", "served")]
    assert [hit.model for hit in fake_upstream.hits] == ["slow", "ok"]
