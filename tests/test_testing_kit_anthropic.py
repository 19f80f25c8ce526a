"""The test kit's Anthropic fake (``FakeUpstream(kind="anthropic")``): each reply as a client sees
it on the wire (the official ``anthropic`` SDK, or the raw bytes), what it refuses as the
Messages API does, writes split at awkward places, and a router failing over to it from an
OpenAI fake.

The fakes are the plugin's fixtures (``fake_anthropic_upstream``, ``fake_upstream``): one server
each for the session, reset before each test, as a user's suite has them.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import anyio
import httpx2
import openai
import pytest
from starlette.applications import Starlette

from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import TEST_KEY, AppServer, CapturedEvents, FakeUpstream, reply

pytestmark = pytest.mark.anyio

_MESSAGES = [{"role": "user", "content": "two words"}]
_VERSION = "2023-06-01"
_ANSWER = [
    "message_start",
    "content_block_start",
    "ping",
    "content_block_delta",
    "content_block_delta",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
]


def _post(upstream: FakeUpstream, model: str, *, timeout: float = 5, **body: Any) -> httpx2.Response:
    headers = {"x-api-key": upstream.api_key, "anthropic-version": _VERSION}
    payload = {"model": model, "max_tokens": 64, "messages": _MESSAGES, **body}
    return httpx2.post(f"{upstream.base_url}/messages", json=payload, headers=headers, timeout=timeout)


def _events(raw: bytes) -> list[dict[str, Any]]:
    """The events of a Messages stream, each checked to be ``event: <type>`` and ``data: <json>``
    of that type, then a blank line (LF only)."""
    assert raw.endswith(b"\n\n") and b"\r" not in raw
    events = []
    for block in raw.split(b"\n\n")[:-1]:
        name, data = block.split(b"\n")
        event = json.loads(data.removeprefix(b"data: "))
        assert (name, data[:6]) == (b"event: " + event["type"].encode(), b"data: ")
        events.append(event)
    return events


def _names(events: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in events]


def _sdk(upstream: FakeUpstream) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=upstream.base_url.removesuffix("/v1"), api_key=upstream.api_key, max_retries=0)


# --- answers ---------------------------------------------------------------------------------------


def test_an_unscripted_model_answers_ok_naming_it_as_a_message_and_as_anthropics_event_stream(
    fake_anthropic_upstream: FakeUpstream,
) -> None:
    with _sdk(fake_anthropic_upstream) as client:
        message = client.messages.create(model="any-model", max_tokens=64, messages=_MESSAGES)  # type: ignore[arg-type]
        with client.messages.stream(model="any-model", max_tokens=64, messages=_MESSAGES) as stream:  # type: ignore[arg-type]
            pieces = list(stream.text_stream)
            final = stream.get_final_message()
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Hello from any-model"  # type: ignore[union-attr]
    assert (message.id, message.model, message.stop_reason) == ("msg_fake", "any-model", "end_turn")
    assert (message.usage.input_tokens, message.usage.output_tokens) == (2, 3)
    assert message._request_id == "req_fake"  # the request-id header, on every answer
    assert pieces == ["Hello", " from", " any-model"]
    assert (final.stop_reason, final.usage.output_tokens) == ("end_turn", 3)

    raw = _post(fake_anthropic_upstream, "any-model", stream=True)
    assert raw.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert raw.headers["request-id"] == "req_fake"
    events = _events(raw.content)
    assert _names(events) == _ANSWER
    assert b'event: ping\ndata: {"type": "ping"}\n\n' in raw.content  # spelled as the API spells it
    assert events[0]["message"]["content"] == [] and events[0]["message"]["stop_reason"] is None
    assert events[0]["message"]["usage"] == {"input_tokens": 2, "output_tokens": 1}
    assert events[1]["content_block"] == {"type": "text", "text": ""}
    assert events[-2]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert events[-2]["usage"] == {"output_tokens": 3}


def test_ok_says_its_text_cut_into_the_chunks_asked_for_with_the_usage_and_headers_given(
    fake_anthropic_upstream: FakeUpstream,
) -> None:
    usage = {"input_tokens": 7, "output_tokens": 9}
    fake_anthropic_upstream.script("m", reply.ok("abcdefgh", chunks=4, usage=usage, headers={"Request-Id": "req_1"}))
    whole = _post(fake_anthropic_upstream, "m")
    streamed = _post(fake_anthropic_upstream, "m", stream=True)
    assert whole.json()["content"] == [{"type": "text", "text": "abcdefgh"}]
    assert whole.json()["usage"] == usage
    assert whole.headers["request-id"] == streamed.headers["request-id"] == "req_1"  # the reply's header wins
    events = _events(streamed.content)
    deltas = [event["delta"] for event in events if event["type"] == "content_block_delta"]
    assert deltas == [{"type": "text_delta", "text": text} for text in ("ab", "cd", "ef", "gh")]
    assert events[0]["message"]["usage"] == {"input_tokens": 7, "output_tokens": 1}
    assert events[-2]["usage"] == {"output_tokens": 9}


def test_a_tool_call_is_a_tool_use_block_whole_and_input_json_deltas_streamed(
    fake_anthropic_upstream: FakeUpstream,
) -> None:
    arguments = '{"location": "Paris, FR", "unit": "°C"}'
    fake_anthropic_upstream.script("m", reply.tool_call("get_weather", arguments, text="Let me check."))
    with _sdk(fake_anthropic_upstream) as client:
        message = client.messages.create(model="m", max_tokens=64, messages=_MESSAGES)  # type: ignore[arg-type]
        with client.messages.stream(model="m", max_tokens=64, messages=_MESSAGES) as stream:  # type: ignore[arg-type]
            final = stream.get_final_message()
    for answer in (message, final):
        text, call = answer.content
        assert text.type == "text" and text.text == "Let me check."
        assert call.type == "tool_use"
        assert (call.id, call.name, call.input) == (
            "toolu_fake",
            "get_weather",
            {"location": "Paris, FR", "unit": "°C"},
        )
        assert answer.stop_reason == "tool_use"

    events = _events(_post(fake_anthropic_upstream, "m", stream=True).content)
    opened = [event for event in events if event["type"] == "content_block_start"]
    assert [(event["index"], event["content_block"]["type"]) for event in opened] == [(0, "text"), (1, "tool_use")]
    assert opened[1]["content_block"] == {"type": "tool_use", "id": "toolu_fake", "name": "get_weather", "input": {}}
    partial = [event["delta"]["partial_json"] for event in events if event.get("index") == 1 and "delta" in event]
    assert partial[0] == ""  # the API opens the input with an empty piece
    assert partial[1:] == ['{"location":', ' "Paris,', ' FR",', ' "unit":', ' "°C"}']  # one per word
    assert "".join(partial) == arguments  # byte for byte as scripted


def test_a_tool_call_without_text_opens_with_its_block_and_keeps_the_id_given(
    fake_anthropic_upstream: FakeUpstream,
) -> None:
    fake_anthropic_upstream.script("m", reply.tool_call("lookup", {"q": "x"}, id="toolu_1", chunks=2))
    whole = _post(fake_anthropic_upstream, "m").json()
    assert whole["content"] == [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}}]
    events = _events(_post(fake_anthropic_upstream, "m", stream=True).content)
    assert _names(events)[:3] == ["message_start", "content_block_start", "ping"]
    partial = [event["delta"]["partial_json"] for event in events if event["type"] == "content_block_delta"]
    assert partial == ["", '{"q":', ' "x"}']


# --- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
        (418, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (503, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_status_answers_an_anthropic_shaped_error_of_the_type_its_status_names(
    fake_anthropic_upstream: FakeUpstream, code: int, kind: str
) -> None:
    fake_anthropic_upstream.script("m", reply.status(code, retry_after=3))
    response = _post(fake_anthropic_upstream, "m", stream=True)  # an error is JSON, streamed or not
    assert response.status_code == code
    assert response.headers["content-type"] == "application/json"
    assert response.headers["retry-after"] == "3"
    body = response.json()
    assert set(body) == {"type", "error", "request_id"} and body["type"] == "error"
    assert body["error"]["type"] == kind
    assert body["request_id"] == response.headers["request-id"] == "req_fake"


def test_the_anthropic_sdk_raises_the_class_of_each_scripted_status(fake_anthropic_upstream: FakeUpstream) -> None:
    fake_anthropic_upstream.script("m", reply.status(529), reply.status(429, retry_after=2), reply.status(400))
    raised: list[tuple[type[Exception], str]] = []
    with _sdk(fake_anthropic_upstream) as client:
        for _ in range(3):
            with pytest.raises(anthropic.APIStatusError) as caught:
                client.messages.create(model="m", max_tokens=8, messages=_MESSAGES)  # type: ignore[arg-type]
            assert isinstance(caught.value.body, dict)
            raised.append((type(caught.value), caught.value.body["error"]["type"]))
    assert raised == [
        (anthropic.OverloadedError, "overloaded_error"),
        (anthropic.RateLimitError, "rate_limit_error"),
        (anthropic.BadRequestError, "invalid_request_error"),
    ]


def test_a_stream_error_is_an_error_event_after_the_chunks_asked_for_and_the_sdk_raises_on_it(
    fake_anthropic_upstream: FakeUpstream,
) -> None:
    fake_anthropic_upstream.script("m", reply.stream_error(4, 529, "Overloaded"))
    streamed = _post(fake_anthropic_upstream, "m", stream=True)  # ends properly: no protocol error
    assert streamed.status_code == 200
    events = _events(streamed.content)
    assert _names(events) == [*_ANSWER[:4], "error"]
    assert events[-1] == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    received: list[str] = []
    with _sdk(fake_anthropic_upstream) as client, pytest.raises(anthropic.APIStatusError) as caught:
        with client.messages.stream(model="m", max_tokens=8, messages=_MESSAGES) as stream:  # type: ignore[arg-type]
            received.extend(stream.text_stream)
    assert received == ["Hello"]
    assert caught.value.body == events[-1]
    whole = _post(fake_anthropic_upstream, "m")  # not streamed: the error is the answer's status
    assert (whole.status_code, whole.json()["error"]) == (529, {"type": "overloaded_error", "message": "Overloaded"})


def test_a_stream_error_at_once_is_the_only_event(fake_anthropic_upstream: FakeUpstream) -> None:
    fake_anthropic_upstream.script("m", reply.stream_error(0))
    events = _events(_post(fake_anthropic_upstream, "m", stream=True).content)
    assert _names(events) == ["error"]
    assert events[0]["error"]["type"] == "api_error"  # 500 unless told


def test_a_broken_stream_drops_the_connection_after_the_events_asked_for(fake_anthropic_upstream: FakeUpstream) -> None:
    fake_anthropic_upstream.script("m", reply.broken_stream(5))
    received: list[bytes] = []
    headers = {"anthropic-version": _VERSION}
    body = {"model": "m", "max_tokens": 8, "messages": _MESSAGES, "stream": True}
    with pytest.raises(httpx2.RemoteProtocolError):  # the chunked body never ends properly
        with httpx2.stream(
            "POST", f"{fake_anthropic_upstream.base_url}/messages", json=body, headers=headers
        ) as answer:
            received.extend(answer.iter_raw())
    assert _names(_events(b"".join(received))) == _ANSWER[:5]
    texts: list[str] = []
    with _sdk(fake_anthropic_upstream) as client, pytest.raises(httpx2.RemoteProtocolError):
        with client.messages.stream(model="m", max_tokens=8, messages=_MESSAGES) as stream:  # type: ignore[arg-type]
            texts.extend(stream.text_stream)
    assert texts == ["Hello", " from"]
    hit = fake_anthropic_upstream.hits[0].wait()
    assert (hit.status, hit.completed, hit.disconnected) == (200, False, False)  # the fake broke it


def test_stall_stall_after_headers_and_slow_answer_in_anthropics_terms(fake_anthropic_upstream: FakeUpstream) -> None:
    fake_anthropic_upstream.script("hung", reply.stall(0.1))
    fake_anthropic_upstream.script("quiet", reply.stall_after_headers(30, after_chunks=2))
    fake_anthropic_upstream.script("slow", reply.slow(0.3, reply.status(529)))
    hung = _post(fake_anthropic_upstream, "hung")
    assert (hung.status_code, hung.json()["error"]["type"]) == (504, "timeout_error")
    received: list[bytes] = []
    headers = {"anthropic-version": _VERSION}
    body = {"model": "quiet", "max_tokens": 8, "messages": _MESSAGES, "stream": True}
    with pytest.raises(httpx2.ReadTimeout):
        with httpx2.stream(
            "POST",
            f"{fake_anthropic_upstream.base_url}/messages",
            json=body,
            headers=headers,
            timeout=httpx2.Timeout(5, read=0.5),
        ) as answer:
            received.extend(answer.iter_raw())
    assert _names(_events(b"".join(received))) == _ANSWER[:2]
    started = time.monotonic()
    slow = _post(fake_anthropic_upstream, "slow")
    assert (slow.status_code, slow.json()["error"]["type"]) == (529, "overloaded_error")
    assert time.monotonic() - started >= 0.3


@pytest.mark.parametrize(
    ("headers", "body", "said"),
    [
        ({}, {"model": "m", "max_tokens": 8, "messages": _MESSAGES}, "anthropic-version: header is required"),
        ({"anthropic-version": _VERSION}, {"model": "m", "messages": _MESSAGES}, "max_tokens: Field required"),
        ({"anthropic-version": _VERSION}, {"model": "m", "max_tokens": 0, "messages": _MESSAGES}, "max_tokens"),
        ({"anthropic-version": _VERSION}, {"model": "m", "max_tokens": 8, "messages": []}, "messages: Field required"),
        ({"anthropic-version": _VERSION}, {"max_tokens": 8, "messages": _MESSAGES}, "model: Field required"),
        ({"anthropic-version": _VERSION}, [1, 2], "JSON object"),
    ],
)
def test_the_fake_refuses_what_the_messages_api_refuses_before_it_looks_at_the_script(
    fake_anthropic_upstream: FakeUpstream, headers: dict[str, str], body: Any, said: str
) -> None:
    fake_anthropic_upstream.script("m", reply.ok("scripted"))
    response = httpx2.post(f"{fake_anthropic_upstream.base_url}/messages", json=body, headers=headers)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and said in error["message"]
    assert len(fake_anthropic_upstream.hits) == 1  # the request is a hit all the same


def test_ok_continues_an_assistant_prefill_and_trailing_whitespace_in_it_is_refused(
    fake_anthropic_upstream: FakeUpstream,
) -> None:
    fake_anthropic_upstream.script("m", reply.ok("one two three"))
    with _sdk(fake_anthropic_upstream) as client:
        prefilled = [*_MESSAGES, {"role": "assistant", "content": "one"}]
        rest = client.messages.create(model="m", max_tokens=10, messages=prefilled)  # type: ignore[arg-type]
        trailing = [*_MESSAGES, {"role": "assistant", "content": "one "}]
        with pytest.raises(anthropic.BadRequestError, match="trailing whitespace"):
            client.messages.create(model="m", max_tokens=10, messages=trailing)  # type: ignore[arg-type]
    assert rest.content[0].text == " two three"  # type: ignore[union-attr]


def test_models_list_what_was_scripted_or_asked_for_and_other_routes_are_anthropic_404s(
    fake_anthropic_upstream: FakeUpstream,
) -> None:
    fake_anthropic_upstream.script("scripted", reply.ok())
    _post(fake_anthropic_upstream, "asked")
    listed = httpx2.get(f"{fake_anthropic_upstream.base_url}/models").json()
    assert [(model["type"], model["id"]) for model in listed["data"]] == [("model", "asked"), ("model", "scripted")]
    assert (listed["has_more"], listed["first_id"], listed["last_id"]) == (False, "asked", "scripted")
    missing = httpx2.post(f"{fake_anthropic_upstream.base_url}/chat/completions", json={})
    assert (missing.status_code, missing.json()["error"]["type"]) == (404, "not_found_error")


# --- split writes ------------------------------------------------------------------------------------


async def _writes(upstream: FakeUpstream, path: str, body: dict[str, Any]) -> list[bytes]:
    """The body writes of ``upstream``'s answer to ``body``, driven in process by hand: each
    ``http.response.body`` message is one write, as a server would send it."""
    sent: list[dict[str, Any]] = []
    request = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]
    client_stays = anyio.Event()

    async def receive() -> dict[str, Any]:
        if request:
            return request.pop()
        await client_stays.wait()  # never set: the client listens to the end
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"anthropic-version", _VERSION.encode())]
    scope = {"type": "http", "method": "POST", "path": path, "headers": headers, "client": ("127.0.0.1", 1)}
    with anyio.fail_after(10):
        await upstream(scope, receive, send)
    return [message["body"] for message in sent if message["type"] == "http.response.body" and message["body"]]


@pytest.mark.parametrize(
    ("kind", "path", "field"), [("anthropic", "/v1/messages", b"eve"), ("openai", "/v1/chat/completions", b"dat")]
)
async def test_split_writes_cut_each_write_inside_its_field_name_a_utf8_character_and_its_final_newlines(
    fake_upstream: FakeUpstream, fake_anthropic_upstream: FakeUpstream, kind: str, path: str, field: bytes
) -> None:
    upstream = fake_anthropic_upstream if kind == "anthropic" else fake_upstream
    upstream.script("whole", reply.ok("Hi — 你好"))
    upstream.script("split", reply.split_writes(reply.ok("Hi — 你好")))
    body = {"max_tokens": 8, "messages": _MESSAGES, "stream": True}
    whole = await _writes(upstream, path, {**body, "model": "whole"})
    split = await _writes(upstream, path, {**body, "model": "split"})
    assert b"".join(split).replace(b"split", b"whole") == b"".join(whole)  # the same bytes, in more writes
    dash = "—".encode()
    assert len(split) == 3 * len(whole) + 2  # one more cut in each of the two events with a multi-byte character
    for event, pieces in zip(whole, _groups(split, whole), strict=True):
        assert pieces[0] == field  # a reader must join the field name across writes
        assert pieces[-1] == b"\n"  # and the event's end
        assert b"".join(pieces) == event.replace(b"whole", b"split")
    cut = [at for at, piece in enumerate(split) if piece.endswith(dash[:1])]
    assert len(cut) == 1 and split[cut[0] + 1].startswith(dash[1:])  # "—" arrives in two writes


def _groups(split: list[bytes], whole: list[bytes]) -> list[list[bytes]]:
    """``split`` grouped into the events of ``whole`` (the same events, each cut in pieces)."""
    groups: list[list[bytes]] = []
    pieces = iter(split)
    for event in whole:
        group = [next(pieces)]
        while len(b"".join(group)) < len(event):
            group.append(next(pieces))
        groups.append(group)
    return groups


# --- a router in front of it -------------------------------------------------------------------------


def test_a_group_fails_over_from_an_openai_fake_to_the_anthropic_fakes_provider_entry(
    fake_upstream: FakeUpstream, fake_anthropic_upstream: FakeUpstream
) -> None:
    fake_upstream.script("gpt-4o", reply.status(503))
    fake_anthropic_upstream.script("claude", reply.ok("Hello from Claude — 你好"))
    provider = fake_anthropic_upstream.provider(timeouts={"first_byte": 5})
    assert provider == {
        "base_url": fake_anthropic_upstream.base_url,
        "api_key": TEST_KEY,
        "kind": "anthropic",
        "timeouts": {"first_byte": 5},
    }
    captured = CapturedEvents()
    settings = RouterSettings(
        providers={"openai": fake_upstream.provider(), "anthropic": provider},
        groups={"chat": {"members": ["openai/gpt-4o", "anthropic/claude"]}},
        allow_unauthenticated=True,
    )
    with AppServer(ModelRouter(Starlette(), settings=settings, sinks=[captured])) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        whole = client.chat.completions.with_raw_response.create(model="group/chat", messages=_MESSAGES)  # type: ignore[arg-type]
        stream = client.chat.completions.create(model="group/chat", messages=_MESSAGES, stream=True)  # type: ignore[arg-type]
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
    assert whole.parse().choices[0].message.content == streamed == "Hello from Claude — 你好"
    assert captured.attempts(whole.headers["x-request-id"]) == [
        ("openai/gpt-4o", "failed", "upstream_5xx"),
        ("anthropic/claude", "served", "served"),
    ]
    first, second = fake_anthropic_upstream.hits
    assert (first.path, first.model, first.stream, second.stream) == ("/v1/messages", "claude", False, True)
    assert first.headers["x-api-key"] == TEST_KEY and "authorization" not in first.headers
    assert first.headers["anthropic-version"]
    assert first.body["messages"] == _MESSAGES and first.body["max_tokens"] == 4096
