"""A Messages API answer as a chat completion: whole bodies, streams event by event, and the
properties that matter most: whatever the chunking, every text byte and every tool-argument
byte arrives, in order, and nothing is held back once an event is complete."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asgi_router.core.route_paths import route_kind
from asgi_router.core.router_errors import AttemptSummary
from asgi_router.protocols.anthropic_errors import (
    anthropic_error_body,
    anthropic_error_type,
    anthropic_stream_error_event,
    openai_error_from_anthropic,
    status_of_error_type,
)
from asgi_router.protocols.from_anthropic import StreamTranslation, completion_from_message
from asgi_router.protocols.sse import EventSplitter

_FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _event(data: dict[str, Any], newline: str = "\n", compact: bool = True) -> bytes:
    """An event compact (as the Messages API writes it: text deltas take the unparsed path) or
    spaced (as another server might: every event is parsed)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":") if compact else None)
    return f"event: {data['type']}{newline}data: {text}{newline}{newline}".encode()


def _stream(texts: list[str], arguments: list[str], newline: str = "\n", compact: bool = True) -> bytes:
    """A Messages stream: a text block of ``texts`` deltas, then a tool_use block of ``arguments``."""
    start = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": []}
    start["usage"] = {"input_tokens": 9, "cache_read_input_tokens": 3, "output_tokens": 1}
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}} for t in texts),
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
        },
        *(
            {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": a}}
            for a in arguments
        ),
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 21}},
        {"type": "message_stop"},
    ]
    return b"".join(_event(event, newline, compact) for event in events)


def _chunks(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted({cut % (len(data) + 1) for cut in cuts}), len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


def _openai_chunks(sse: bytes) -> list[dict[str, Any]]:
    """The JSON chunks of an OpenAI SSE stream, checking it ends in ``[DONE]``."""
    frames = sse.split(b"\n\n")
    assert frames[-2:] == [b"data: [DONE]", b""]
    return [json.loads(frame.removeprefix(b"data: ")) for frame in frames[:-2]]


# Any text, quotes, backslashes, control characters and astral characters included.
_texts = st.lists(
    st.text(min_size=1, max_size=12) | st.sampled_from(['"', "\\", "\n\t\x00", "😀"]), min_size=1, max_size=6
)
_json_pieces = st.lists(st.text(alphabet='{}[]":, ab\\\u00e9\u4f60', min_size=1, max_size=8), max_size=6)


@_FAST
@given(
    texts=_texts,
    arguments=_json_pieces,
    cuts=st.lists(st.integers(min_value=0), max_size=40),
    compact=st.booleans(),
)
def test_every_text_and_tool_argument_byte_survives_any_chunking(
    texts: list[str], arguments: list[str], cuts: list[int], compact: bool
) -> None:
    translation = StreamTranslation(include_usage=True)
    sse = b"".join(translation.feed(chunk) for chunk in _chunks(_stream(texts, arguments, compact=compact), cuts))
    assert translation.finished and translation.failure is None
    chunks = _openai_chunks(sse)
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    calls = [call for c in chunks if c["choices"] for call in c["choices"][0]["delta"].get("tool_calls", [])]
    assert content == "".join(texts)
    assert "".join(call["function"].get("arguments", "") for call in calls) == "".join(arguments)
    assert calls[0] == {"index": 0, "id": "toolu_1", "type": "function", "function": {"name": "f", "arguments": ""}}
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "tool_calls"
    assert chunks[-1]["usage"] == {  # the cache's reads among the prompt tokens, as OpenAI states them
        "prompt_tokens": 12,
        "completion_tokens": 21,
        "total_tokens": 33,
        "prompt_tokens_details": {"cached_tokens": 3, "cache_write_tokens": 0},
    }


_CREATED = re.compile(rb'"created":[0-9]+')


@_FAST
@given(texts=_texts, cuts=st.lists(st.integers(min_value=0), max_size=30))
def test_crlf_framed_streams_translate_the_same(texts: list[str], cuts: list[int]) -> None:
    plain, crlf = StreamTranslation(False), StreamTranslation(False)
    expected = plain.feed(_stream(texts, ["{}"]))
    got = b"".join(crlf.feed(chunk) for chunk in _chunks(_stream(texts, ["{}"], "\r\n"), cuts))
    # The two translations may stamp ``created`` a second apart: framing is what is compared.
    assert _CREATED.sub(b"", got) == _CREATED.sub(b"", expected)


def test_each_complete_event_is_translated_at_once() -> None:
    translation = StreamTranslation(include_usage=False)
    data = _stream(["Hi", " there"], [])
    head, delta = data.split(b"event: content_block_delta", 2)[:2]
    assert translation.feed(head).count(b"data: ") == 1  # the role chunk: nothing to show yet
    assert not translation.ready
    out = translation.feed(b"event: content_block_delta" + delta)
    assert translation.ready and json.loads(out.removeprefix(b"data: "))["choices"][0]["delta"] == {"content": "Hi"}


def test_an_error_event_is_a_failure_and_ends_the_translation() -> None:
    translation = StreamTranslation(include_usage=False)
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert translation.feed(_event(error)) == b""
    assert translation.failure == ("overloaded_error", "Overloaded")
    assert translation.feed(_stream(["late"], [])) == b""


def test_an_unreadable_event_is_a_failure() -> None:
    translation = StreamTranslation(include_usage=False)
    translation.feed(b"event: message_start\ndata: {not json\n\n")
    assert translation.failure == ("api_error", "the upstream sent an event that is not a JSON object")


def test_a_stream_that_stops_early_is_not_finished() -> None:
    translation = StreamTranslation(include_usage=False)
    translation.feed(_stream(["Hi"], []).split(b"event: message_delta")[0])
    assert translation.ready and not translation.finished


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        (None, "stop"),
    ],
)
def test_a_whole_message_becomes_a_chat_completion(stop: str | None, finish: str) -> None:
    message = {
        "id": "msg_2",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Hel"},
            {"type": "text", "text": "lo"},
            {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {"a": [1, "é"]}},
        ],
        "stop_reason": stop,
        "usage": {"input_tokens": 5, "cache_creation_input_tokens": 2, "output_tokens": 4},
    }
    body = completion_from_message(json.dumps(message).encode(), created=7)
    assert body is not None
    assert json.loads(body) == {
        "id": "msg_2",
        "object": "chat.completion",
        "created": 7,
        "model": "claude-x",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Hello",
                    "tool_calls": [
                        {"id": "toolu_9", "type": "function", "function": {"name": "f", "arguments": '{"a":[1,"é"]}'}}
                    ],
                    "reasoning_content": "hmm",
                },
                "finish_reason": finish,
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": 7,
            "completion_tokens": 4,
            "total_tokens": 11,
            "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 2},
        },
    }


def test_a_tool_only_message_has_null_content() -> None:
    message = {"type": "message", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}
    body = completion_from_message(json.dumps(message).encode())
    assert body is not None and json.loads(body)["choices"][0]["message"]["content"] is None


@pytest.mark.parametrize("body", [b"", b"[]", b'{"type": "error"}', b'{"type": "message", "content": "x"}', b"\xff"])
def test_a_body_that_is_no_message_is_refused(body: bytes) -> None:
    assert completion_from_message(body) is None


# --- SSE framing ---------------------------------------------------------------------------------


@_FAST
@given(cuts=st.lists(st.integers(min_value=0), max_size=20), newline=st.sampled_from(["\n", "\r\n", "\r"]))
def test_the_event_splitter_finds_each_events_data_whatever_the_cuts(cuts: list[int], newline: str) -> None:
    lines = ["event: a", "data: one", "data: two", "", ": note", "", "data: é", "", ""]
    text = newline.join(lines)
    splitter = EventSplitter()
    found = [data for chunk in _chunks(text.encode(), cuts) for data in splitter.feed(chunk)]
    assert found == [b"one\ntwo", "é".encode()]
    assert not splitter.pending


# --- error shapes --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "back"),
    [
        (400, "invalid_request_error", 400),
        (401, "authentication_error", 401),
        (403, "permission_error", 403),
        (404, "not_found_error", 404),
        (413, "request_too_large", 413),
        (415, "invalid_request_error", 400),
        (429, "rate_limit_error", 429),
        (500, "api_error", 500),
        (502, "api_error", 500),
        (503, "api_error", 500),
        (529, "overloaded_error", 529),
    ],
)
def test_the_routers_errors_take_anthropics_type_for_their_status(status: int, kind: str, back: int) -> None:
    assert anthropic_error_type(status) == kind
    assert status_of_error_type(kind) == back  # and an upstream's error event reads as that status


def test_an_anthropic_error_body_lists_the_attempts() -> None:
    attempts = (AttemptSummary("claude/x", "upstream_5xx", 529),)
    assert json.loads(anthropic_error_body(502, "claude/x: upstream_5xx (529)", attempts)) == {
        "type": "error",
        "error": {
            "type": "api_error",
            "message": "claude/x: upstream_5xx (529)",
            "attempts": [{"candidate": "claude/x", "reason": "upstream_5xx", "status": 529}],
        },
    }


def test_the_in_band_stream_error_is_an_error_event() -> None:
    event = anthropic_stream_error_event("claude/x", "stream_interrupted", "upstream connection broke")
    name, data = event.removesuffix(b"\n\n").split(b"\n")
    assert name == b"event: error"
    assert json.loads(data.removeprefix(b"data: ")) == {
        "type": "error",
        "error": {
            "type": "api_error",
            "message": "claude/x: stream_interrupted: upstream connection broke; the response is incomplete",
        },
    }


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            b'{"type":"error","error":{"type":"invalid_request_error","message":"bad\\nthing"}}',
            {"message": "bad thing", "type": "invalid_request_error", "param": None, "code": None},
        ),
        (
            b"<html>nope</html>",
            {"message": "<html>nope</html>", "type": "invalid_request_error", "param": None, "code": None},
        ),
        (
            b"",
            {
                "message": "the upstream refused the request",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            },
        ),
    ],
)
def test_an_anthropic_refusal_reads_as_openais_error(body: bytes, error: dict[str, Any]) -> None:
    assert json.loads(openai_error_from_anthropic(body)) == {"error": error}


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/v1/chat/completions", "chat"),
        ("/llm/chat/completions/", "chat"),
        ("/v1/messages", "messages"),
        ("/anthropic/v1/messages", "messages"),
        ("/v1/messages/count_tokens", "openai"),
        ("/v1/embeddings", "openai"),
    ],
)
def test_a_routes_protocol_follows_its_path(path: str, kind: str) -> None:
    assert route_kind(path) == kind
