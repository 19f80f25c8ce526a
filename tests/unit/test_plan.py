"""Resolver: from a ref to an ordered Plan of candidates."""

from __future__ import annotations

import os
from typing import Any

import pytest

from asgi_router.config.settings import RouterSettings
from asgi_router.core.candidate import Candidate
from asgi_router.core.refs import ModelRef, RefKind
from asgi_router.routing.plan import Plan, ResolveError, Resolver

_PROVIDERS: dict[str, Any] = {
    "openai": {"base_url": "https://api.openai.com/v1"},
    "local": {"base_url": "http://127.0.0.1:11434/v1"},
    "openrouter": {"base_url": "https://openrouter.ai/api/v1"},
}


@pytest.fixture(autouse=True)
def _clean_router_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ASGI_ROUTER_"):
            monkeypatch.delenv(name)


def _resolver(**kwargs: Any) -> Resolver:
    return Resolver(RouterSettings(allow_unauthenticated=True, providers=_PROVIDERS, **kwargs))


def _plan(result: Plan | ResolveError) -> Plan:
    assert isinstance(result, Plan), result
    return result


def _names(result: Plan | ResolveError) -> list[str]:
    return [str(candidate) for candidate in _plan(result).candidates]


def _error(result: Plan | ResolveError) -> ResolveError:
    assert isinstance(result, ResolveError), result
    return result


def test_direct_ref_resolves_to_a_plan_of_one_candidate() -> None:
    plan = _plan(_resolver().resolve_string("openai/gpt-4o"))
    assert plan.candidates == (Candidate("openai", "gpt-4o"),)


def test_direct_ref_keeps_a_multi_segment_model_id_whole() -> None:
    plan = _plan(_resolver().resolve_string("openrouter/deepseek/deepseek-chat"))
    assert plan.candidates == (Candidate("openrouter", "deepseek/deepseek-chat"),)


def test_resolve_accepts_a_parsed_model_ref() -> None:
    plan = _plan(_resolver().resolve(ModelRef(RefKind.DIRECT, "local", "qwen2.5-coder")))
    assert plan.candidates == (Candidate("local", "qwen2.5-coder"),)


def test_order_group_lists_members_as_configured_on_every_request() -> None:
    resolver = _resolver(groups={"coder": {"strategy": "order", "members": ["openai/a", "local/b", "openrouter/c/d"]}})
    for _ in range(3):
        assert _names(resolver.resolve_string("group/coder")) == ["openai/a", "local/b", "openrouter/c/d"]


def test_order_group_candidate_splits_provider_from_multi_segment_id() -> None:
    resolver = _resolver(groups={"g": {"members": ["openrouter/deepseek/deepseek-chat"]}})
    assert _plan(resolver.resolve_string("group/g")).candidates == (Candidate("openrouter", "deepseek/deepseek-chat"),)


def test_rotate_group_starts_each_request_at_the_next_member_and_wraps() -> None:
    resolver = _resolver(groups={"r": {"strategy": "rotate", "members": ["openai/a", "local/b", "openrouter/c"]}})
    assert _names(resolver.resolve_string("group/r")) == ["openai/a", "local/b", "openrouter/c"]
    assert _names(resolver.resolve_string("group/r")) == ["local/b", "openrouter/c", "openai/a"]
    assert _names(resolver.resolve_string("group/r")) == ["openrouter/c", "openai/a", "local/b"]
    assert _names(resolver.resolve_string("group/r")) == ["openai/a", "local/b", "openrouter/c"]


def test_rotate_groups_keep_independent_counters() -> None:
    resolver = _resolver(
        groups={
            "x": {"strategy": "rotate", "members": ["openai/a", "local/b"]},
            "y": {"strategy": "rotate", "members": ["openai/p", "local/q", "openrouter/r"]},
        }
    )
    assert _names(resolver.resolve_string("group/x"))[0] == "openai/a"
    assert _names(resolver.resolve_string("group/x"))[0] == "local/b"
    # y has not been asked yet: it starts at its own first member, not where x left off.
    assert _names(resolver.resolve_string("group/y"))[0] == "openai/p"
    assert _names(resolver.resolve_string("group/x"))[0] == "openai/a"
    assert _names(resolver.resolve_string("group/y"))[0] == "local/q"


def test_rotate_counter_advances_once_per_request_not_per_candidate() -> None:
    resolver = _resolver(groups={"r": {"strategy": "rotate", "members": ["openai/a", "local/b", "openrouter/c"]}})
    starts = [_names(resolver.resolve_string("group/r"))[0] for _ in range(6)]
    assert starts == ["openai/a", "local/b", "openrouter/c"] * 2


def test_rotate_counters_are_per_resolver_instance() -> None:
    settings = RouterSettings(
        allow_unauthenticated=True,
        providers=_PROVIDERS,
        groups={"r": {"strategy": "rotate", "members": ["openai/a", "local/b"]}},
    )
    first, second = Resolver(settings), Resolver(settings)
    assert _names(first.resolve_string("group/r"))[0] == "openai/a"
    assert _names(second.resolve_string("group/r"))[0] == "openai/a"


def test_rotation_reached_through_an_alias_shares_the_group_counter() -> None:
    resolver = _resolver(
        groups={"r": {"strategy": "rotate", "members": ["openai/a", "local/b"]}}, aliases={"fast": "group/r"}
    )
    assert _names(resolver.resolve_string("group/r"))[0] == "openai/a"
    assert _names(resolver.resolve_string("fast"))[0] == "local/b"


def test_nested_group_is_flattened_into_the_outer_plan() -> None:
    resolver = _resolver(
        groups={
            "outer": {"members": ["openai/a", "group/inner", "openrouter/z"]},
            "inner": {"members": ["local/b", "openai/a", "local/c"]},
        }
    )
    assert _names(resolver.resolve_string("group/outer")) == ["openai/a", "local/b", "local/c", "openrouter/z"]


def test_alias_resolves_to_its_direct_target() -> None:
    resolver = _resolver(aliases={"gpt-4o": "openai/gpt-4o-2024-08-06"})
    assert _plan(resolver.resolve_string("gpt-4o")).candidates == (Candidate("openai", "gpt-4o-2024-08-06"),)


def test_alias_resolves_to_its_group_target() -> None:
    resolver = _resolver(groups={"coder": {"members": ["openai/a", "local/b"]}}, aliases={"fast": "group/coder"})
    assert _names(resolver.resolve_string("fast")) == ["openai/a", "local/b"]


def test_unknown_alias_is_a_400_invalid_model_reference_naming_both_spellings() -> None:
    error = _error(_resolver().resolve_string("gpt-4o"))
    assert error.status == 400
    assert error.code == "invalid_model_reference"
    assert "gpt-4o" in error.message
    assert "provider/model-id" in error.message and "group/" in error.message


def test_unknown_group_is_a_404_model_not_found() -> None:
    error = _error(_resolver().resolve_string("group/missing"))
    assert (error.status, error.code) == (404, "model_not_found")
    assert "group/missing" in error.message


def test_unknown_provider_is_a_404_model_not_found() -> None:
    error = _error(_resolver().resolve_string("anthropic/claude-3"))
    assert (error.status, error.code) == (404, "model_not_found")
    assert "anthropic" in error.message


def test_unknown_provider_in_a_parsed_ref_is_a_404_not_a_key_error() -> None:
    error = _error(_resolver().resolve(ModelRef(RefKind.DIRECT, "nope", "m")))
    assert error.status == 404


@pytest.mark.parametrize("value", ["", "openai/", "/gpt", "group/", "gpt 4o", "a\r\nb", None, 42, ["openai/gpt-4o"]])
def test_resolve_string_on_malformed_model_is_a_400_invalid_model_reference(value: object) -> None:
    error = _error(_resolver().resolve_string(value))
    assert (error.status, error.code) == (400, "invalid_model_reference")
    assert error.message


def test_group_failover_on_is_carried_into_the_plan() -> None:
    resolver = _resolver(groups={"g": {"members": ["openai/a", "local/b"], "failover_on": ["timeout", "client_error"]}})
    assert _plan(resolver.resolve_string("group/g")).failover_on == frozenset({"timeout", "client_error"})


def test_rotate_group_failover_on_is_carried_into_every_rotation() -> None:
    resolver = _resolver(
        groups={"g": {"strategy": "rotate", "members": ["openai/a", "local/b"], "failover_on": ["rate_limited"]}}
    )
    for _ in range(2):
        assert _plan(resolver.resolve_string("group/g")).failover_on == frozenset({"rate_limited"})


def test_group_without_failover_on_gets_the_default_without_client_error() -> None:
    resolver = _resolver(groups={"g": {"members": ["openai/a"]}})
    failover_on = _plan(resolver.resolve_string("group/g")).failover_on
    assert "client_error" not in failover_on
    assert {"timeout", "rate_limited", "upstream_5xx"} <= failover_on
