"""InMemoryStats: in-flight counts, the decayed TTFB mean, rolling usage and hedge credit."""

from __future__ import annotations

import pytest

from asgi_router.resilience.stats import (
    HEDGE_BURST,
    USAGE_WINDOW,
    InMemoryStats,
    Limits,
    RoutingStats,
    WindowUsage,
    over_budget,
    utilisation,
)

from ..doubles import FakeClock


def test_in_memory_stats_satisfies_the_protocol() -> None:
    stats: RoutingStats = InMemoryStats()
    assert stats.in_flight("a/m") == 0


def test_in_flight_counts_acquires_minus_releases_and_forgets_idle_keys() -> None:
    stats = InMemoryStats()
    stats.acquire("a/m")
    stats.acquire("a/m")
    stats.acquire("b/m")
    assert (stats.in_flight("a/m"), stats.in_flight("b/m")) == (2, 1)
    stats.release("a/m")
    stats.release("b/m")
    assert (stats.in_flight("a/m"), stats.in_flight("b/m")) == (1, 0)
    assert "b/m" not in stats._in_flight  # no table growth for idle keys


def test_latency_is_none_before_any_observation() -> None:
    assert InMemoryStats().latency("a/m") is None


def test_latency_of_simultaneous_observations_is_their_plain_mean() -> None:
    stats = InMemoryStats(FakeClock(), half_life=10)
    for seconds in (1.0, 2.0, 3.0):
        stats.observe_latency("a/m", seconds)
    assert stats.latency("a/m") == pytest.approx(2.0)


def test_an_observation_one_half_life_old_weighs_half_as_much() -> None:
    clock = FakeClock()
    stats = InMemoryStats(clock, half_life=10)
    stats.observe_latency("a/m", 4.0)
    clock.now += 10
    stats.observe_latency("a/m", 1.0)
    # weights 0.5 and 1: (0.5 * 4 + 1) / 1.5
    assert stats.latency("a/m") == pytest.approx(3.0 / 1.5)


def test_old_slowness_fades_after_many_half_lives() -> None:
    clock = FakeClock()
    stats = InMemoryStats(clock, half_life=5)
    stats.observe_latency("a/m", 30.0)
    clock.now += 100  # 20 half-lives: the old weight is about one millionth
    stats.observe_latency("a/m", 0.5)
    assert stats.latency("a/m") == pytest.approx(0.5, abs=1e-3)


def test_half_life_must_be_positive() -> None:
    with pytest.raises(ValueError):
        InMemoryStats(half_life=0)


def test_usage_counts_requests_and_tokens_in_the_rolling_window() -> None:
    clock = FakeClock()
    stats = InMemoryStats(clock)
    stats.add_usage("a/m", 1, 100)
    clock.now += 30
    stats.add_usage("a/m", 1, 50)
    stats.add_usage("a/m", 0, -20)  # a correction once the real count is known
    assert stats.usage("a/m") == WindowUsage(2, 130)
    clock.now += USAGE_WINDOW - 29  # the first second has left the window
    assert stats.usage("a/m") == WindowUsage(1, 30)
    clock.now += USAGE_WINDOW
    assert stats.usage("a/m") == WindowUsage(0, 0)


def test_usage_of_an_unknown_key_is_zero_and_creates_nothing() -> None:
    stats = InMemoryStats()
    assert stats.usage("x/y") == WindowUsage()
    assert stats.usage_frees_in("x/y") == 0.0
    assert stats._usage == {}


def test_usage_frees_in_says_when_the_oldest_second_leaves() -> None:
    clock = FakeClock(1000.25)
    stats = InMemoryStats(clock)
    stats.add_usage("a/m", 1, 10)
    clock.now = 1020.0
    assert stats.usage_frees_in("a/m") == pytest.approx(1000 + USAGE_WINDOW - 1020.0)


def test_negative_corrections_never_show_as_negative_usage() -> None:
    clock = FakeClock()
    stats = InMemoryStats(clock)
    stats.add_usage("a/m", 1, 10)
    clock.now += USAGE_WINDOW + 1
    stats.add_usage("a/m", 0, -10)  # the correction of a request that already left the window
    assert stats.usage("a/m") == WindowUsage(0, 0)


@pytest.mark.parametrize(
    ("limits", "used", "tokens", "over"),
    [
        (Limits(), WindowUsage(10**6, 10**9), 10**6, False),
        (Limits(rpm=3), WindowUsage(2, 0), 0, False),
        (Limits(rpm=3), WindowUsage(3, 0), 0, True),
        (Limits(tpm=100), WindowUsage(0, 90), 10, False),
        (Limits(tpm=100), WindowUsage(0, 90), 11, True),
        (Limits(rpm=10, tpm=100), WindowUsage(1, 100), 1, True),
    ],
)
def test_over_budget_when_one_more_request_would_exceed_a_limit(
    limits: Limits, used: WindowUsage, tokens: int, over: bool
) -> None:
    assert over_budget(limits, used, tokens) is over


def test_utilisation_is_the_larger_used_share() -> None:
    assert utilisation(Limits(rpm=10, tpm=1000), WindowUsage(2, 500)) == pytest.approx(0.5)
    assert utilisation(Limits(), WindowUsage(2, 500)) == 0.0


def test_hedge_credit_starts_at_one_and_earns_a_share_per_request() -> None:
    stats = InMemoryStats()
    stats.earn_hedge_credit("g", 0.1)
    assert stats.spend_hedge_credit("g") is True
    spent = 0
    for _ in range(100):
        stats.earn_hedge_credit("g", 0.1)
        spent += stats.spend_hedge_credit("g")
    assert spent == 10  # a tenth of the requests, however many want a hedge


def test_hedge_credit_banks_at_most_the_burst() -> None:
    stats = InMemoryStats()
    for _ in range(1000):
        stats.earn_hedge_credit("g", 0.5)
    assert sum(stats.spend_hedge_credit("g") for _ in range(100)) == int(HEDGE_BURST)
