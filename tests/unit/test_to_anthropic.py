"""A chat-completion request as a Messages API request: each field translated, accepted at its
default only, ignored, or refused with a reason that names it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from asgi_router.protocols.to_anthropic import (
    AT_DEFAULT_ONLY,
    IGNORED,
    TRANSLATED,
    Untranslatable,
    include_usage,
    to_messages_request,
)

_HI = [{"role": "user", "content": "hi"}]


def _translate(**fields: Any) -> dict[str, Any]:
    translated = to_messages_request({"model": "gpt-4o", "messages": _HI, **fields}, 4096)
    assert not isinstance(translated, Untranslatable), translated
    return translated


def _refusal(**fields: Any) -> str:
    translated = to_messages_request({"model": "gpt-4o", "messages": _HI, **fields}, 4096)
    assert isinstance(translated, Untranslatable)
    return translated.detail


def test_a_plain_request_gets_the_default_max_tokens_and_no_model() -> None:
    assert to_messages_request({"model": "gpt-4o", "messages": _HI}, 123) == {"messages": _HI, "max_tokens": 123}


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"max_tokens": 50}, {"max_tokens": 50}),
        ({"max_completion_tokens": 60}, {"max_tokens": 60}),
        ({"max_completion_tokens": 60, "max_tokens": 50}, {"max_tokens": 60}),  # the newer name wins
        ({"max_tokens": 50, "max_completion_tokens": 60}, {"max_tokens": 60}),
        ({"stream": True}, {"stream": True}),
        ({"temperature": 0.7, "top_p": 0.9, "top_k": 40}, {"temperature": 0.7, "top_p": 0.9, "top_k": 40}),
        ({"stop": "END"}, {"stop_sequences": ["END"]}),
        ({"stop": ["a", "b"]}, {"stop_sequences": ["a", "b"]}),
        ({"user": "u-1"}, {"metadata": {"user_id": "u-1"}}),
        ({"response_format": {"type": "text"}}, {}),
    ],
)
def test_translated_fields_carry_their_meaning(fields: dict[str, Any], expected: dict[str, Any]) -> None:
    translated = _translate(**fields)
    assert {key: value for key, value in translated.items() if key in expected} == expected
    assert set(translated) - set(expected) <= {"messages", "max_tokens"}


@pytest.mark.parametrize(
    "fields",
    [
        {"stream": False},
        {"n": 1},
        {"presence_penalty": 0},
        {"frequency_penalty": 0.0},
        {"logprobs": False},
        {"store": True},
        {"metadata": {"team": "x"}},
        {"seed": 7},
        {"service_tier": "auto"},
        {"stream_options": {"include_usage": True}},
        {"temperature": None, "tools": None},
    ],
)
def test_defaults_and_openai_bookkeeping_are_dropped(fields: dict[str, Any]) -> None:
    assert _translate(**fields) == {"messages": _HI, "max_tokens": 4096}


@pytest.mark.parametrize(
    ("fields", "detail"),
    [
        ({"n": 2}, "n 2 has no equivalent in Anthropic's Messages API"),
        ({"n": True}, "n true has no equivalent in Anthropic's Messages API"),
        ({"logprobs": True}, "logprobs true has no equivalent in Anthropic's Messages API"),
        ({"presence_penalty": 0.5}, "presence_penalty 0.5 has no equivalent in Anthropic's Messages API"),
        ({"logit_bias": {"50256": -100}}, "logit_bias has no equivalent in Anthropic's Messages API"),
        ({"top_logprobs": 3}, "top_logprobs 3 has no equivalent in Anthropic's Messages API"),
        ({"reasoning_effort": "high"}, 'reasoning_effort "high" has no equivalent in Anthropic\'s Messages API'),
        ({"response_format": {"type": "json_object"}}, "response_format has no equivalent in Anthropic's Messages API"),
        ({"modalities": ["text", "audio"]}, "modalities has no equivalent in Anthropic's Messages API"),
        ({"temperature": 1.5}, "temperature 1.5 is outside Anthropic's range (0 to 1)"),
        ({"max_tokens": 0}, "max_tokens must be a positive integer"),
        ({"stop": [1]}, "stop must be a string or a list of strings"),
        ({"tool_choice": {"type": "allowed_tools"}}, "tool_choice has no equivalent in Anthropic's Messages API"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools: only function tools with a name translate"),
        ({"we ird\n": 1}, "a field 1 has no equivalent in Anthropic's Messages API"),
    ],
)
def test_untranslatable_fields_are_refused_by_name(fields: dict[str, Any], detail: str) -> None:
    assert _refusal(**fields) == detail


def test_a_refusal_never_repeats_a_long_or_odd_client_value() -> None:
    assert (
        _refusal(reasoning_effort="sk-" + "x" * 60) == "reasoning_effort has no equivalent in Anthropic's Messages API"
    )


def test_the_three_field_tables_are_disjoint() -> None:
    assert not (set(TRANSLATED) & set(AT_DEFAULT_ONLY) or set(TRANSLATED) & IGNORED or set(AT_DEFAULT_ONLY) & IGNORED)


def test_system_and_developer_messages_become_system_blocks_in_order() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "developer", "content": [{"type": "text", "text": "Use French."}, {"type": "text", "text": ""}]},
        {"role": "assistant", "content": "Bonjour."},
    ]
    translated = to_messages_request({"messages": messages}, 10)
    assert translated == {
        "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Use French."}],
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Bonjour."}],
        "max_tokens": 10,
    }


def test_tool_calls_and_parallel_results_translate_to_tool_use_and_one_turn_of_results() -> None:
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": ""}},
    ]
    messages = [
        {"role": "user", "content": "Weather and time in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
        {"role": "user", "content": "Thanks"},
    ]
    translated = to_messages_request({"messages": messages}, 10)
    assert not isinstance(translated, Untranslatable)
    assert translated["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_2", "name": "get_time", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "noon"}]},
            ],
        },
        {"role": "user", "content": "Thanks"},
    ]


def test_tools_and_tool_choice_translate() -> None:
    tool = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}
    translated = _translate(tools=[tool], tool_choice={"type": "function", "function": {"name": "f"}})
    assert translated["tools"] == [{"name": "f", "description": "d", "input_schema": {"type": "object"}}]
    assert translated["tool_choice"] == {"type": "tool", "name": "f"}
    for choice, expected in (("auto", "auto"), ("required", "any"), ("none", "none")):
        assert _translate(tools=[tool], tool_choice=choice)["tool_choice"] == {"type": expected}
    sequential = _translate(tools=[tool], parallel_tool_calls=False)
    assert sequential["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert "tool_choice" not in _translate(tool_choice="auto")  # no tools to choose from


def test_a_strict_function_schema_is_refused() -> None:
    tool = {"type": "function", "function": {"name": "f", "parameters": {}, "strict": True}}
    assert _refusal(tools=[tool]) == "tools: strict function schemas have no equivalent in Anthropic's Messages API"


def test_image_parts_become_base64_or_url_sources() -> None:
    parts = [
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ", "detail": "high"}},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
    ]
    translated = to_messages_request({"messages": [{"role": "user", "content": parts}]}, 10)
    assert not isinstance(translated, Untranslatable)
    assert translated["messages"][0]["content"] == [
        {"type": "text", "text": "Compare"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
    ]


@pytest.mark.parametrize(
    ("message", "detail"),
    [
        (
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
            'messages[0]: a content part of type "input_audio" has no equivalent in Anthropic\'s Messages API',
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AA"}}]},
            "messages[0]: an image must be an http(s) URL or a base64 data URL of a JPEG, PNG, GIF or WebP image",
        ),
        (
            {"role": "function", "name": "f", "content": "x"},
            'messages[0]: role "function" has no equivalent in Anthropic\'s Messages API',
        ),
        (
            {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}]},
            "messages[0]: a tool call's arguments must be a JSON object",
        ),
        ({"role": "tool", "content": "x"}, "messages[0]: a tool message needs a tool_call_id and text content"),
        (
            {"role": "system", "content": [{"type": "image_url"}]},
            "messages[0]: a system message's content must be text",
        ),
    ],
)
def test_messages_without_an_equivalent_are_refused_by_position(message: dict[str, Any], detail: str) -> None:
    assert to_messages_request({"messages": [message]}, 10) == Untranslatable(detail)


def test_a_request_without_messages_is_refused() -> None:
    assert to_messages_request({"model": "x"}, 10) == Untranslatable("messages is required")


@pytest.mark.parametrize(
    ("payload", "wanted"),
    [
        ({"stream_options": {"include_usage": True}}, True),
        ({"stream_options": {"include_usage": False}}, False),
        ({"stream_options": None}, False),
        ({}, False),
    ],
)
def test_include_usage_reads_stream_options(payload: dict[str, Any], wanted: bool) -> None:
    assert include_usage(payload) is wanted


def _request_tables() -> list[list[list[str]]]:
    """The tables of the Protocols page's "The request" section: rows of cells."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "protocols.md").read_text(encoding="utf-8")
    section = page.split("### The request", 1)[1].split("\n### ", 1)[0]
    tables: list[list[list[str]]] = []
    for block in re.split(r"\n(?!\|)", section):
        rows = [line for line in block.splitlines() if line.startswith("|")]
        if rows:
            tables.append([[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]])
    return [table for table in tables if table]


def _names(cell: str) -> set[str]:
    """The field names a cell quotes (JSON literals, the values it quotes, left out)."""
    return set(re.findall(r"`([a-z_]+)`", cell)) - {"true", "false", "null"}


def test_the_protocols_page_lists_exactly_the_fields_the_code_translates_accepts_and_ignores() -> None:
    translated, (defaults_and_ignored,), _roles = _request_tables()
    assert set().union(*(_names(row[0]) for row in translated)) == set(TRANSLATED)
    assert _names(defaults_and_ignored[0]) == set(AT_DEFAULT_ONLY)
    assert _names(defaults_and_ignored[1]) == IGNORED
