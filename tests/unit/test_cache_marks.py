"""Prompt cache marks and counts, case by case: finding and stripping Anthropic's ``cache_control``
marks, the breakpoints added to a translated request, the cache's share of a usage object, and
its price."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from asgi_router.attempts.usage import find_usage
from asgi_router.config.catalog_settings import ModelInfo
from asgi_router.protocols.cache_marks import (
    MIN_CACHED_TOKENS,
    add_breakpoints,
    has_marks,
    may_carry_marks,
    without_marks,
)
from asgi_router.protocols.to_anthropic import Untranslatable, to_messages_request
from asgi_router.routing.catalog import Catalog

_MARK = {"type": "ephemeral"}


def _body(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


def test_a_body_whose_text_mentions_cache_control_carries_no_mark() -> None:
    quoted = {"messages": [{"role": "user", "content": 'what does "cache_control" do?'}]}
    assert not may_carry_marks(_body(quoted))  # the quotes inside a string are escaped
    named = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": _MARK}]}]}
    assert may_carry_marks(_body(named)) and has_marks(named)


def test_a_member_named_cache_control_elsewhere_is_not_a_mark_to_strip() -> None:
    schema = {"type": "object", "properties": {"cache_control": {"type": "string"}}}
    payload = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
    }
    assert may_carry_marks(_body(payload))  # the cheap search says maybe
    assert without_marks(payload) is None  # the walk says no: the body goes as it came


def test_stripping_takes_marks_off_parts_messages_and_tools_and_leaves_the_clients_payload_alone() -> None:
    payload: dict[str, Any] = {
        "model": "m",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "s", "cache_control": _MARK}]},
            {"role": "user", "content": "hi", "cache_control": _MARK},
            {"role": "assistant", "content": "plain"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "f", "cache_control": _MARK}},
            {"type": "function", "function": {"name": "g"}, "cache_control": _MARK},
        ],
        "temperature": 0.5,
    }
    before = copy.deepcopy(payload)
    stripped = without_marks(payload)
    assert stripped == {
        "model": "m",
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "s"}]},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "plain"},
        ],
        "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}],
        "temperature": 0.5,
    }
    assert payload == before
    assert stripped is not None and stripped["messages"][2] is payload["messages"][2]  # unmarked: not copied


def test_translation_keeps_marks_on_system_user_assistant_tool_result_and_tool_blocks() -> None:
    payload = {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "s", "cache_control": _MARK}]},
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "https://x/i.png"}, "cache_control": _MARK}],
            },
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "a", "cache_control": _MARK}],
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "r", "cache_control": _MARK}]},
        ],
        "tools": [{"type": "function", "function": {"name": "f"}, "cache_control": _MARK}],
    }
    out = to_messages_request(payload, 64)
    assert not isinstance(out, Untranslatable)
    assert out["system"] == [{"type": "text", "text": "s", "cache_control": _MARK}]
    user, assistant, tool = out["messages"]
    assert user["content"][0]["cache_control"] == _MARK
    assert assistant["content"][0] == {"type": "text", "text": "a", "cache_control": _MARK}
    assert tool["content"][0]["content"] == [{"type": "text", "text": "r", "cache_control": _MARK}]
    assert out["tools"][0]["cache_control"] == _MARK


def test_a_mark_that_is_not_an_object_is_untranslatable() -> None:
    payload = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": "yes"}]}]}
    assert isinstance(to_messages_request(payload, 64), Untranslatable)


@pytest.mark.parametrize(
    ("system_chars", "tool_chars", "expected"),
    [
        (4 * MIN_CACHED_TOKENS, 0, (True, False)),
        (4 * MIN_CACHED_TOKENS - 1, 4 * MIN_CACHED_TOKENS, (False, True)),
        (10, 10, (False, False)),
    ],
)
def test_breakpoints_go_on_a_long_system_prompt_and_long_tools_only(
    system_chars: int, tool_chars: int, expected: tuple[bool, bool]
) -> None:
    request: dict[str, Any] = {
        "system": [{"type": "text", "text": "x" * system_chars}],
        "tools": [{"name": "t", "description": "d" * tool_chars, "input_schema": {}}],
        "messages": [],
    }
    add_breakpoints(request, 4)
    assert ("cache_control" in request["system"][-1], "cache_control" in request["tools"][-1]) == expected


def test_no_breakpoint_is_added_past_anthropics_four() -> None:
    request: dict[str, Any] = {
        "system": [{"type": "text", "text": "x" * 5000}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "m", "cache_control": _MARK}] * 4}],
    }
    add_breakpoints(request, 4)
    assert "cache_control" not in request["system"][0]


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"prompt_tokens": 20, "completion_tokens": 3, "total_tokens": 23}, (20, 3, 0, 0)),
        (
            {
                "prompt_tokens": 20,
                "completion_tokens": 3,
                "total_tokens": 23,
                "prompt_tokens_details": {"cached_tokens": 16},
            },
            (20, 3, 16, 0),
        ),
        (
            {
                "prompt_tokens": 20,
                "completion_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 9, "cache_write_tokens": 4},
            },
            (20, 3, 9, 4),
        ),
        ({"prompt_tokens": 20, "completion_tokens": 3, "prompt_tokens_details": None}, (20, 3, 0, 0)),
        ({"prompt_tokens": 20, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 99}}, (20, 3, 20, 0)),
        ({"completion_tokens": 3, "prompt_tokens": 20, "prompt_tokens_details": {"cached_tokens": 5}}, (20, 3, 5, 0)),
        (
            {"input_tokens": 1, "cache_read_input_tokens": 30, "cache_creation_input_tokens": 7, "output_tokens": 2},
            (38, 2, 30, 7),
        ),
    ],
    ids=["none", "openai-read", "written", "null-details", "read-capped-at-prompt", "other-key-order", "anthropic"],
)
@pytest.mark.parametrize("compact", [True, False], ids=["compact", "spaced"])
def test_usage_states_the_caches_share_of_the_prompt(
    usage: dict[str, Any], expected: tuple[int, int, int, int], compact: bool
) -> None:
    separators = (",", ":") if compact else (", ", ": ")
    body = json.dumps({"id": "x", "choices": [], "usage": usage}, separators=separators).encode()
    assert find_usage(body) == expected


def test_cached_and_written_tokens_are_priced_at_their_rates_unset_ones_at_the_input_price() -> None:
    catalog = Catalog(
        {
            "a/m": ModelInfo(input_price=2, cached_input_price=0.5, cache_write_price=2.5, output_price=10),
            "b/m": ModelInfo(input_price=2, output_price=10),
        }
    )
    assert catalog.cost("a/m", 2000, 10, 1500, 400) == pytest.approx((100 * 2 + 1500 * 0.5 + 400 * 2.5 + 100) / 1e6)
    assert catalog.cost("a/m", 2000, 10) == pytest.approx((2000 * 2 + 100) / 1e6)
    assert catalog.cost("b/m", 2000, 10, 1500, 400) == catalog.cost("b/m", 2000, 10)
