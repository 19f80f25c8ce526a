"""A Responses request as chat completions, and a chat completion (whole or streamed, an
Anthropic member's composed) as a Responses answer: the tricky mappings, refusals that name the
field and never raise, and streams cut at every byte boundary."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_router.attempts.usage import find_usage
from asgi_router.protocols.chat_to_responses import ResponsesStream, echo_of, response_from_completion
from asgi_router.protocols.responses_to_chat import (
    AT_DEFAULT_ONLY,
    IGNORED,
    STATEFUL,
    TRANSLATED,
    to_chat_request,
    without_strict,
)
from asgi_router.protocols.to_anthropic import Untranslatable


def _chat(**fields: Any) -> dict[str, Any]:
    translated = to_chat_request({"model": "m", **fields})
    assert not isinstance(translated, Untranslatable), translated
    return translated


def _refusal(**fields: Any) -> str:
    translated = to_chat_request({"model": "m", **fields})
    assert isinstance(translated, Untranslatable)
    return translated.detail


def test_a_string_input_and_instructions_become_a_system_and_a_user_message_without_model() -> None:
    assert _chat(input="hi", instructions="Be brief.", store=True, metadata={"a": "b"}) == {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    }


def test_input_items_become_chat_messages_with_calls_joined_to_their_assistant_turn() -> None:
    items = [
        {"role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "https://x.test/a.png", "detail": "low"},
            ],
        },
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "opaque"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"x":1}'},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
    ]
    assert _chat(input=items)["messages"] == [
        {"role": "system", "content": "rules"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "low"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "g", "arguments": '{"x":1}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]


def test_flat_function_tools_nest_under_function_and_keep_strict_for_chat_but_not_for_anthropic() -> None:
    tool = {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True}
    chat = _chat(input="hi", tools=[tool], tool_choice={"type": "function", "name": "f"}, parallel_tool_calls=False)
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": True},
        }
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["parallel_tool_calls"] is False
    assert without_strict(chat)["tools"][0]["function"] == {
        "name": "f",
        "description": "d",
        "parameters": {"type": "object"},
    }


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"max_output_tokens": 50}, {"max_tokens": 50}),
        ({"temperature": 0.2, "top_p": 0.5}, {"temperature": 0.2, "top_p": 0.5}),
        ({"stream": True}, {"stream": True, "stream_options": {"include_usage": True}}),
        ({"stream": False}, {}),
        ({"user": "u"}, {"user": "u"}),
        ({"parallel_tool_calls": True}, {}),  # without tools: servers refuse it
        ({"tool_choice": "required"}, {}),  # the same
        ({"reasoning": {"effort": "low", "summary": "auto"}}, {"reasoning_effort": "low"}),
        ({"text": {"format": {"type": "text"}}}, {}),
        ({"text": {"format": {"type": "json_object"}}}, {"response_format": {"type": "json_object"}}),
        (
            {"text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}, "strict": True}}},
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "s", "schema": {"type": "object"}, "strict": True},
                }
            },
        ),
        ({"truncation": "disabled", "background": False, "include": [], "store": False}, {}),
    ],
)
def test_translated_fields_carry_their_meaning(fields: dict[str, Any], expected: dict[str, Any]) -> None:
    chat = _chat(input="hi", **fields)
    assert {key: value for key, value in chat.items() if key != "messages"} == expected


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"tools": [{"type": "web_search"}]}, 'a tool of type "web_search"'),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, 'input[0]: an item of type "item_reference"'),
        ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, '"input_file"'),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}, "file_id"),
        ({"input": [{"role": "tool", "content": "x"}]}, 'role "tool"'),
        ({"input": [{"type": "function_call", "call_id": "c"}]}, "a function_call needs"),
        ({"truncation": "auto"}, "truncation has no equivalent"),
        ({"conversation": "conv_1"}, "conversation has no equivalent"),
        ({"text": {"verbosity": "low"}}, 'text.verbosity "low"'),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
        ({"max_output_tokens": 0}, "max_output_tokens must be a positive integer"),
        ({"previous_response_id": "resp_1"}, STATEFUL),
        ({"input": 5}, "input must be a string or a list of items"),
        ({"input": [["x"]]}, "input[0] must be an object"),
        ({"tools": [{"type": "function", "name": "f", "parameters": {}}], "tool_choice": 3}, "tool_choice"),
    ],
)
def test_what_chat_completions_cannot_say_is_untranslatable_naming_the_field(
    fields: dict[str, Any], named: str
) -> None:
    assert named in _refusal(**({"input": "hi"} | fields))


def test_a_request_without_input_is_untranslatable() -> None:
    assert _refusal(instructions="x") == "input is required"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "role",
                    "content",
                    "text",
                    "name",
                    "call_id",
                    "arguments",
                    "output",
                    "image_url",
                    "format",
                    "schema",
                    "function",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from([*TRANSLATED, *AT_DEFAULT_ONLY, *IGNORED, "other"]), _JSON, max_size=5))
def test_any_json_is_translated_or_untranslatable_never_an_exception(fields: dict[str, Any]) -> None:
    result = to_chat_request(fields)
    if not isinstance(result, Untranslatable):
        json.dumps(result)  # a body the wire can send


def _tables() -> list[list[list[str]]]:
    page = (Path(__file__).resolve().parents[2] / "docs" / "protocols.md").read_text(encoding="utf-8")
    section = page.split("### The Responses API on any member", 1)[1].split("\n## ", 1)[0]
    tables: list[list[list[str]]] = []
    for block in re.split(r"\n(?!\|)", section):
        rows = [line for line in block.splitlines() if line.startswith("|")]
        if rows:
            tables.append([[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]])
    return tables


def _names(cell: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", cell)) - {"true", "false", "null"}


def test_the_protocols_page_lists_exactly_the_fields_the_code_translates_accepts_and_ignores() -> None:
    translated, (defaults_and_ignored,), *_ = _tables()
    assert set().union(*(_names(row[0]) for row in translated)) == set(TRANSLATED)
    assert _names(defaults_and_ignored[0]) == set(AT_DEFAULT_ONLY)
    assert _names(defaults_and_ignored[1]) == IGNORED


# -- the answer ----------------------------------------------------------------------------------


def _completion(content: str | None, calls: list[dict[str, Any]] | None = None, finish: str = "stop") -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    usage = {
        "prompt_tokens": 10,
        "completion_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 3},
        "completion_tokens_details": {"reasoning_tokens": 1},
    }
    body = {"id": "c", "object": "chat.completion", "created": 7, "model": "up-model", "usage": usage}
    body["choices"] = [{"index": 0, "message": message, "finish_reason": finish}]
    return json.dumps(body).encode()


def test_a_whole_completion_becomes_a_response_object_with_items_usage_and_no_store() -> None:
    call = {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
    echo = echo_of({"model": "m", "input": "hi", "instructions": "be brief", "tools": []})
    response = json.loads(response_from_completion(_completion("Hi", [call]), echo, "resp_abc") or b"")
    assert {key: response[key] for key in ("id", "object", "status", "model", "store", "created_at")} == {
        "id": "resp_abc",
        "object": "response",
        "status": "completed",
        "model": "up-model",
        "store": False,
        "created_at": 7,
    }
    assert response["instructions"] == "be brief"
    assert [item["type"] for item in response["output"]] == ["message", "function_call"]
    assert response["output"][0]["content"] == [{"type": "output_text", "text": "Hi", "annotations": []}]
    assert {key: response["output"][1][key] for key in ("call_id", "name", "arguments")} == {
        "call_id": "call_9",
        "name": "f",
        "arguments": '{"a":1}',
    }
    assert response["usage"] == {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 3},
        "output_tokens": 4,
        "output_tokens_details": {"reasoning_tokens": 1},
        "total_tokens": 14,
    }


def test_an_anthropic_answers_cache_writes_are_stated_and_counted_by_the_bookkeeping() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 4,
        "prompt_tokens_details": {"cached_tokens": 30, "cache_write_tokens": 50},
    }
    body = json.dumps({"choices": [{"message": {"content": "Hi"}, "finish_reason": "stop"}], "usage": usage}).encode()
    response = response_from_completion(body, echo_of({})) or b""
    assert json.loads(response)["usage"]["input_tokens_details"] == {"cached_tokens": 30, "cache_write_tokens": 50}
    assert find_usage(response) == (100, 4, 30, 50)


def test_a_completion_cut_by_its_token_limit_is_an_incomplete_response() -> None:
    response = json.loads(response_from_completion(_completion("Hi", finish="length"), echo_of({})) or b"")
    assert (response["status"], response["incomplete_details"]) == ("incomplete", {"reason": "max_output_tokens"})
    assert response["id"].startswith("resp_")


@pytest.mark.parametrize("body", [b"not json", b"[]", b'{"choices": []}', b'{"choices": [{"message": 3}]}'])
def test_a_body_that_is_not_a_completion_translates_to_none(body: bytes) -> None:
    assert response_from_completion(body, echo_of({})) is None


# -- streams -------------------------------------------------------------------------------------


def _sse(*chunks: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks) + b"data: [DONE]\n\n"


def _delta(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {"id": "c", "model": "up", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


_CHAT_STREAM = _sse(
    _delta({"role": "assistant", "content": ""}),
    _delta({"content": "Héllo "}),
    _delta({"content": "wörld"}),
    _delta(
        {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": ""}}]}
    ),
    _delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}),
    _delta({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
    _delta({}, "tool_calls"),
    {"id": "c", "model": "up", "choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": 5}},
)

_ANTHROPIC_STREAM = b"".join(
    b"event: " + kind.encode() + b"\ndata: " + json.dumps(data).encode() + b"\n\n"
    for kind, data in [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 8, "output_tokens": 1}},
            },
        ),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Héllo wörld"}},
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 1,
                "content_block": {"type": "tool_use", "id": "call_1", "name": "f", "input": {}},
            },
        ),
        (
            "content_block_delta",
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": '{"a":1}'},
            },
        ),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 5}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
)


def _events(stream: ResponsesStream, out: bytes) -> list[dict[str, Any]]:
    """The events ``out`` says, with the stream's random id and the clock's second made fixed."""
    out = out.replace(stream.response_id.removeprefix("resp_").encode(), b"X")
    events = []
    for block in out.split(b"\n\n"):
        if block:
            kind, data = block.split(b"\n", 1)
            event = json.loads(data.removeprefix(b"data: "))
            assert kind == b"event: " + event["type"].encode()
            if "response" in event:
                event["response"]["created_at"] = 0
            events.append(event)
    return events


def _feed(stream: ResponsesStream, pieces: list[bytes]) -> bytes:
    return b"".join(stream.feed(piece) for piece in pieces)


@pytest.mark.parametrize(("upstream", "anthropic"), [(_CHAT_STREAM, False), (_ANTHROPIC_STREAM, True)])
def test_a_stream_translates_to_the_same_events_however_it_is_cut(upstream: bytes, anthropic: bool) -> None:
    whole = ResponsesStream({}, anthropic)
    expected = _events(whole, _feed(whole, [upstream]))
    assert whole.finished and not whole.empty and whole.failure is None
    assert whole.usage[:2] == (8, 5)
    for at in range(1, len(upstream)):
        cut = ResponsesStream({}, anthropic)
        assert _events(cut, _feed(cut, [upstream[:at], upstream[at:]])) == expected, at
    one_by_one = ResponsesStream({}, anthropic)
    assert _events(one_by_one, _feed(one_by_one, [upstream[i : i + 1] for i in range(len(upstream))])) == expected


def test_a_streams_events_are_the_ones_the_sdks_helper_accumulates_in_order() -> None:
    stream = ResponsesStream({})
    events = _events(stream, stream.feed(_CHAT_STREAM))
    assert [event["type"] for event in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event["sequence_number"] for event in events] == list(range(len(events)))
    completed = events[-1]["response"]
    assert completed["output"][0]["content"][0]["text"] == "Héllo wörld"
    assert completed["output"][1]["arguments"] == '{"a":1}'
    assert completed["output"][1]["call_id"] == "call_1"
    assert completed["usage"]["total_tokens"] == 13
    assert completed["store"] is False


def test_nothing_shows_before_the_first_text_so_the_attempt_can_still_fail_over() -> None:
    stream = ResponsesStream({})
    opened = stream.feed(_sse(_delta({"role": "assistant", "content": ""}))[: -len(b"data: [DONE]\n\n")])
    assert opened.count(b"event: ") == 2 and not stream.ready
    stream.feed(b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n')
    assert stream.ready


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ({"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}, "rate_limit_error"),
        ({"message": "boom", "type": "server_error"}, "api_error"),
        ("a string", "api_error"),
    ],
)
def test_an_error_chunk_is_the_streams_failure_in_the_words_the_attempt_reads(error: object, kind: str) -> None:
    stream = ResponsesStream({})
    stream.feed(b"data: " + json.dumps({"error": error}).encode() + b"\n\n")
    assert stream.failure is not None and stream.failure[0] == kind
    assert stream.feed(_CHAT_STREAM) == b""  # nothing after a failure


def test_a_stream_that_ends_before_anything_shows_is_empty_and_one_cut_before_done_is_not_finished() -> None:
    empty = ResponsesStream({})
    empty.feed(b"data: [DONE]\n\n")
    assert empty.finished and empty.empty
    cut = ResponsesStream({})
    cut.feed(_CHAT_STREAM[: _CHAT_STREAM.index(b"data: [DONE]")])
    assert cut.ready and not cut.finished


def test_an_event_larger_than_the_limit_is_a_failure_not_a_translation() -> None:
    stream = ResponsesStream({}, max_event_bytes=64)
    stream.feed(b'data: {"choices":[{"index":0,"delta":{"content":"' + b"x" * 100)
    assert stream.failure is not None and "larger than 64 bytes" in stream.failure[1]


def test_a_chunk_that_is_not_a_json_object_is_a_failure() -> None:
    stream = ResponsesStream({})
    stream.feed(b"data: [1, 2]\n\n")
    assert stream.failure == ("api_error", "the upstream sent an event that is not a JSON object")
