"""How a committed stream ends: only a stream that said its finish is whole.

A stream whose body closes cleanly before its finish is cut short (a break: continued where the
plan allows, else the in-band error, so the SDK raises); one that breaks after its finish is a
whole answer the router ends itself; a 200 that says nothing a client shows before its end fails
over; a translated stream dropped before commit is ``stream_interrupted``; a continuation says
one end.

Real parts: the kit's :class:`FakeUpstream` servers (both protocols), the router on a real
socket, the official ``openai`` and ``anthropic`` SDKs as clients, raw HTTP where the bytes
themselves matter.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic as anthropic_sdk
import httpx2
import openai
import pytest

from asgi_router import ModelRouter
from asgi_router.config.settings import RouterSettings
from asgi_router.observability.events import RequestRecord
from asgi_router.testing import FakeUpstream, reply

from .conftest import host_app
from .doubles import RecordSink
from .servers import ServerThread
from .waiting import eventually

pytestmark = pytest.mark.anyio

_FAST = {"connect": 1, "first_byte": 2, "idle": 2, "total": 20}
_HI = [{"role": "user", "content": "Say hello."}]
_ROUTES = ["/v1/chat/completions", "/v1/messages"]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    event = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


_ROLE = _chunk({"role": "assistant", "content": ""})
_HELLO = [_chunk({"content": word}) for word in ("Hello", " there", ", friend")]
_FINISH = _chunk({}, "stop")
_DONE = b"data: [DONE]\n\n"


def _anthropic_event(kind: str, **fields: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()


_MESSAGE_START = _anthropic_event(
    "message_start",
    message={
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    },
)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def claude() -> Iterator[FakeUpstream]:
    with FakeUpstream(kind="anthropic") as up:
        yield up


@pytest.fixture(autouse=True)
def _forget(fake: FakeUpstream, claude: FakeUpstream) -> None:
    fake.reset()
    claude.reset()


def _router(fake: FakeUpstream, claude: FakeUpstream, resume: str = "none") -> tuple[ModelRouter, RecordSink]:
    providers = {
        "a": fake.provider(timeouts=_FAST, resume=resume),
        "b": fake.provider(timeouts=_FAST),
        "claude": claude.provider(timeouts=_FAST),
    }
    settings = RouterSettings(
        allow_unauthenticated=True,
        providers=providers,
        breaker={"enabled": False},
        routes=_ROUTES,
        groups={"g": {"members": ["a/m", "b/ok"]}, "cg": {"members": ["claude/m", "claude/ok"]}},
    )
    records = RecordSink()
    return ModelRouter(host_app(), settings=settings, sinks=[records]), records


async def _record(router: ModelRouter, records: RecordSink) -> RequestRecord:
    await eventually(lambda: len(records) >= 1)
    assert await router.events.drain(5)
    (record,) = records
    return record


def _outcomes(record: RequestRecord) -> list[tuple[str, str, str]]:
    return [(event.candidate, event.outcome, event.reason) for event in record.events]


async def _sdk_text(server: ServerThread, model: str) -> tuple[str, str | None]:
    async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0) as sdk:
        stream = await sdk.chat.completions.create(model=model, messages=_HI, stream=True)  # type: ignore[arg-type]
        chunks = [chunk async for chunk in stream]
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    finishes = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    return text, finishes[-1] if finishes else None


async def _raw(server: ServerThread, model: str) -> bytes:
    async with httpx2.AsyncClient(timeout=10) as client:
        body = {"model": model, "messages": _HI, "stream": True}
        response = await client.post(f"{server.url}/v1/chat/completions", json=body)
    assert response.status_code == 200
    return response.content


async def test_a_stream_whose_body_ends_cleanly_before_its_finish_makes_the_openai_sdk_raise(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    fake.script("m", reply.raw(_ROLE, *_HELLO))  # no finish_reason, no [DONE]: then the body ends
    router, records = _router(fake, claude)
    with ServerThread(router) as server:
        with pytest.raises(openai.APIError):
            await _sdk_text(server, "a/m")
    record = await _record(router, records)
    assert _outcomes(record) == [("a/m", "failed", "stream_interrupted")]


async def test_a_stream_that_ends_before_its_finish_is_resumed_where_the_plan_allows(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    fake.script("m", reply.raw(_ROLE, *_HELLO), reply.ok(" and goodbye."))
    router, records = _router(fake, claude, resume="prefill")
    with ServerThread(router) as server:
        text, finish = await _sdk_text(server, "a/m")
    assert text == "Hello there, friend and goodbye."
    assert finish == "stop"
    record = await _record(router, records)
    assert record.resumes == (("a/m", "served"),)


async def test_a_messages_stream_that_ends_before_its_stop_reason_makes_the_anthropic_sdk_raise(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    block = _anthropic_event("content_block_start", index=0, content_block={"type": "text", "text": ""})
    delta = _anthropic_event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hello"})
    claude.script("m", reply.raw(_MESSAGE_START, block, delta))
    router, records = _router(fake, claude)
    with ServerThread(router) as server:
        client = anthropic_sdk.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0)
        async with client:
            with pytest.raises(anthropic_sdk.APIError):
                async with client.messages.stream(model="claude/m", max_tokens=100, messages=_HI) as stream:  # type: ignore[arg-type]
                    [part async for part in stream.text_stream]
    record = await _record(router, records)
    assert _outcomes(record) == [("claude/m", "failed", "stream_interrupted")]


@pytest.mark.parametrize("resume", ["none", "prefill"])  # the byte-exact relay, and whole events
async def test_a_stream_that_breaks_after_its_finish_is_a_whole_answer_the_router_ends(
    fake: FakeUpstream, claude: FakeUpstream, resume: str
) -> None:
    fake.script("m", reply.raw(_ROLE, *_HELLO, _FINISH))  # usage and [DONE] missing
    router, records = _router(fake, claude, resume=resume)
    with ServerThread(router) as server:
        text, finish = await _sdk_text(server, "a/m")
        fake.script("m", reply.raw(_ROLE, *_HELLO, _FINISH))
        raw = await _raw(server, "a/m")
    assert (text, finish) == ("Hello there, friend", "stop")
    assert raw.endswith(_FINISH + _DONE)
    assert b'"error"' not in raw
    await eventually(lambda: len(records) >= 2)
    assert await router.events.drain(5)
    for record in records:
        assert _outcomes(record) == [("a/m", "served", "served")]
        assert record.tokens_measured is False


async def test_a_messages_stream_that_breaks_after_its_stop_reason_gets_message_stop(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    block = _anthropic_event("content_block_start", index=0, content_block={"type": "text", "text": ""})
    delta = _anthropic_event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hello"})
    stop = _anthropic_event("content_block_stop", index=0)
    finish = _anthropic_event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 1})
    claude.script("m", reply.raw(_MESSAGE_START, block, delta, stop, finish))
    router, records = _router(fake, claude)
    with ServerThread(router) as server:
        client = anthropic_sdk.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0)
        async with client:
            async with client.messages.stream(model="claude/m", max_tokens=100, messages=_HI) as stream:  # type: ignore[arg-type]
                text = "".join([part async for part in stream.text_stream])
                message = await stream.get_final_message()
    assert (text, message.stop_reason) == ("Hello", "end_turn")
    record = await _record(router, records)
    assert _outcomes(record) == [("claude/m", "served", "served")]


@pytest.mark.parametrize("translated", [False, True], ids=["relayed", "translated"])
async def test_a_chat_stream_that_shows_nothing_before_its_end_fails_over_as_an_empty_answer(
    fake: FakeUpstream, claude: FakeUpstream, translated: bool
) -> None:
    if translated:
        claude.script("m", reply.raw(_MESSAGE_START, _anthropic_event("ping"), _anthropic_event("message_stop")))
        claude.script("ok", reply.ok("Hi from the next one."))
        model = "group/cg"
    else:
        fake.script("m", reply.raw(_ROLE, _DONE))
        fake.script("ok", reply.ok("Hi from the next one."))
        model = "group/g"
    router, records = _router(fake, claude)
    with ServerThread(router) as server:
        text, _ = await _sdk_text(server, model)
    assert text == "Hi from the next one."
    record = await _record(router, records)
    first, second = ("claude/m", "claude/ok") if translated else ("a/m", "b/ok")
    assert _outcomes(record) == [(first, "failed", "upstream_5xx"), (second, "served", "served")]


async def test_a_messages_stream_that_shows_nothing_before_message_stop_fails_over(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    claude.script("m", reply.raw(_MESSAGE_START, _anthropic_event("ping"), _anthropic_event("message_stop")))
    claude.script("ok", reply.ok("Hi from the next one."))
    router, records = _router(fake, claude)
    with ServerThread(router) as server:
        client = anthropic_sdk.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0)
        async with client:
            async with client.messages.stream(model="group/cg", max_tokens=100, messages=_HI) as stream:  # type: ignore[arg-type]
                text = "".join([part async for part in stream.text_stream])
    assert text == "Hi from the next one."
    record = await _record(router, records)
    assert _outcomes(record) == [("claude/m", "failed", "upstream_5xx"), ("claude/ok", "served", "served")]


async def test_a_finish_with_no_content_commits(fake: FakeUpstream, claude: FakeUpstream) -> None:
    fake.script("m", reply.raw(_ROLE, _chunk({}, "length"), _DONE))
    router, records = _router(fake, claude)
    with ServerThread(router) as server:
        text, finish = await _sdk_text(server, "group/g")
    assert (text, finish) == ("", "length")
    record = await _record(router, records)
    assert _outcomes(record) == [("a/m", "served", "served")]


async def test_a_translated_stream_dropped_after_message_start_is_recorded_stream_interrupted(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    claude.script("m", reply.broken_stream(1))  # message_start, then the connection drops
    claude.script("ok", reply.ok("Hi from the next one."))
    router, records = _router(fake, claude)
    with ServerThread(router) as server:
        text, _ = await _sdk_text(server, "group/cg")
    assert text == "Hi from the next one."
    record = await _record(router, records)
    assert _outcomes(record) == [("claude/m", "failed", "stream_interrupted"), ("claude/ok", "served", "served")]


async def test_an_openai_error_event_after_the_first_byte_is_a_break_not_a_served_answer(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    fake.script("m", reply.stream_error(3, code=500, message="the model fell over"))
    router, records = _router(fake, claude)
    with ServerThread(router) as server:
        raw = await _raw(server, "a/m")  # read to its end (the SDK would leave at the error)
    assert b"the model fell over" in raw  # byte-exact: the upstream's event as it sent it
    assert raw.endswith(b'"code":"stream_interrupted","param":null}}\n\n')
    record = await _record(router, records)
    assert _outcomes(record) == [("a/m", "failed", "stream_interrupted")]


async def test_an_openai_error_event_after_the_first_byte_is_continued_where_the_plan_allows(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    fake.script("m", reply.stream_error(3, code=500, message="the model fell over"), reply.ok("The rest."))
    router, records = _router(fake, claude, resume="prefill")
    with ServerThread(router) as server:
        text, finish = await _sdk_text(server, "a/m")
    assert text.endswith("The rest.")
    assert finish == "stop"
    record = await _record(router, records)
    assert record.resumes == (("a/m", "served"),)
    assert [event.outcome for event in record.events] == ["resumed", "served"]


async def test_a_continuation_that_ends_with_an_error_event_counts_its_resume_failed(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    fake.script("m", reply.broken_stream(3), reply.stream_error(2, code=500, message="again"))
    router, records = _router(fake, claude, resume="prefill")
    with ServerThread(router) as server:
        with pytest.raises(openai.APIError):
            await _sdk_text(server, "a/m")
    record = await _record(router, records)
    assert record.resumes and {outcome for _, outcome in record.resumes} == {"failed"}
    assert record.events[-1].outcome == "failed"


async def test_a_continuation_says_one_role_and_one_done_and_nothing_after_it(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    rest = [_ROLE, _chunk({"content": " and goodbye."}), _chunk({"role": "assistant"}), _FINISH, _DONE]
    late = [_chunk({"content": " Extra."}), _DONE]
    fake.script("m", reply.raw(_ROLE, *_HELLO), reply.raw(*rest, *late))
    router, records = _router(fake, claude, resume="prefill")
    with ServerThread(router) as server:
        raw = await _raw(server, "a/m")
    events = [event for event in raw.split(b"\n\n") if event]
    assert events[-1] == b"data: [DONE]"
    assert raw.count(b"[DONE]") == 1
    assert b"Extra" not in raw
    assert raw.count(b'"role"') == 1
    record = await _record(router, records)
    assert record.resumes == (("a/m", "served"),)


async def test_an_event_that_is_not_json_breaks_a_stream_that_may_be_continued(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    garbage = b"data: <html>502 Bad Gateway</html>\n\n"  # a proxy's page, in the middle of the stream
    fake.script("m", reply.raw(_ROLE, *_HELLO, garbage, _FINISH, _DONE), reply.ok(" and goodbye."))
    router, records = _router(fake, claude, resume="prefill")
    with ServerThread(router) as server:
        raw = await _raw(server, "a/m")
    assert b"Bad Gateway" not in raw
    assert b"goodbye" in raw
    record = await _record(router, records)
    assert record.resumes == (("a/m", "served"),)


async def test_an_object_that_is_not_json_breaks_a_stream_that_may_be_continued(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    garbage = b"data: {not json, a proxy's cut\n\n"
    fake.script("m", reply.raw(_ROLE, *_HELLO, garbage, _FINISH, _DONE), reply.ok(" and goodbye."))
    router, records = _router(fake, claude, resume="prefill")
    with ServerThread(router) as server:
        raw = await _raw(server, "a/m")
    assert b"not json" not in raw
    assert b"goodbye" in raw and raw.endswith(_DONE)
    record = await _record(router, records)
    assert record.resumes == (("a/m", "served"),)


async def test_an_error_event_then_done_is_relayed_as_sent_byte_exact_and_recorded_a_break(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    error = b'data: {"error":{"message":"the model fell over","type":"server_error","code":null}}\n\n'
    fake.script("m", reply.raw(_ROLE, *_HELLO, error, _DONE))
    router, records = _router(fake, claude)
    with ServerThread(router) as server:
        raw = await _raw(server, "a/m")
        with pytest.raises(openai.APIError, match="the model fell over"):
            await _sdk_text(server, "a/m")
    assert raw == _ROLE + b"".join(_HELLO) + error + _DONE  # byte-exact: as the upstream sent it
    await eventually(lambda: len(records) >= 2)
    assert await router.events.drain(5)
    assert [_outcomes(record) for record in records] == [[("a/m", "failed", "stream_interrupted")]] * 2


async def test_a_translated_stream_that_breaks_after_its_stop_reason_is_a_whole_answer(
    fake: FakeUpstream, claude: FakeUpstream
) -> None:
    block = _anthropic_event("content_block_start", index=0, content_block={"type": "text", "text": ""})
    delta = _anthropic_event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hello"})
    finish = _anthropic_event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 1})
    claude.script("m", reply.raw(_MESSAGE_START, block, delta, finish))  # message_stop missing
    router, records = _router(fake, claude)
    with ServerThread(router) as server:
        text, finish_reason = await _sdk_text(server, "claude/m")
    assert (text, finish_reason) == ("Hello", "stop")
    record = await _record(router, records)
    assert _outcomes(record) == [("claude/m", "served", "served")]
