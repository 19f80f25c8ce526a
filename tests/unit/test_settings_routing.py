"""Routing configuration: member tables, nesting, catalog, rules, hedging and degraded replies."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from asgi_router.config.config_error import describe_refusal
from asgi_router.config.group_settings import MemberSettings
from asgi_router.config.settings import RouterSettings

_PROVIDERS: dict[str, Any] = {
    "openai": {"base_url": "https://api.openai.com/v1"},
    "local": {"base_url": "http://127.0.0.1:11434/v1"},
}


@pytest.fixture(autouse=True)
def _clean_router_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ASGI_ROUTER_"):
            monkeypatch.delenv(name)


def _error_text(**kwargs: Any) -> str:
    """The refusal as an operator reads it (``ConfigError``'s text: keys as ``a.b[0]``)."""
    with pytest.raises(ValidationError) as info:
        RouterSettings(allow_unauthenticated=True, providers=_PROVIDERS, **kwargs)
    return describe_refusal(info.value, RouterSettings, None, kwargs)


_TOML = """
latency_half_life = 30

[providers.openai]
base_url = "https://api.openai.com/v1"

[providers.local]
base_url = "http://127.0.0.1:11434/v1"

[catalog."openai/gpt-4o-mini"]
context_window = 128000
max_output_tokens = 16384
input_price = 0.15
output_price = 0.60

[groups.mix]
strategy = "weighted"
members = [{ref = "openai/gpt-4o-mini", weight = 3}, "local/qwen2.5"]

[groups.budget]
strategy = "usage"
members = [{ref = "openai/gpt-4o-mini", rpm = 500, tpm = 200000}, "local/qwen2.5"]
hedge_after = 0.8
degraded = {content = "We are busy; try again shortly."}

[groups.auto]
rules = true
members = ["group/mix"]

[[rules]]
name = "long"
min_prompt_tokens = 20000
route = "group/budget"

[[rules]]
name = "gold"
headers = {x-router-tier = "gold"}
route = "openai/gpt-4o-mini"
"""


def test_toml_with_member_tables_catalog_rules_hedging_and_degraded_loads(tmp_path: Path) -> None:
    path = tmp_path / "router.toml"
    path.write_text(textwrap.dedent(_TOML), encoding="utf-8")
    settings = RouterSettings.from_toml(path, allow_unauthenticated=True)
    assert settings.latency_half_life == 30
    assert settings.catalog["openai/gpt-4o-mini"].context_window == 128000
    assert settings.flat_member_settings("mix") == (
        MemberSettings(ref="openai/gpt-4o-mini", weight=3),
        MemberSettings(ref="local/qwen2.5"),
    )
    budget = settings.groups["budget"]
    assert (budget.hedge_after, budget.hedge_budget) == (0.8, 0.1)
    assert budget.degraded is not None and budget.degraded.content.startswith("We are busy")
    assert settings.flat_member_settings("budget")[0].tpm == 200000
    assert [rule.name for rule in settings.rules] == ["long", "gold"]
    assert settings.rules[1].headers == {"x-router-tier": "gold"}
    assert settings.flat_members("auto") == ("openai/gpt-4o-mini", "local/qwen2.5")


def test_plain_string_members_stay_strings_and_read_as_weight_one() -> None:
    settings = RouterSettings(
        allow_unauthenticated=True, providers=_PROVIDERS, groups={"g": {"members": ["openai/a", {"ref": "local/b"}]}}
    )
    assert settings.groups["g"].members[0] == "openai/a"
    assert settings.flat_member_settings("g") == (MemberSettings(ref="openai/a"), MemberSettings(ref="local/b"))


def test_flattening_keeps_the_first_occurrence_with_its_own_weight_and_limits() -> None:
    settings = RouterSettings(
        allow_unauthenticated=True,
        providers=_PROVIDERS,
        groups={
            "outer": {"members": [{"ref": "openai/a", "weight": 5, "rpm": 7}, {"ref": "group/inner", "weight": 2}]},
            "inner": {"members": ["openai/a", {"ref": "local/b", "weight": 1.5, "tpm": 99}]},
        },
    )
    assert settings.flat_member_settings("outer") == (
        MemberSettings(ref="openai/a", weight=5, rpm=7),
        MemberSettings(ref="local/b", weight=3, tpm=99),
    )


@pytest.mark.parametrize(
    ("groups", "chain"),
    [
        ({"a": {"members": ["group/b"]}, "b": {"members": ["group/a"]}}, "group/a -> group/b -> group/a"),
        (
            {"a": {"members": ["openai/x", "group/b"]}, "b": {"members": ["group/c"]}, "c": {"members": ["group/b"]}},
            "group/a -> group/b -> group/c -> group/b",
        ),
        ({"a": {"members": [{"ref": "group/a", "weight": 2}]}}, "group/a -> group/a"),
    ],
)
def test_nesting_cycles_are_refused_with_the_cycle_spelled_out(groups: dict[str, Any], chain: str) -> None:
    text = _error_text(groups=groups)
    assert f"groups.a: nesting cycle {chain}" in text


def test_rate_limits_on_a_group_member_are_refused() -> None:
    text = _error_text(groups={"g": {"members": [{"ref": "group/h", "rpm": 3}]}, "h": {"members": ["openai/a"]}})
    assert "groups.g.members[0]" in text and "rpm/tpm" in text


@pytest.mark.parametrize(
    ("member", "key"),
    [({"ref": "openai/a", "weight": 0}, "weight"), ({"ref": "openai/a", "rpm": 0}, "rpm"), ({"reff": "x"}, "reff")],
)
def test_bad_member_tables_are_refused_naming_the_field(member: dict[str, Any], key: str) -> None:
    assert key in _error_text(groups={"g": {"members": [member]}})


@pytest.mark.parametrize(
    ("catalog", "message"),
    [
        ({"nope/m": {}}, "catalog.nope/m: names unknown provider"),
        ({"group/g": {}}, "keys are 'provider/model-id'"),
        ({"bare": {}}, "keys are 'provider/model-id'"),
        ({"openai/m": {"context_window": 0}}, "context_window"),
        ({"openai/m": {"input_price": -1}}, "input_price"),
        ({"openai/m": {"window": 1}}, "window"),
    ],
)
def test_bad_catalog_entries_are_refused_naming_the_key(catalog: dict[str, Any], message: str) -> None:
    assert message in _error_text(catalog=catalog)


_RULES_GROUPS: dict[str, Any] = {"auto": {"rules": True, "members": ["openai/a"]}, "big": {"members": ["openai/b"]}}


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ([{"name": "r", "route": "group/missing"}], "rules[0].route"),
        ([{"name": "r", "route": "nope/m"}], "rules[0].route"),
        ([{"name": "r", "route": "bare"}], "rules[0].route"),
        ([{"name": "r", "route": "group/auto"}], "rules apply once per request"),
        ([{"name": "r", "route": "group/big"}, {"name": "r", "route": "openai/c"}], "used twice"),
        ([{"name": "r", "route": "group/big", "applies_to": ["big"]}], "rules[0].applies_to"),
        ([{"name": "r", "route": "group/big", "imagez": True}], "imagez"),
        ([{"name": "default", "route": "group/big"}], "rule name"),
    ],
)
def test_bad_rules_are_refused_naming_the_rule(rules: list[dict[str, Any]], message: str) -> None:
    assert message in _error_text(groups=_RULES_GROUPS, rules=rules)


@pytest.mark.parametrize(
    ("group", "key"),
    [
        ({"hedge_after": 0}, "hedge_after"),
        ({"hedge_budget": 1.5}, "hedge_budget"),
        ({"explore": -0.1}, "explore"),
        ({"degraded": {"content": ""}}, "degraded.content"),
        ({"strategy": "fastest"}, "strategy"),
    ],
)
def test_bad_group_options_are_refused_naming_the_key(group: dict[str, Any], key: str) -> None:
    assert key in _error_text(groups={"g": {"members": ["openai/a"], **group}})


def test_models_route_can_be_turned_off_but_not_misspelled() -> None:
    assert RouterSettings(allow_unauthenticated=True, models_route=None).models_route is None
    assert (
        RouterSettings(allow_unauthenticated=True, models_route="").models_route is None
    )  # how TOML and env say "off"
    with pytest.raises(ValidationError, match="models_route"):
        RouterSettings(allow_unauthenticated=True, models_route="v1/models")


def test_catalog_and_rules_can_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS", '{"openai": {"base_url": "https://api.openai.com/v1"}}')
    monkeypatch.setenv("ASGI_ROUTER_CATALOG", '{"openai/gpt-4o": {"context_window": 128000}}')
    monkeypatch.setenv("ASGI_ROUTER_GROUPS", '{"auto": {"rules": true, "members": ["openai/gpt-4o"]}}')
    monkeypatch.setenv("ASGI_ROUTER_RULES", '[{"name": "img", "images": true, "route": "openai/gpt-4o"}]')
    settings = RouterSettings(allow_unauthenticated=True)
    assert settings.catalog["openai/gpt-4o"].context_window == 128000
    assert settings.rules[0].images is True


def test_retries_on_a_hedging_group_is_refused_not_silently_ignored() -> None:
    from pydantic import ValidationError

    from asgi_router import GroupSettings

    with pytest.raises(ValidationError) as caught:
        GroupSettings(members=["a/m", "b/m"], hedge_after=0.5, retries=2)
    assert "hedge_after" in str(caught.value)
    assert GroupSettings(members=["a/m", "b/m"], hedge_after=0.5, retries=0).retries == 0


def test_a_token_counting_route_is_refused_as_unsupported() -> None:
    text = _error_text(routes=["/v1/messages", "/v1/messages/count_tokens"])
    assert "route '/v1/messages/count_tokens': Anthropic's token counting is not supported" in text
