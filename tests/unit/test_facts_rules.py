"""RequestFacts (what a request is) and [[rules]] (which group it goes to), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_router.config.rules_settings import RuleSettings
from asgi_router.routing.facts import IMAGE_TOKENS, MESSAGE_OVERHEAD_TOKENS, RequestFacts
from asgi_router.routing.rules import RuleTable, matches

_IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 100_000}}
_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def _facts(headers: dict[str, str] | None = None, **body: Any) -> RequestFacts:
    raw = [(name.encode(), value.encode()) for name, value in (headers or {}).items()]
    return RequestFacts(body, raw)


# --- facts --------------------------------------------------------------------------------------


def test_prompt_tokens_count_text_at_four_characters_plus_message_overhead() -> None:
    facts = _facts(messages=[{"role": "system", "content": "x" * 40}, {"role": "user", "content": "y" * 41}])
    assert facts.prompt_tokens == 2 * MESSAGE_OVERHEAD_TOKENS + 10 + 11


def test_images_count_a_fixed_cost_not_their_base64_size() -> None:
    facts = _facts(messages=[{"role": "user", "content": [{"type": "text", "text": "x" * 8}, _IMAGE, _IMAGE]}])
    assert facts.images is True
    assert facts.prompt_tokens == MESSAGE_OVERHEAD_TOKENS + 2 + 2 * IMAGE_TOKENS


def test_tools_and_tool_calls_count_towards_the_prompt() -> None:
    plain = _facts(messages=[{"role": "user", "content": "hi"}])
    with_tools = _facts(messages=[{"role": "user", "content": "hi"}], tools=_TOOLS)
    with_call = _facts(
        messages=[{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "a" * 400}}]}]
    )
    assert with_tools.prompt_tokens > plain.prompt_tokens
    assert with_call.prompt_tokens >= 100
    assert with_tools.tools and not plain.tools


@pytest.mark.parametrize(
    "body",
    [{}, {"messages": "nope"}, {"messages": [1, None, {"content": 3}, {"content": [1, {"type": 2}]}]}],
)
def test_malformed_bodies_estimate_without_raising(body: dict[str, Any]) -> None:
    facts = RequestFacts(body)
    assert facts.prompt_tokens >= 0
    assert facts.images is False


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, None),
        ({"max_tokens": 100}, 100),
        ({"max_completion_tokens": 50, "max_tokens": 100}, 50),
        ({"max_tokens": True}, None),
        ({"max_tokens": -1}, None),
        ({"max_tokens": "100"}, None),
    ],
)
def test_max_tokens_reads_either_spelling_and_ignores_junk(body: dict[str, Any], expected: int | None) -> None:
    assert RequestFacts(body).max_tokens == expected


def test_reasoning_stream_header_and_metadata_facts() -> None:
    facts = _facts({"x-router-tier": "gold"}, stream=True, reasoning_effort="high", metadata={"tag": "agent"})
    assert facts.reasoning and facts.stream
    assert facts.header(b"x-router-tier") == "gold"
    assert facts.metadata("tag") == "agent"
    assert facts.metadata("other") is None
    bare = _facts(stream="yes", metadata=["tag"])
    assert not bare.reasoning and not bare.stream
    assert bare.header(b"x-router-tier") is None and bare.metadata("tag") is None


# --- rules --------------------------------------------------------------------------------------

_RULES = [
    RuleSettings(name="premium", route="group/big", headers={"X-Router-Tier": "gold"}),
    RuleSettings(name="vision", route="group/vision", images=True),
    RuleSettings(name="long", route="group/long", min_prompt_tokens=1000),
    RuleSettings(name="agent", route="group/tools", tools=True, metadata={"tag": "agent"}),
    RuleSettings(name="think", route="group/reason", reasoning=True, stream=False),
    RuleSettings(name="short", route="group/small", max_prompt_tokens=20),
]

_HI = [{"role": "user", "content": "hi"}]
_MID = [{"role": "user", "content": "x" * 400}]


@pytest.mark.parametrize(
    ("facts", "rule"),
    [
        (_facts({"x-router-tier": "gold"}, messages=_HI), "premium"),
        (_facts({"x-router-tier": "silver"}, messages=_HI), "short"),
        (_facts(messages=[{"role": "user", "content": [_IMAGE]}]), "vision"),
        (_facts(messages=[{"role": "user", "content": "x" * 4000}]), "long"),
        (_facts(messages=_MID, tools=_TOOLS, metadata={"tag": "agent"}), "agent"),
        (_facts(messages=_MID, tools=_TOOLS), None),
        (_facts(messages=_MID, reasoning_effort="low"), "think"),
        (_facts(messages=_MID, reasoning_effort="low", stream=True), None),
        (_facts(messages=_MID), None),
        (_facts(messages=_HI), "short"),
    ],
)
def test_first_matching_rule_picks_the_route(facts: RequestFacts, rule: str | None) -> None:
    picked = RuleTable(_RULES, ["auto"]).pick("auto", facts)
    assert (picked.name if picked else None) == rule


def test_min_prompt_tokens_is_inclusive_and_max_prompt_tokens_exclusive() -> None:
    at_least = RuleSettings(name="r", route="group/x", min_prompt_tokens=10)
    below = RuleSettings(name="s", route="group/x", max_prompt_tokens=10)
    ten = _facts(messages=[{"role": "user", "content": "x" * 24}])  # 4 overhead + 6 = 10 tokens
    assert ten.prompt_tokens == 10
    assert matches(at_least, ten) and not matches(below, ten)


def test_rule_without_conditions_always_matches() -> None:
    assert matches(RuleSettings(name="any", route="group/x"), RequestFacts({}))


def test_rules_apply_only_to_their_groups() -> None:
    table = RuleTable(
        [RuleSettings(name="only-b", route="group/x", applies_to=["b"]), RuleSettings(name="all", route="group/y")],
        ["a", "b"],
    )
    assert table.pick("a", RequestFacts({})).name == "all"  # type: ignore[union-attr]
    assert table.pick("b", RequestFacts({})).name == "only-b"  # type: ignore[union-attr]
    assert table.pick("not-a-rules-group", RequestFacts({})) is None


def test_the_token_estimate_is_only_made_when_cheaper_checks_pass() -> None:
    rule = RuleSettings(name="r", route="group/x", stream=True, min_prompt_tokens=1)
    facts = _facts(messages=_MID)
    assert not matches(rule, facts)
    assert facts._estimate is None


@pytest.mark.parametrize("name", ["default", "has space", "", "a/b"])
def test_rule_names_must_be_header_safe_and_not_default(name: str) -> None:
    with pytest.raises(ValueError, match="rule name"):
        RuleSettings(name=name, route="group/x")
