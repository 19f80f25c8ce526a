"""OpenAI clients served by Anthropic providers: the official ``openai`` SDK against groups that
mix a failing OpenAI member with a ``kind = "anthropic"`` one (the kit's Anthropic fake,
scripted by tests/fake_anthropic.py), through
real sockets. Translation out (the Messages request on the wire), back (whole, streamed, tool
calls), Anthropic's failures classified, and a stream that breaks after commit raising."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest

from asgi_router import ModelRouter
from asgi_router.testing.anthropic_wire import TOOL_USE_ID

from .conftest import API_KEY, shared_routers
from .fake_anthropic import REQUEST_ID, TEXT, TEXT_DELTAS, TOOL_ARGUMENTS, FakeAnthropic
from .mock_upstream import MockUpstream
from .servers import ServersByTransport, ServerThread

pytestmark = pytest.mark.anyio

_HI = [{"role": "user", "content": "hi"}]
_WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather at a place",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]},
    },
}


@pytest.fixture(scope="module")
def routers(
    upstream: MockUpstream, refused_url: str, anthropic: FakeAnthropic
) -> Iterator[ServersByTransport[ModelRouter]]:
    timeouts = {"connect": 1, "first_byte": 2, "idle": 2, "total": 10}
    claude = anthropic.provider(timeouts=timeouts)
    providers = {"claude": claude, "rekeyed": {**claude, "api_key": "sk-ant-revoked-0123456789"}}
    groups = {
        "mixed": {"members": ["mock/status-503", "claude/ok"]},
        "mixed-tool": {"members": ["down/gpt", "claude/tool"]},
        "overloaded": {"members": ["claude/overloaded", "mock2/ok"]},
        "forbidden": {"members": ["claude/forbidden", "mock2/ok"]},
        "revoked": {"members": ["rekeyed/ok", "mock2/ok"]},
        "limited": {"members": ["claude/ratelimited-3", "claude/ratelimited-7"]},
        "overflow": {"members": ["mock/ctx-exceeded", "claude/too-long"]},
        "refusing": {"members": ["claude/invalid", "mock2/ok"]},
        "error-first": {"members": ["claude/error-first", "mock2/ok"]},
        "either": {"members": ["claude/ok", "mock2/ok"]},
    }
    with shared_routers(upstream, refused_url, providers=providers, groups=groups) as served:
        yield served


def _text(completion: Any) -> str:
    return str(completion.choices[0].message.content)


async def test_a_failing_openai_member_fails_over_to_claude_for_a_non_streaming_completion(
    sdk: openai.AsyncOpenAI,
) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(model="group/mixed", messages=_HI)
    completion = raw.parse()
    assert _text(completion) == TEXT
    assert completion.choices[0].finish_reason == "stop"
    assert completion.object == "chat.completion"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (11, 7)
    assert raw.headers["x-router-model"] == "claude/ok"
    assert raw.headers["x-router-attempts"] == "2"
    assert raw.headers["x-upstream-request-id"] == REQUEST_ID
    assert raw.headers["content-type"].startswith("application/json")


@pytest.mark.both_transports
async def test_a_failing_openai_member_fails_over_to_claude_for_a_stream_of_chunks_ending_in_done(
    sdk: openai.AsyncOpenAI, server: ServerThread
) -> None:
    stream = await sdk.chat.completions.create(
        model="group/mixed", messages=_HI, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    deltas = [chunk.choices[0].delta.content for chunk in chunks if chunk.choices and chunk.choices[0].delta.content]
    assert deltas == list(TEXT_DELTAS)  # one chunk per text_delta, as they arrived
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert (chunks[-1].usage.prompt_tokens, chunks[-1].usage.completion_tokens) == (11, 7)
    async with httpx2.AsyncClient() as client:  # the wire itself: OpenAI's SSE, ending in [DONE]
        body = {"model": "group/mixed", "messages": _HI, "stream": True}
        response = await client.post(f"{server.url}/v1/chat/completions", json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.content.endswith(b"data: [DONE]\n\n")
    assert b"event:" not in response.content and b'"usage"' not in response.content


async def test_a_tool_call_round_trip_through_claude_after_an_openai_member_fails(sdk: openai.AsyncOpenAI) -> None:
    first = await sdk.chat.completions.create(model="group/mixed-tool", messages=_HI, tools=[_WEATHER_TOOL])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me check."
    (call,) = choice.message.tool_calls or []
    assert (call.id, call.type, call.function.name) == (TOOL_USE_ID, "function", "get_weather")
    assert json.loads(call.function.arguments) == json.loads(TOOL_ARGUMENTS)
    history: list[Any] = [
        *_HI,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny in Paris"},
    ]
    second = await sdk.chat.completions.create(model="group/mixed-tool", messages=history, tools=[_WEATHER_TOOL])
    assert _text(second) == "It is sunny in Paris."


@pytest.mark.both_transports
async def test_a_streamed_tool_call_keeps_every_argument_byte(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.chat.completions.create(
        model="group/mixed-tool", messages=_HI, tools=[_WEATHER_TOOL], stream=True
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    async for chunk in stream:
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for delta in choice.delta.tool_calls or []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            if delta.function is not None:
                call["name"] += delta.function.name or ""
                call["arguments"] += delta.function.arguments or ""
    assert calls == {0: {"id": TOOL_USE_ID, "name": "get_weather", "arguments": TOOL_ARGUMENTS}}
    assert finish == "tool_calls"


async def test_the_messages_request_on_the_wire_is_anthropics(server: ServerThread, anthropic: FakeAnthropic) -> None:
    body = {
        "model": "claude/echo",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Look:"}, _image()]},
        ],
        "max_completion_tokens": 50,
        "temperature": 0.5,
        "stop": "END",
        "user": "user-42",
        "n": 1,
        "store": False,
    }
    async with httpx2.AsyncClient() as client:
        response = await client.post(f"{server.url}/v1/chat/completions", json=body, headers={"x-request-id": "wire1"})
    assert response.status_code == 200
    sent = json.loads(response.json()["choices"][0]["message"]["content"])
    assert sent == {
        "model": "echo",
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Look:"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                ],
            }
        ],
        "max_tokens": 50,
        "temperature": 0.5,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "user-42"},
    }
    (received,) = anthropic.received("wire1")
    assert received.path == "/v1/messages"
    assert received.headers["x-api-key"] == API_KEY
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in received.headers


def _image() -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


async def test_a_request_without_max_tokens_gets_the_providers_default(
    server: ServerThread, anthropic: FakeAnthropic
) -> None:
    async with httpx2.AsyncClient() as client:
        body = {"model": "claude/ok", "messages": _HI}
        response = await client.post(f"{server.url}/v1/chat/completions", json=body, headers={"x-request-id": "mt1"})
    assert response.status_code == 200
    assert anthropic.received("mt1")[0].body["max_tokens"] == 4096


@pytest.mark.parametrize("group", ["overloaded", "forbidden", "revoked"])
async def test_claude_overloaded_or_refusing_the_key_fails_over(sdk: openai.AsyncOpenAI, group: str) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(model=f"group/{group}", messages=_HI)
    assert raw.headers["x-router-model"] == "mock2/ok"
    assert raw.headers["x-router-attempts"] == "2"


async def test_claude_rate_limits_are_a_429_with_the_smallest_retry_after(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.RateLimitError) as caught:
        await sdk.chat.completions.create(model="group/limited", messages=_HI)
    assert caught.value.response.headers["retry-after"] == "3"
    assert isinstance(caught.value.body, dict)
    assert [a["reason"] for a in caught.value.body["attempts"]] == ["rate_limited", "rate_limited"]


async def test_a_prompt_too_long_for_claude_is_a_context_window_failure(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(model="group/overflow", messages=_HI)
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.message.startswith("Error code: 400 - prompt is too long: 208310 tokens > 200000 maximum")


async def test_any_other_claude_400_stops_and_reaches_the_client_in_openai_shape(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(model="group/refusing", messages=_HI)
    assert caught.value.response.headers["x-router-model"] == "claude/invalid"
    assert caught.value.type == "invalid_request_error"
    assert caught.value.body == {
        "message": "messages.0.content: text content blocks must be non-empty",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }


@pytest.mark.both_transports
async def test_an_error_event_before_anything_to_show_fails_over(sdk: openai.AsyncOpenAI) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(model="group/error-first", messages=_HI, stream=True)
    assert raw.headers["x-router-model"] == "mock2/ok"
    parts = [chunk.choices[0].delta.content async for chunk in raw.parse() if chunk.choices[0].delta.content]
    assert "".join(parts) == "Hello from ok"


@pytest.mark.both_transports
@pytest.mark.parametrize(
    ("model", "said"), [("claude/break-6", "stream_interrupted"), ("claude/error-6", "overloaded_error: Overloaded")]
)
async def test_the_openai_sdk_raises_on_a_translated_stream_that_breaks_after_commit(
    sdk: openai.AsyncOpenAI, model: str, said: str
) -> None:
    stream = await sdk.chat.completions.create(model=model, messages=_HI, stream=True)
    received: list[str] = []
    with pytest.raises(openai.APIError) as caught:
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    # six events: message_start, content_block_start, ping, then three text deltas of the kit's
    # default stream ("Hello", " from", " <model id>") of the three and more it would send
    assert "".join(received) == f"Hello from {model.removeprefix('claude/')}"
    assert said in caught.value.message
    assert "incomplete" in caught.value.message


async def test_a_field_claude_cannot_take_skips_it_for_a_member_that_can(sdk: openai.AsyncOpenAI) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(model="group/either", messages=_HI, logprobs=True)
    assert raw.headers["x-router-model"] == "mock2/ok"
    assert raw.headers["x-router-attempts"] == "1"  # the skip is no attempt


async def test_a_field_no_member_can_take_is_a_400_naming_it(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(model="claude/ok", messages=_HI, n=2)
    assert caught.value.code == "protocol_mismatch"
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["message"] == (
        "claude/ok: protocol_mismatch (n 2 has no equivalent in Anthropic's Messages API)"
    )
    assert caught.value.body["attempts"] == [
        {
            "candidate": "claude/ok",
            "reason": "protocol_mismatch",
            "status": None,
            "detail": "n 2 has no equivalent in Anthropic's Messages API",
        }
    ]
