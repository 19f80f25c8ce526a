"""Resolver with rules and group policies: which plan a request gets, and what the plan carries."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_router.config.settings import RouterSettings
from asgi_router.core.candidate import Candidate
from asgi_router.resilience.stats import Limits
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan, ResolveError, Resolver

_PROVIDERS: dict[str, Any] = {name: {"base_url": f"https://{name}.example/v1"} for name in ("a", "b", "c")}

_SETTINGS = RouterSettings(
    allow_unauthenticated=True,
    providers=_PROVIDERS,
    groups={
        "auto": {"rules": True, "members": ["a/default"], "degraded": {"content": "busy"}},
        "vision": {"members": ["b/eyes", "c/eyes"], "hedge_after": 0.5},
        "long": {"members": [{"ref": "c/long", "rpm": 10}], "degraded": {"content": "long busy"}},
        "plain": {"members": ["a/x"]},
    },
    aliases={"smart": "group/auto"},
    rules=[
        {"name": "vision", "images": True, "route": "group/vision"},
        {"name": "long", "min_prompt_tokens": 100, "route": "group/long"},
        {"name": "gold", "headers": {"x-router-tier": "gold"}, "route": "b/direct"},
    ],
)

_IMAGE_REQUEST = RequestFacts(
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]}
)
_LONG_REQUEST = RequestFacts({"messages": [{"role": "user", "content": "x" * 1000}]})
_GOLD_REQUEST = RequestFacts({"messages": []}, [(b"x-router-tier", b"gold")])


def _plan(result: Plan | ResolveError) -> Plan:
    assert isinstance(result, Plan), result
    return result


@pytest.mark.parametrize(
    ("facts", "route", "candidates"),
    [
        (_IMAGE_REQUEST, "vision", [Candidate("b", "eyes"), Candidate("c", "eyes")]),
        (_LONG_REQUEST, "long", [Candidate("c", "long")]),
        (_GOLD_REQUEST, "gold", [Candidate("b", "direct")]),
        (RequestFacts({"messages": []}), "default", [Candidate("a", "default")]),
    ],
)
def test_rules_group_resolves_to_the_first_matching_rules_plan_named_by_route(
    facts: RequestFacts, route: str, candidates: list[Candidate]
) -> None:
    resolver = Resolver(_SETTINGS)
    for model in ("group/auto", "smart"):  # an alias to a rules group runs the rules too
        plan = _plan(resolver.resolve_string(model, facts))
        assert plan.rule == route
        assert list(plan.candidates) == candidates


def test_rules_do_not_run_for_a_group_without_rules_enabled() -> None:
    plan = _plan(Resolver(_SETTINGS).resolve_string("group/plain", _IMAGE_REQUEST))
    assert (plan.rule, plan.candidates) == ("default", (Candidate("a", "x"),))


def test_a_rules_plan_carries_the_target_groups_policies() -> None:
    resolver = Resolver(_SETTINGS)
    vision = _plan(resolver.resolve_string("group/auto", _IMAGE_REQUEST))
    assert vision.policy is not None and vision.policy.hedge_after == 0.5
    long = _plan(resolver.resolve_string("group/auto", _LONG_REQUEST))
    assert long.policy is not None and long.policy.limits == {"c/long": Limits(rpm=10)}
    assert long.policy.degraded is not None and long.policy.degraded.content == "long busy"


def test_a_rules_target_without_a_canned_reply_borrows_the_rules_groups() -> None:
    resolver = Resolver(_SETTINGS)
    for facts in (_IMAGE_REQUEST, _GOLD_REQUEST):
        policy = _plan(resolver.resolve_string("group/auto", facts)).policy
        assert policy is not None and policy.degraded is not None
        assert policy.degraded.content == "busy"


def test_direct_refs_have_no_policy_and_the_default_route() -> None:
    plan = _plan(Resolver(_SETTINGS).resolve_string("a/anything"))
    assert (plan.rule, plan.policy) == ("default", None)


def test_order_group_plans_are_shared_not_rebuilt_per_request() -> None:
    resolver = Resolver(_SETTINGS)
    assert resolver.resolve_string("group/plain") is resolver.resolve_string("group/plain")
