"""Streams that finish: a stream that breaks or stalls after its first byte is continued by a
candidate whose ``resume`` allows it, and the client gets one stream; a stream commits on its
first real event; a stream whose end was sent is ``served`` whatever the client does next.

Real parts: the kit's :class:`FakeUpstream` servers, the router on a real socket, the official
``openai`` and ``anthropic`` SDKs as clients (and raw HTTP where the bytes themselves matter)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
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
from .doubles import FakeClock, RecordSink
from .servers import ServerThread
from .waiting import eventually

pytestmark = pytest.mark.anyio

#: Sixty words, streamed one chunk each by the fake.
TEXT = " ".join(f"w{index}" for index in range(1, 61))
_FAST = {"connect": 1, "first_byte": 2, "idle": 2, "total": 20}
_HI = [{"role": "user", "content": "Count to sixty."}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture(autouse=True)
def _forget(fake: FakeUpstream) -> None:
    fake.reset()


def _router(
    fake: FakeUpstream,
    resume: str = "prefill",
    tracer_provider: Any = None,
    clock: Callable[[], float] = time.monotonic,
    **overrides: Any,
) -> tuple[ModelRouter, RecordSink]:
    providers = {
        name: fake.provider(timeouts=overrides.pop(f"{name}_timeouts", _FAST), resume=resume)
        for name in ("a", "b", "c")
    }
    providers.update(overrides.pop("providers", {}))
    overrides.setdefault("breaker", {"enabled": False})
    settings = RouterSettings(allow_unauthenticated=True, providers=providers, **overrides)
    records = RecordSink()
    router = ModelRouter(host_app(), settings=settings, sinks=[records], tracer_provider=tracer_provider, clock=clock)
    return router, records


async def _stream_text(server: ServerThread, model: str, **extra: Any) -> tuple[str, list[Any]]:
    async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0) as sdk:
        stream = await sdk.chat.completions.create(model=model, messages=_HI, stream=True, **extra)  # type: ignore[call-overload]
        chunks = [chunk async for chunk in stream]
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    return text, chunks


async def _raw(server: ServerThread, model: str, **extra: Any) -> bytes:
    async with httpx2.AsyncClient(timeout=10) as client:
        body = {"model": model, "messages": _HI, "stream": True, **extra}
        response = await client.post(f"{server.url}/v1/chat/completions", json=body)
    assert response.status_code == 200
    return response.content


def _events(body: bytes) -> list[bytes]:
    return [event for event in body.split(b"\n\n") if event]


async def _records(router: ModelRouter, records: RecordSink, count: int) -> RecordSink:
    """The finished requests, once ``count`` have finished (a request may still be winding down
    after its client has all it wanted)."""
    await eventually(lambda: len(records) >= count)
    assert await router.events.drain(5)
    assert len(records) == count
    return records


def _outcomes(record: RequestRecord) -> list[tuple[str, str, str]]:
    return [(event.candidate, event.outcome, event.reason) for event in record.events]


@pytest.mark.parametrize("mid_event", [False, True], ids=["between-events", "inside-an-event"])
async def test_a_stream_cut_after_40_of_60_words_resumes_on_the_same_candidate_as_one_stream(
    fake: FakeUpstream, mid_event: bool
) -> None:
    # 41 events: the assistant-role chunk and forty words.
    fake.script("m", reply.broken_stream(41, text=TEXT, mid_event=mid_event), reply.ok(TEXT))
    router, records = _router(fake)
    with ServerThread(router) as server:
        text, chunks = await _stream_text(server, "a/m", stream_options={"include_usage": True})
        fake.script("m", reply.broken_stream(41, text=TEXT, mid_event=mid_event), reply.ok(TEXT))
        raw = await _raw(server, "a/m")
    assert text == TEXT
    assert len({chunk.id for chunk in chunks}) == 1 and len({chunk.created for chunk in chunks}) == 1
    assert [chunk.choices[0].delta.role for chunk in chunks if chunk.choices].count("assistant") == 1
    finishes = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert finishes == ["stop"]
    usage = [chunk.usage for chunk in chunks if chunk.usage is not None]
    assert len(usage) == 1 and usage[0].completion_tokens > 20  # the continuation's plus the broken call's estimate
    events = _events(raw)
    assert events.count(b"data: [DONE]") == 1 and events[-1] == b"data: [DONE]"
    assert all(event.startswith(b"data: {") for event in events[:-1])  # no half event, no error
    continued = fake.hits[1].body["messages"][-1]
    assert continued == {"role": "assistant", "content": " ".join(TEXT.split()[:40])}
    first, _ = await _records(router, records, 2)
    assert _outcomes(first) == [("a/m", "resumed", "stream_interrupted"), ("a/m", "served", "served")]
    assert first.status == 200 and first.resumes == (("a/m", "served"),)
    assert first.tokens_measured is False


async def test_a_stall_resumes_on_the_next_resumable_member(fake: FakeUpstream) -> None:
    fake.script("slow", reply.stall_after_headers(30, after_chunks=21, text=TEXT))
    fake.script("m", reply.ok(TEXT))
    groups = {"g": {"members": ["a/slow", {"ref": "b/m", "resume": "none"}, "c/m"]}}
    router, records = _router(fake, a_timeouts={**_FAST, "idle": 0.3}, groups=groups)
    with ServerThread(router) as server:
        text, _ = await _stream_text(server, "group/g")
    assert text == TEXT
    (record,) = await _records(router, records, 1)
    # b/m's member table says it cannot continue: c/m, the next resumable one, did.
    assert _outcomes(record) == [("a/slow", "resumed", "timeout"), ("c/m", "served", "served")]
    assert fake.hits[-1].body["messages"][-1]["content"] == " ".join(TEXT.split()[:20])


async def test_a_continuation_refused_for_prefill_moves_on_to_the_next_candidate(fake: FakeUpstream) -> None:
    fake.script("m", reply.broken_stream(41, text=TEXT), reply.rejects_prefill(reply.ok(TEXT)))
    fake.script("picky", reply.rejects_prefill(reply.ok(TEXT)))
    fake.script("ok", reply.ok(TEXT))
    groups = {"g": {"members": ["a/m", "b/picky", "c/ok"]}}
    router, records = _router(fake, groups=groups)
    with ServerThread(router) as server:
        text, _ = await _stream_text(server, "group/g")
    assert text == TEXT
    (record,) = await _records(router, records, 1)
    # In the order the attempts ended: the broken call at its break, then each continuation.
    assert _outcomes(record) == [
        ("a/m", "resumed", "stream_interrupted"),
        ("a/m", "failed", "client_error"),
        ("b/picky", "failed", "client_error"),
        ("c/ok", "served", "served"),
    ]
    assert [event.index for event in record.events] == [0, 1, 2, 3]


async def test_with_every_continuation_refused_the_client_error_names_the_original_break(fake: FakeUpstream) -> None:
    fake.script("m", reply.broken_stream(41, text=TEXT), reply.rejects_prefill())
    fake.script("picky", reply.rejects_prefill())
    groups = {"g": {"members": ["a/m", "b/picky"]}}
    router, records = _router(fake, groups=groups)
    with ServerThread(router) as server:
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0) as sdk:
            stream = await sdk.chat.completions.create(model="group/g", messages=_HI, stream=True)  # type: ignore[arg-type]
            with pytest.raises(openai.APIError) as raised:
                async for _ in stream:
                    pass
    assert "stream_interrupted" in str(raised.value)
    assert "400" not in str(raised.value) and "prefill" not in str(raised.value)
    (record,) = await _records(router, records, 1)
    assert record.resumes == (("a/m", "failed"),)
    assert _outcomes(record) == [
        ("a/m", "failed", "stream_interrupted"),
        ("a/m", "failed", "client_error"),
        ("b/picky", "failed", "client_error"),
    ]


async def test_a_stall_resumes_on_an_anthropic_member_by_prefill_translated_whitespace_stripped(
    fake: FakeUpstream,
) -> None:
    # Cut after "w1 w2 " (its trailing space included): Claude must be sent "w1 w2".
    said = "w1 w2 "
    frames = [
        b'data: {"id":"c9","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,'
        b'"delta":{"content":"' + said.encode() + b'"},"finish_reason":null}]}\n\n'
    ]
    fake.script("slow", reply.raw(*frames, b"", interval=5))
    with FakeUpstream(kind="anthropic") as claude:
        claude.script("m", reply.ok(TEXT))
        providers = {"claude": claude.provider(timeouts=_FAST, resume="prefill")}
        groups = {"g": {"members": ["a/slow", "claude/m"]}}
        router, records = _router(fake, a_timeouts={**_FAST, "idle": 0.3}, providers=providers, groups=groups)
        with ServerThread(router) as server:
            text, chunks = await _stream_text(server, "group/g")
        sent = claude.hits[0].body["messages"][-1]
    assert sent == {"role": "assistant", "content": "w1 w2"}
    assert text == TEXT  # the space Claude says again is not said twice
    assert {chunk.id for chunk in chunks} == {"c9"} and {chunk.created for chunk in chunks} == {7}
    (record,) = await _records(router, records, 1)
    assert _outcomes(record) == [("a/slow", "resumed", "timeout"), ("claude/m", "served", "served")]


async def test_resume_none_keeps_todays_in_band_error_byte_exact(fake: FakeUpstream) -> None:
    router, _ = _router(fake, resume="none")
    with ServerThread(router) as server:
        fake.script("m", reply.ok(TEXT))
        whole = _events(await _raw(server, "a/m"))
        fake.script("m", reply.broken_stream(41, text=TEXT, mid_event=True))
        raw = await _raw(server, "a/m")
    sent = b"\n\n".join(whole[:41]) + b"\n\n"
    assert raw.startswith(sent)
    cut = whole[41] + b"\n\n"
    half = raw[len(sent) :]
    assert half.startswith(cut[: len(cut) // 2])  # the cut event's half, as it came
    error = half[len(cut) // 2 :].lstrip(b"\n")
    assert error.startswith(b"data: {") and b"stream_interrupted" in error
    assert b"[DONE]" not in raw and len(fake.hits) == 2  # the whole answer, then the broken one alone


async def test_a_tool_call_stream_is_never_resumed(fake: FakeUpstream) -> None:
    head = b'data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    role = head + b'"delta":{"role":"assistant","content":null},"finish_reason":null}]}\n\n'
    call = head + (
        b'"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}]},'
        b'"finish_reason":null}]}\n\n'
    )
    fake.script("tool", reply.raw(role, call, head[:30]))  # then it ends inside an event
    router, records = _router(fake)
    with ServerThread(router) as server:
        raw = await _raw(server, "a/tool")
    assert raw.startswith(role + call)
    assert b"stream_interrupted" in raw and b"[DONE]" not in raw
    assert len(fake.hits) == 1  # nobody was asked to continue
    (record,) = await _records(router, records, 1)
    assert _outcomes(record) == [("a/tool", "failed", "stream_interrupted")]


@pytest.mark.parametrize("first", [0, 1], ids=["error-first", "role-only-then-error"])
async def test_a_200_whose_first_real_event_is_an_error_fails_over_and_counts_for_the_breaker(
    fake: FakeUpstream, first: int
) -> None:
    fake.script("sick", reply.stream_error(first, code=503))
    fake.script("ok", reply.ok(TEXT))
    groups = {"g": {"members": ["a/sick", "b/ok"]}}
    breaker = {"consecutive_failures": 1, "open_for": 60}
    router, records = _router(fake, resume="none", groups=groups, breaker=breaker)
    with ServerThread(router) as server:
        text, _ = await _stream_text(server, "group/g")
        again, _ = await _stream_text(server, "group/g")
    assert text == again == TEXT
    one, two = await _records(router, records, 2)
    assert _outcomes(one) == [("a/sick", "failed", "upstream_5xx"), ("b/ok", "served", "served")]
    assert _outcomes(two) == [("a/sick", "skipped", "circuit_open"), ("b/ok", "served", "served")]


async def test_an_anthropic_stream_whose_first_real_event_is_an_error_fails_over_on_the_messages_route() -> None:
    with FakeUpstream(kind="anthropic") as claude:
        claude.script("sick", reply.stream_error(1, code=529))  # message_start, then overloaded_error
        claude.script("ok", reply.ok(TEXT))
        providers = {"claude": claude.provider(timeouts=_FAST)}
        settings = RouterSettings(
            allow_unauthenticated=True,
            providers=providers,
            groups={"g": {"members": ["claude/sick", "claude/ok"]}},
            routes=["/v1/chat/completions", "/v1/messages"],
        )
        records = RecordSink()
        router = ModelRouter(host_app(), settings=settings, sinks=[records])
        with ServerThread(router) as server:
            client = anthropic_sdk.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0)
            async with client:
                async with client.messages.stream(model="group/g", max_tokens=100, messages=_HI) as stream:  # type: ignore[arg-type]
                    text = "".join([part async for part in stream.text_stream])
    assert text == TEXT
    (record,) = await _records(router, records, 1)
    assert _outcomes(record) == [("claude/sick", "failed", "upstream_5xx"), ("claude/ok", "served", "served")]


@pytest.mark.parametrize("resume", ["none", "prefill"])  # the byte-exact relay, and whole events only
async def test_a_client_closing_right_after_done_leaves_a_served_record_and_closes_a_half_open_breaker(
    fake: FakeUpstream, resume: str
) -> None:
    frames = [
        b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
        b'"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\n',
        b"data: [DONE]\n\n",
        b"",  # the upstream's end comes late: the client has left by then
    ]
    fake.script("m", reply.status(503), reply.raw(*frames, interval=0.3))
    breaker = {"consecutive_failures": 1, "open_for": 0.2}
    clock = FakeClock(time.monotonic())
    router, records = _router(fake, resume=resume, breaker=breaker, retries=0, clock=clock)
    with ServerThread(router) as server:
        async with httpx2.AsyncClient(timeout=10) as client:
            failed = await client.post(f"{server.url}/v1/chat/completions", json={"model": "a/m", "messages": _HI})
            assert failed.status_code == 502  # the router's own: every candidate failed
            assert router.state.breaker("a/m").phase.value == "open"  # type: ignore[union-attr]
            clock.advance(0.3)  # open_for runs out: the next request is the half-open probe
            body = {"model": "a/m", "messages": _HI, "stream": True}
            async with client.stream("POST", f"{server.url}/v1/chat/completions", json=body) as response:
                async for line in response.aiter_lines():
                    if line == "data: [DONE]":
                        break  # and close the connection
        probe = (await _records(router, records, 2))[1]
    assert probe.status == 200
    assert _outcomes(probe) == [("a/m", "served", "served")]
    assert router.state.breaker("a/m").phase.value == "closed"  # type: ignore[union-attr]


def test_prefix_and_continue_final_message_are_refused_on_an_anthropic_provider_at_load() -> None:
    base = {"base_url": "http://127.0.0.1:9/v1", "kind": "anthropic"}
    for mode in ("prefix", "continue_final_message"):
        with pytest.raises(ValueError, match=f'resume = "{mode}" is not for kind = "anthropic"'):
            RouterSettings(allow_unauthenticated=True, providers={"claude": {**base, "resume": mode}})
        with pytest.raises(ValueError, match=r"groups\.g\.members\.0\.resume"):
            RouterSettings(
                allow_unauthenticated=True,
                providers={"claude": base},
                groups={"g": {"members": [{"ref": "claude/x", "resume": mode}]}},
            )
    settings = RouterSettings(allow_unauthenticated=True, providers={"claude": {**base, "resume": "prefill"}})
    assert settings.providers["claude"].resume == "prefill" and settings.max_resumes == 2


def test_the_continuation_request_carries_each_modes_flags() -> None:
    from asgi_router.protocols.continuation import continuation_request

    payload = {"model": "m", "messages": _HI, "max_tokens": 100, "stream": True}
    prefix, _ = continuation_request(payload, "Hello ", "prefix", anthropic=False, sent_tokens=2)
    assert prefix["messages"][-1] == {"role": "assistant", "content": "Hello ", "prefix": True}
    assert prefix["max_tokens"] == 98 and payload["messages"] == _HI
    vllm, _ = continuation_request(payload, "Hello ", "continue_final_message", anthropic=False, sent_tokens=2)
    assert (vllm["continue_final_message"], vllm["add_generation_prompt"]) == (True, False)
    claude, skipped = continuation_request(payload, "Hello \n", "prefill", anthropic=True, sent_tokens=2)
    assert claude["messages"][-1] == {"role": "assistant", "content": "Hello"} and skipped == " \n"
    assert json.dumps(claude)  # still a JSON request


async def test_an_anthropic_client_gets_its_broken_stream_continued_as_one_message() -> None:
    # message_start, the text block's start, ping and 40 words; then a cut inside the next event.
    with FakeUpstream(kind="anthropic") as claude:
        claude.script("m", reply.broken_stream(43, text=TEXT, mid_event=True), reply.ok(TEXT))
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
                    text = "".join([part async for part in stream.text_stream])
                    message = await stream.get_final_message()
        continued = claude.hits[1].body
    assert text == TEXT
    assert message.stop_reason == "end_turn" and len(message.content) == 1
    assert continued["messages"][-1] == {"role": "assistant", "content": " ".join(TEXT.split()[:40])}
    assert continued["max_tokens"] < 100  # less what was already said
    (record,) = await _records(router, records, 1)
    assert _outcomes(record) == [("claude/m", "resumed", "stream_interrupted"), ("claude/m", "served", "served")]


async def test_max_resumes_bounds_the_continuations_and_a_group_may_override_it(fake: FakeUpstream) -> None:
    # Every call breaks: the router-level max_resumes (2) would continue twice, the group's once.
    fake.script("m", reply.broken_stream(11, text=TEXT))
    groups = {"g": {"members": ["a/m"], "max_resumes": 1}}
    router, records = _router(fake, groups=groups)
    with ServerThread(router) as server:
        raw = await _raw(server, "group/g")
        direct = await _raw(server, "a/m")
    assert b"stream_interrupted" in raw and b"[DONE]" not in raw
    assert b"stream_interrupted" in direct
    grouped, plain = await _records(router, records, 2)
    assert [event.outcome for event in grouped.events] == ["resumed", "failed"]
    assert [event.outcome for event in plain.events] == ["resumed", "resumed", "failed"]
    assert len(fake.hits) == 2 + 3


async def test_the_resumes_metric_counts_each_break_served_or_failed(fake: FakeUpstream) -> None:
    fake.script("m", reply.broken_stream(11, text=TEXT), reply.ok(TEXT))
    fake.script("gone", reply.broken_stream(11, text=TEXT), reply.rejects_prefill())
    groups = {"g": {"members": ["a/m"]}, "h": {"members": ["a/gone"]}}
    router, records = _router(fake, groups=groups, metrics_route="/metrics", metrics_public=True)
    with ServerThread(router) as server:
        assert (await _stream_text(server, "group/g"))[0] == TEXT
        await _raw(server, "group/h")
        await _records(router, records, 2)
        async with httpx2.AsyncClient() as client:
            metrics = (await client.get(f"{server.url}/metrics")).text
    assert 'asgi_router_resumes_total{candidate="a/m",outcome="served"} 1.0' in metrics
    assert 'asgi_router_resumes_total{candidate="a/gone",outcome="failed"} 1.0' in metrics
    assert 'asgi_router_attempts_total{candidate="a/m",outcome="resumed",reason="stream_interrupted"} 1.0' in metrics


async def test_each_continuation_is_an_attempt_span_of_its_own(fake: FakeUpstream) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    fake.script("m", reply.broken_stream(11, text=TEXT), reply.rejects_prefill())
    fake.script("ok", reply.ok(TEXT))
    router, records = _router(fake, tracer_provider=provider, groups={"g": {"members": ["a/m", "b/ok"]}})
    with ServerThread(router) as server:
        assert (await _stream_text(server, "group/g"))[0] == TEXT
    await _records(router, records, 1)
    attempts = sorted(
        (
            span
            for span in exporter.get_finished_spans()
            if span.attributes and "asgi_router.outcome" in span.attributes
        ),
        key=lambda span: span.start_time or 0,
    )
    assert [
        (span.attributes["asgi_router.candidate"], span.attributes["asgi_router.outcome"]) for span in attempts
    ] == [  # type: ignore[index]
        ("a/m", "resumed"),
        ("a/m", "failed"),
        ("b/ok", "served"),
    ]


async def test_a_body_that_is_no_event_stream_is_relayed_as_it_came_once_it_ends(fake: FakeUpstream) -> None:
    # A server that ignored "stream": nothing to judge, nothing held back for ever.
    fake.script(
        "json", reply.raw(b'{"id":"x",', b'"object":"chat.completion"}', headers={"content-type": "application/json"})
    )
    router, _ = _router(fake, resume="none")
    with ServerThread(router) as server:
        assert await _raw(server, "a/json") == b'{"id":"x","object":"chat.completion"}'
