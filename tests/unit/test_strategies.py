"""Strategies order candidates from statistics, catalog and request facts: properties per strategy.

Randomness is a seeded ``random.Random`` and time an injected clock, so each property is checked
over many requests without sleeping and without flakiness.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from asgi_router.config.settings import RouterSettings
from asgi_router.resilience.stats import InMemoryStats
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan, ResolveError, Resolver

from ..doubles import FakeClock

_PROVIDERS: dict[str, Any] = {name: {"base_url": f"https://{name}.example/v1"} for name in ("a", "b", "c", "d")}


def _resolver(
    group: dict[str, Any], *, stats: InMemoryStats | None = None, seed: int = 7, **settings: Any
) -> tuple[Resolver, InMemoryStats]:
    stats = stats or InMemoryStats(FakeClock())
    resolver = Resolver(
        RouterSettings(allow_unauthenticated=True, providers=_PROVIDERS, groups={"g": group}, **settings),
        stats=stats,
        rng=random.Random(seed),
    )
    return resolver, stats


def _order(resolver: Resolver, facts: RequestFacts | None = None) -> list[str]:
    plan = resolver.resolve_string("group/g", facts or RequestFacts({}))
    assert isinstance(plan, Plan), plan
    return [str(candidate) for candidate in plan.candidates]


# --- weighted -----------------------------------------------------------------------------------


def test_weighted_first_picks_follow_the_weights_within_tolerance() -> None:
    resolver, _ = _resolver(
        {"strategy": "weighted", "members": [{"ref": "a/m", "weight": 3}, "b/m", {"ref": "c/m", "weight": 6}]}
    )
    firsts = Counter(_order(resolver)[0] for _ in range(20_000))
    assert firsts["a/m"] / 20_000 == pytest.approx(0.3, abs=0.02)
    assert firsts["b/m"] / 20_000 == pytest.approx(0.1, abs=0.02)
    assert firsts["c/m"] / 20_000 == pytest.approx(0.6, abs=0.02)


def test_weighted_rest_follow_heaviest_first_after_the_pick() -> None:
    resolver, _ = _resolver(
        {
            "strategy": "weighted",
            "members": ["a/m", {"ref": "b/m", "weight": 5}, {"ref": "c/m", "weight": 2}, "d/m"],
        }
    )
    orders = {tuple(_order(resolver)) for _ in range(500)}
    assert orders == {
        ("b/m", "c/m", "a/m", "d/m"),
        ("c/m", "b/m", "a/m", "d/m"),
        ("a/m", "b/m", "c/m", "d/m"),
        ("d/m", "b/m", "c/m", "a/m"),
    }


def test_weighted_is_reproducible_with_the_same_seed() -> None:
    group = {"strategy": "weighted", "members": ["a/m", "b/m", "c/m"]}
    first, _ = _resolver(group, seed=42)
    second, _ = _resolver(group, seed=42)
    assert [_order(first) for _ in range(50)] == [_order(second) for _ in range(50)]


def test_weighted_nested_group_weights_multiply_through() -> None:
    resolver = Resolver(
        RouterSettings(
            allow_unauthenticated=True,
            providers=_PROVIDERS,
            groups={
                "g": {"strategy": "weighted", "members": [{"ref": "group/inner", "weight": 2}, "c/m"]},
                "inner": {"members": [{"ref": "a/m", "weight": 3}, "b/m"]},
            },
        ),
        rng=random.Random(1),
    )
    firsts = Counter(_order(resolver)[0] for _ in range(20_000))
    # weights a: 2*3 = 6, b: 2*1 = 2, c: 1  -> shares 6/9, 2/9, 1/9
    assert firsts["a/m"] / 20_000 == pytest.approx(6 / 9, abs=0.02)
    assert firsts["b/m"] / 20_000 == pytest.approx(2 / 9, abs=0.02)
    assert firsts["c/m"] / 20_000 == pytest.approx(1 / 9, abs=0.02)


# --- least_busy ---------------------------------------------------------------------------------


def test_least_busy_orders_by_in_flight_count_ties_in_configured_order() -> None:
    resolver, stats = _resolver({"strategy": "least_busy", "members": ["a/m", "b/m", "c/m"]})
    assert _order(resolver) == ["a/m", "b/m", "c/m"]
    stats.acquire("a/m")
    stats.acquire("a/m")
    stats.acquire("c/m")
    assert _order(resolver) == ["b/m", "c/m", "a/m"]
    stats.release("a/m")
    stats.release("a/m")
    assert _order(resolver) == ["a/m", "b/m", "c/m"]


# --- latency ------------------------------------------------------------------------------------


def test_latency_orders_by_mean_ttfb_with_unmeasured_members_first() -> None:
    resolver, stats = _resolver({"strategy": "latency", "explore": 0, "members": ["a/m", "b/m", "c/m", "d/m"]})
    stats.observe_latency("a/m", 0.9)
    stats.observe_latency("c/m", 0.2)
    assert _order(resolver) == ["b/m", "d/m", "c/m", "a/m"]


def test_latency_follows_the_ema_as_a_member_gets_slow_then_recovers() -> None:
    clock = FakeClock()
    stats = InMemoryStats(clock, half_life=10)
    resolver, _ = _resolver({"strategy": "latency", "explore": 0, "members": ["a/m", "b/m"]}, stats=stats)
    stats.observe_latency("a/m", 0.3)
    stats.observe_latency("b/m", 0.5)
    assert _order(resolver)[0] == "a/m"
    clock.now += 1
    stats.observe_latency("a/m", 2.0)  # a spike: mean of a is now above b's
    assert _order(resolver)[0] == "b/m"
    for _ in range(5):  # a is fast again; after a few half-lives the spike has faded
        clock.now += 10
        stats.observe_latency("a/m", 0.3)
    assert stats.latency("a/m") == pytest.approx(0.3, abs=0.05)
    assert _order(resolver)[0] == "a/m"


def test_latency_explores_about_the_configured_share_of_requests() -> None:
    resolver, stats = _resolver({"strategy": "latency", "explore": 0.05, "members": ["a/m", "b/m", "c/m"]}, seed=3)
    stats.observe_latency("a/m", 0.1)
    stats.observe_latency("b/m", 0.5)
    stats.observe_latency("c/m", 0.9)
    orders = [_order(resolver) for _ in range(20_000)]
    explored = [order for order in orders if order[0] != "a/m"]
    assert len(explored) / 20_000 == pytest.approx(0.05, abs=0.01)
    # an explored member is tried first and the rest keep their latency order
    assert {tuple(order) for order in explored} == {("b/m", "a/m", "c/m"), ("c/m", "a/m", "b/m")}
    assert Counter(order[0] for order in explored)["b/m"] == pytest.approx(len(explored) / 2, rel=0.2)


def test_latency_without_exploration_never_leaves_the_fastest() -> None:
    resolver, stats = _resolver({"strategy": "latency", "explore": 0, "members": ["a/m", "b/m"]})
    stats.observe_latency("a/m", 0.5)
    stats.observe_latency("b/m", 0.1)
    assert {_order(resolver)[0] for _ in range(2000)} == {"b/m"}


# --- cost ---------------------------------------------------------------------------------------

_CATALOG: dict[str, Any] = {
    "a/m": {"input_price": 3.0, "output_price": 15.0},  # prompt-heavy: pricey
    "b/m": {"input_price": 0.5, "output_price": 30.0},  # output-heavy: pricey
    "c/m": {"input_price": 1.0, "output_price": 2.0},
}


def _chat(text: str, **body: Any) -> RequestFacts:
    return RequestFacts({"messages": [{"role": "user", "content": text}], **body})


def test_cost_puts_the_cheapest_for_this_request_first_and_unpriced_last() -> None:
    resolver, _ = _resolver({"strategy": "cost", "members": ["d/m", "a/m", "b/m", "c/m"]}, catalog=_CATALOG)
    assert _order(resolver, _chat("hi")) == ["c/m", "a/m", "b/m", "d/m"]


def test_cost_depends_on_the_request_prompt_size_and_max_tokens() -> None:
    resolver, _ = _resolver({"strategy": "cost", "members": ["a/m", "b/m"]}, catalog=_CATALOG)
    long_prompt_short_answer = _chat("x" * 400_000, max_tokens=10)
    short_prompt_long_answer = _chat("hi", max_tokens=4000)
    assert _order(resolver, long_prompt_short_answer) == ["b/m", "a/m"]
    assert _order(resolver, short_prompt_long_answer) == ["a/m", "b/m"]


# --- usage --------------------------------------------------------------------------------------


def test_usage_orders_within_budget_by_used_share_and_over_budget_last() -> None:
    resolver, stats = _resolver(
        {
            "strategy": "usage",
            "members": [{"ref": "a/m", "rpm": 10}, {"ref": "b/m", "rpm": 10}, {"ref": "c/m", "tpm": 1000}, "d/m"],
        }
    )
    stats.add_usage("a/m", 10, 0)  # at its rpm: over budget
    stats.add_usage("b/m", 5, 0)  # half used
    stats.add_usage("c/m", 1, 100)  # a tenth used
    assert _order(resolver) == ["d/m", "c/m", "b/m", "a/m"]


def test_usage_counts_this_requests_estimated_tokens_against_tpm() -> None:
    resolver, stats = _resolver(
        {"strategy": "usage", "members": [{"ref": "a/m", "tpm": 1000}, {"ref": "b/m", "tpm": 1_000_000}]}
    )
    stats.add_usage("a/m", 1, 900)  # 90% used
    stats.add_usage("b/m", 1, 950_000)  # 95% used
    small, large = _chat("x" * 40), _chat("x" * 1000)  # ~14 and ~254 estimated tokens
    assert _order(resolver, small) == ["a/m", "b/m"]  # a fits and is less used
    assert _order(resolver, large) == ["b/m", "a/m"]  # a would go over with this request: last


def test_strategies_that_do_not_fit_a_group_resolve_as_plans_not_errors() -> None:
    for strategy in ("weighted", "least_busy", "latency", "cost", "usage"):
        resolver, _ = _resolver({"strategy": strategy, "members": ["a/m"]})
        result = resolver.resolve_string("group/g")
        assert not isinstance(result, ResolveError)
        assert _order(resolver) == ["a/m"]
