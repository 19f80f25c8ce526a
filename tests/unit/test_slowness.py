"""The slowness rule on a fake clock: p90 time to first byte against a target, and the error rate."""

from __future__ import annotations

from typing import Any

from asgi_router import RouterSettings
from asgi_router.core.candidate import Candidate
from asgi_router.resilience.breaker import Phase
from asgi_router.resilience.gate import Gate
from asgi_router.resilience.router_state import InMemoryState
from asgi_router.resilience.slowness import MAX_SAMPLES, Slowness

from ..doubles import FakeClock

_PROVIDERS = {"p": {"base_url": "http://127.0.0.1:1/v1", "api_key": "k"}, "q": {"base_url": "http://127.0.0.1:1/v1"}}


def _settings(breaker: dict[str, Any] | None = None, **fields: Any) -> RouterSettings:
    rule = {"window": 60, "min_requests": 10, **(breaker or {})}
    return RouterSettings(
        allow_unauthenticated=True, providers=fields.pop("providers", _PROVIDERS), breaker=rule, **fields
    )


def _feed(slowness: Slowness, key: str, times: list[float | None], at: float = 0.0) -> str:
    verdict = "unknown"
    for ttfb in times:
        verdict = slowness.observe(key, at, ttfb, failed=ttfb is None).verdict
    return verdict


def test_a_candidate_without_a_target_is_never_judged() -> None:
    slowness = Slowness(_settings())
    assert not slowness.enabled
    assert _feed(slowness, "p/m", [9.0] * 50) == "unknown"


def test_targets_come_from_the_member_then_the_provider_then_the_router_the_tightest_member_wins() -> None:
    settings = _settings(
        {"latency_target": 3.0},
        providers={**_PROVIDERS, "q": {"base_url": "http://127.0.0.1:1/v1", "latency_target": 2.0}},
        groups={
            "g": {"members": [{"ref": "p/a", "latency_target": 1.0}, "q/b"]},
            "h": {"members": [{"ref": "p/a", "latency_target": 0.5}]},
        },
    )
    slowness = Slowness(settings)
    assert (slowness.target("p/a"), slowness.target("q/b"), slowness.target("p/other")) == (0.5, 2.0, 3.0)


def test_no_judgement_before_the_window_holds_min_requests_streamed_calls() -> None:
    slowness = Slowness(_settings({"latency_target": 1.0}))
    assert _feed(slowness, "p/m", [5.0] * 9) == "unknown"
    assert _feed(slowness, "p/m", [5.0]) == "slow"


def test_p90_above_factor_times_target_with_few_errors_is_slow_with_more_errors_opens() -> None:
    rule = {"latency_target": 1.0}
    # 20 calls: 18 of 2.5 s and 2 fast -> p90 2.5 s > 2 x 1 s; one failure is 1/20 = 5 %: not above.
    assert _feed(Slowness(_settings(rule)), "p/m", [0.1, 0.1] + [2.5] * 17 + [None]) == "slow"
    judged = Slowness(_settings(rule))
    assert _feed(judged, "p/m", [0.1] + [2.5] * 17 + [None, None]) == "open"
    assert judged.observe("p/m", 0.0, 2.5, failed=False).p90 == 2.5


def test_p90_is_the_nearest_rank_so_one_slow_call_in_ten_does_not_make_it_slow() -> None:
    slowness = Slowness(_settings({"latency_target": 1.0}))
    assert _feed(slowness, "p/m", [0.5] * 9 + [30.0]) == "normal"  # p90 is the ninth of ten: 0.5 s
    assert _feed(slowness, "p/m", [30.0]) == "slow"  # two in eleven: the tenth value is 30 s


def test_between_the_target_and_the_factor_the_verdict_is_left_open() -> None:
    slowness = Slowness(_settings({"latency_target": 1.0}))
    assert _feed(slowness, "p/m", [1.5] * 10) == "unknown"
    assert _feed(slowness, "p/m", [0.9] * 100) == "normal"  # the ten slow calls are under a tenth now


def test_calls_older_than_the_window_are_forgotten() -> None:
    slowness = Slowness(_settings({"latency_target": 1.0}))
    _feed(slowness, "p/m", [5.0] * 10, at=0.0)
    assert _feed(slowness, "p/m", [5.0], at=60.0) == "unknown"  # the first ten left the window


def test_every_call_failing_is_left_to_the_classic_rules() -> None:
    slowness = Slowness(_settings({"latency_target": 1.0}))
    assert _feed(slowness, "p/m", [None] * 20) == "unknown"


def test_the_window_keeps_at_most_max_samples_calls() -> None:
    slowness = Slowness(_settings({"latency_target": 1.0}))
    _feed(slowness, "p/m", [5.0] * (MAX_SAMPLES + 10))
    assert _feed(slowness, "p/m", [0.1] * MAX_SAMPLES) == "normal"


def _gate(**breaker: Any) -> tuple[Gate, InMemoryState, FakeClock]:
    clock = FakeClock(100.0)
    state = InMemoryState(clock)
    return Gate(_settings({"latency_target": 1.0, "ramp": [], **breaker}), state, clock), state, clock


def test_the_gate_marks_slow_for_a_window_lifts_the_mark_once_fast_and_demotes_in_order() -> None:
    gate, state, clock = _gate()
    for _ in range(10):
        gate._judge("p/slow", 5.0, False)
    assert state.slow("p/slow", clock.now)
    assert not state.slow("p/slow", clock.now + 60)  # a window after the last slow judgement
    order = [Candidate("p", "slow"), Candidate("p", "a"), Candidate("q", "b")]
    assert [c.key for c in gate.demote(order)] == ["p/a", "q/b", "p/slow"]
    for _ in range(90):
        gate._judge("p/slow", 0.5, False)  # the p90 back under the target
    assert not state.slow("p/slow", clock.now)
    assert gate.demote(order) == order


def test_the_gate_opens_a_slow_and_failing_candidate_with_cause_slow_and_starts_its_window_afresh() -> None:
    gate, state, clock = _gate()
    for index in range(10):
        gate._judge("p/sick", 5.0 if index else None, index == 0)
    view = state.breaker("p/sick")
    assert view is not None and (view.phase, view.cause, view.p90) == (Phase.OPEN, "slow", 5.0)
    assert not state.slow("p/sick", clock.now)
    assert gate.slowness.observe("p/sick", clock.now, 5.0, failed=False).verdict == "unknown"
