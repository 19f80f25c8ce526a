"""InMemoryState: rotation counters, breaker table, in-flight and retry budgets."""

from __future__ import annotations

from asgi_router.config.resilience_settings import BreakerSettings, RetryBudgetSettings
from asgi_router.config.settings import RouterSettings
from asgi_router.resilience.breaker import Phase
from asgi_router.resilience.router_state import MAX_BREAKERS, InMemoryState, RouterState
from asgi_router.resilience.stats import RoutingStats
from asgi_router.routing.plan import Plan, Resolver

POLICY = BreakerSettings(consecutive_failures=1)


def test_in_memory_state_implements_the_protocol() -> None:
    state: RouterState = InMemoryState()
    assert state.next_rotation("g") == 0


def test_rotation_counters_are_per_key_and_count_up() -> None:
    state = InMemoryState()
    assert [state.next_rotation("a") for _ in range(3)] == [0, 1, 2]
    assert state.next_rotation("b") == 0


def test_a_key_without_failures_has_no_breaker_and_is_admitted() -> None:
    state = InMemoryState()
    state.record("p/m", POLICY, 0.0, "success", probe=False)
    assert state.breaker("p/m") is None
    assert state.admit("p/m", POLICY, 0.0).allowed


def test_a_failure_creates_the_breaker_and_it_refuses_once_open() -> None:
    state = InMemoryState()
    state.record("p/m", POLICY, 0.0, "failure", probe=False)
    view = state.breaker("p/m")
    assert view is not None and view.phase is Phase.OPEN
    assert not state.admit("p/m", POLICY, 1.0).allowed
    assert state.admit("p/other", POLICY, 1.0).allowed


def test_the_breaker_table_is_bounded_and_forgets_the_least_recently_used() -> None:
    state = InMemoryState()
    for index in range(MAX_BREAKERS + 5):
        state.record(f"p/m{index}", POLICY, 0.0, "failure", probe=False)
    assert state.breaker("p/m0") is None
    assert state.breaker(f"p/m{MAX_BREAKERS + 4}") is not None
    assert len(state._breakers) == MAX_BREAKERS


def test_begin_attempt_refuses_at_the_limit_and_end_attempt_frees_a_slot() -> None:
    state = InMemoryState()
    assert state.begin_attempt("p", 2)
    assert state.begin_attempt("p", 2)
    assert not state.begin_attempt("p", 2)
    assert state.begin_attempt("q", 2)  # per provider
    state.end_attempt("p")
    assert state.begin_attempt("p", 2)
    assert state.begin_attempt("p", None) and state.begin_attempt("p", None)  # no limit


def test_retry_budget_allows_min_concurrent_when_idle() -> None:
    state = InMemoryState()
    budget = RetryBudgetSettings(ratio=0.2, min_concurrent=3)
    assert [state.begin_retry("p", budget) for _ in range(4)] == [True, True, True, False]
    state.end_retry("p")
    assert state.begin_retry("p", budget)


def test_retry_budget_grows_with_active_attempts() -> None:
    state = InMemoryState()
    budget = RetryBudgetSettings(ratio=0.2, min_concurrent=3)
    for _ in range(50):
        state.begin_attempt("p", None)
    granted = sum(state.begin_retry("p", budget) for _ in range(20))
    assert granted == 10  # 20 % of 50 in flight


def test_rotate_groups_count_in_the_shared_state() -> None:
    settings = RouterSettings(
        providers={name: {"base_url": f"http://{name}.example/v1", "api_key": "k-0123456789"} for name in "abc"},
        groups={"g": {"strategy": "rotate", "members": ["a/m", "b/m", "c/m"]}},
        allow_unauthenticated=True,
    )
    state = InMemoryState()
    resolver = Resolver(settings, state)

    def first() -> str:
        plan = resolver.resolve_string("group/g")
        assert isinstance(plan, Plan)
        return str(plan.candidates[0])

    assert first() == "a/m"
    assert state.next_rotation("g") == 1  # another worker sharing the state took a turn
    assert [first(), first()] == ["c/m", "a/m"]


def test_the_state_is_the_routing_statistics_and_keeps_provider_and_candidate_counts_apart() -> None:
    state = InMemoryState()
    stats: RoutingStats = state
    assert state.begin_attempt("p", None)
    stats.acquire("p/m")
    assert (state.in_flight("p"), state.in_flight("p/m")) == (1, 1)
    stats.release("p/m")
    state.end_attempt("p")
    assert (state.in_flight("p"), state.in_flight("p/m")) == (0, 0)
