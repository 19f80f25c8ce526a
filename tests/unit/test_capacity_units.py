"""Capacity-aware routing's pure parts on a fake clock: affinities (ttl, bound), sticky keys
(hashes only), rate-limit headers and the marks they make, queue order and priorities, and the
settings' load-time checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from asgi_router import RouterSettings
from asgi_router.attempts.capacity_queue import RECHECK, CapacityQueue
from asgi_router.attempts.decisions import Decisions
from asgi_router.attempts.rate_limits import MAX_MARKED, RateLimits, read_rate_limits
from asgi_router.config.capacity_settings import QueueSettings
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import AttemptSummary
from asgi_router.resilience.affinity import Affinities
from asgi_router.routing.sticky_keys import sticky_key

from ..doubles import FakeClock

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


# --- affinities ---------------------------------------------------------------------------------


def test_an_affinity_lasts_ttl_after_its_last_use_and_a_use_renews_it() -> None:
    clock = FakeClock(100.0)
    table = Affinities(ttl=300, max_keys=10, clock=clock)
    table.remember("k", "p/a")
    clock.now += 299
    assert table.member("k") == "p/a"
    table.remember("k", "p/a")  # served again: another 300 s
    clock.now += 299
    assert table.member("k") == "p/a"
    clock.now += 1
    assert table.member("k") is None
    assert len(table) == 0


def test_affinities_past_max_keys_drop_the_least_recently_used_first() -> None:
    clock = FakeClock(100.0)
    table = Affinities(ttl=300, max_keys=2, clock=clock)
    table.remember("a", "p/1")
    table.remember("b", "p/2")
    table.remember("a", "p/1")  # "b" is now the least recently used
    table.remember("c", "p/3")
    assert (table.member("a"), table.member("b"), table.member("c")) == ("p/1", None, "p/3")


# --- sticky keys --------------------------------------------------------------------------------


def test_a_prefix_key_is_a_hash_of_the_system_and_first_user_message_never_their_text() -> None:
    secret = "You are the assistant of ACME; the password is hunter2."
    first = {"messages": [{"role": "system", "content": secret}, {"role": "user", "content": "hi"}]}
    later = {
        "messages": [*first["messages"], {"role": "assistant", "content": "yo"}, {"role": "user", "content": "more"}]
    }
    other = {"messages": [{"role": "system", "content": "another prompt"}, {"role": "user", "content": "hi"}]}
    key = sticky_key("prefix", first, None, None)
    assert key is not None and "hunter2" not in key and len(key) == 32
    assert sticky_key("prefix", later, None, None) == key  # later turns share the prefix
    assert sticky_key("prefix", other, None, None) != key
    anthropic = {"system": secret, "messages": [{"role": "user", "content": "hi"}]}
    assert sticky_key("prefix", anthropic, None, None) == key  # the same prefix in Anthropic's shape
    assert sticky_key("prefix", {"messages": []}, None, None) is None


def test_session_and_principal_keys_are_hashes_and_absent_without_a_value() -> None:
    assert sticky_key("session", {}, None, "alice") is None
    assert sticky_key("principal", {}, "s1", None) is None
    session = sticky_key("session", {}, "s1", None)
    principal = sticky_key("principal", {}, None, "s1")
    assert session is not None and principal is not None and session != principal and "s1" not in session


# --- rate-limit headers -------------------------------------------------------------------------


def test_openai_rate_limit_headers_read_as_remaining_counts_and_go_durations() -> None:
    headers = [
        (b"X-RateLimit-Remaining-Requests", b"0"),
        (b"x-ratelimit-reset-requests", b"6m0s"),
        (b"x-ratelimit-remaining-tokens", b"1500"),
        (b"x-ratelimit-reset-tokens", b"20ms"),
    ]
    assert read_rate_limits(headers, NOW) == {"requests": (0, 360.0), "tokens": (1500, 0.02)}


def test_anthropic_rate_limit_headers_read_their_rfc_3339_resets() -> None:
    reset = (NOW + timedelta(seconds=7)).isoformat().replace("+00:00", "Z").encode()
    headers = [
        (b"anthropic-ratelimit-requests-remaining", b"0"),
        (b"anthropic-ratelimit-requests-reset", reset),
        (b"anthropic-ratelimit-tokens-remaining", b"42"),
        (b"anthropic-ratelimit-tokens-reset", reset),
    ]
    assert read_rate_limits(headers, NOW) == {"requests": (0, 7.0), "tokens": (42, 7.0)}


def test_answers_without_rate_limit_headers_or_with_garbage_in_them_mark_nothing() -> None:
    assert read_rate_limits([(b"content-type", b"application/json")], NOW) is None
    garbage = [(b"x-ratelimit-remaining-requests", b"-1"), (b"x-ratelimit-reset-requests", b"soon")]
    assert read_rate_limits(garbage, NOW) == {"requests": (None, None)}
    clock = FakeClock(100.0)
    limits = RateLimits(clock, lambda: NOW)
    limits.observe("p/m", garbage)
    assert not limits.marks and limits.blocked("p/m", lambda: 1) is None


def test_no_requests_left_blocks_the_member_until_the_reset() -> None:
    clock = FakeClock(100.0)
    limits = RateLimits(clock, lambda: NOW)
    limits.observe("p/m", [(b"x-ratelimit-remaining-requests", b"0"), (b"x-ratelimit-reset-requests", b"2s")])
    assert limits.blocked("p/m", lambda: 1) == pytest.approx(2.0)
    assert limits.blocked("p/other", lambda: 1) is None
    clock.now += 2
    assert limits.blocked("p/m", lambda: 1) is None
    assert not limits.marks  # the entry is gone once its resets have passed


def test_too_few_tokens_left_blocks_only_requests_larger_than_them() -> None:
    clock = FakeClock(100.0)
    limits = RateLimits(clock, lambda: NOW)
    limits.observe("p/m", [(b"x-ratelimit-remaining-tokens", b"100"), (b"x-ratelimit-reset-tokens", b"10s")])
    assert limits.blocked("p/m", lambda: 50) is None
    assert limits.blocked("p/m", lambda: 500) == pytest.approx(10.0)
    limits.observe("p/m", [(b"x-ratelimit-remaining-tokens", b"9000"), (b"x-ratelimit-reset-tokens", b"1s")])
    assert limits.blocked("p/m", lambda: 500) is None  # a later answer says there is room


def test_a_429_wait_blocks_the_member_and_a_later_answer_with_room_lifts_it() -> None:
    clock = FakeClock(100.0)
    limits = RateLimits(clock, lambda: NOW)
    limits.wait("p/m", 30)
    assert limits.blocked("p/m", lambda: 1) == pytest.approx(30.0)
    limits.observe("p/m", [(b"x-ratelimit-remaining-requests", b"5"), (b"x-ratelimit-reset-requests", b"1s")])
    assert limits.blocked("p/m", lambda: 1) is None


def test_a_mark_adopted_from_the_fleet_blocks_as_a_local_one() -> None:
    clock = FakeClock(100.0)
    limits = RateLimits(clock, lambda: NOW)
    limits.adopt("p/m", 3.0, 0, 0.0)
    assert limits.blocked("p/m", lambda: 1) == pytest.approx(3.0)


def test_the_marks_table_is_bounded() -> None:
    clock = FakeClock(100.0)
    limits = RateLimits(clock, lambda: NOW)
    for n in range(MAX_MARKED + 5):
        limits.wait(f"p/m{n}", 60)
    assert limits.blocked("p/m0", lambda: 1) is None
    assert limits.blocked(f"p/m{MAX_MARKED + 4}", lambda: 1) is not None


# --- the queue ----------------------------------------------------------------------------------


def test_a_queue_is_first_in_first_out_within_a_priority_and_high_before_normal_before_low() -> None:
    queue = CapacityQueue(QueueSettings(max_size=10), FakeClock(100.0))
    low = queue.join("low")
    first = queue.join("normal")
    second = queue.join("normal")
    high = queue.join("high")
    order = []
    while (head := queue.head()) is not None:
        order.append(head)
        queue.leave(head)
    assert order == [high, first, second, low]


def test_a_full_queue_takes_no_one_more() -> None:
    queue = CapacityQueue(QueueSettings(max_size=2), FakeClock(100.0))
    assert queue.join("normal") is not None and queue.join("normal") is not None
    assert queue.join("high") is None
    assert len(queue) == 2


def test_only_priority_callers_may_set_a_priority() -> None:
    queue = CapacityQueue(QueueSettings(priority_callers=["batch", "vip"]), FakeClock(100.0))
    assert queue.priority("high", "vip") == "high"
    assert queue.priority("low", "batch") == "low"
    assert queue.priority("high", "mallory") == "normal"  # a client cannot promote itself
    assert queue.priority("high", None) == "normal"
    assert queue.priority("urgent!", "vip") == "normal"


# --- settings -----------------------------------------------------------------------------------


def _settings(group: dict[str, Any]) -> RouterSettings:
    providers: dict[str, Any] = {"p": {"base_url": "http://127.0.0.1:9/v1"}}
    groups: dict[str, Any] = {"g": {"members": ["p/m"], **group}}
    return RouterSettings(providers=providers, groups=groups, allow_unauthenticated=True)


def test_sticky_and_queue_settings_default_as_the_issue_pins_them() -> None:
    settings = _settings({"sticky": {}, "queue": {}})
    group = settings.groups["g"]
    assert group.sticky is not None and group.queue is not None
    assert (group.sticky.key, group.sticky.ttl, group.sticky.max_keys) == ("session", 300, 100_000)
    assert (group.queue.max_wait, group.queue.max_size, group.queue.priority_header, group.queue.priority_callers) == (
        10.0,
        100,
        "x-priority",
        [],
    )
    assert settings.session_header == "x-session-id"
    assert settings.providers["p"].honour_rate_limit_headers is True
    assert _settings({}).groups["g"].sticky is None and _settings({}).groups["g"].queue is None


@pytest.mark.parametrize(
    "group",
    [
        {"sticky": {"key": "cookie"}},
        {"sticky": {"ttl": 0}},
        {"sticky": {"max_keys": 0}},
        {"sticky": {"tll": 30}},
        {"queue": {"max_wait": 0}},
        {"queue": {"max_size": 0}},
        {"queue": {"priority_header": "x priority"}},
    ],
)
def test_bad_sticky_and_queue_settings_are_refused_at_load(group: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        _settings(group)


# --- the decision point's capacity answers -------------------------------------------------------


def _skipped(*reasons: Reason) -> list[AttemptSummary]:
    return [AttemptSummary(f"p/m{n}", reason, skipped=True) for n, reason in enumerate(reasons)]


def test_the_decision_point_waits_only_when_capacity_alone_stood_in_the_way() -> None:
    assert Decisions.waits(0, False, _skipped("over_budget", "saturated")) is True
    assert Decisions.waits(0, False, _skipped("saturated", "circuit_open")) is False  # a breaker, too
    assert Decisions.waits(1, False, _skipped("saturated")) is False  # something was attempted
    assert Decisions.waits(0, True, _skipped("saturated")) is False  # the deadline stopped the pass
    assert Decisions.waits(0, False, None) is False


def _waiting(*hints: float | None) -> list[AttemptSummary]:
    reasons: list[Reason] = ["over_budget" if hint is not None else "saturated" for hint in hints]
    return [
        AttemptSummary(f"p/m{n}", reason, retry_after=hint, skipped=True)
        for n, (reason, hint) in enumerate(zip(reasons, hints, strict=True))
    ]


def test_a_queued_request_is_planned_again_at_the_soonest_stated_reset_else_after_recheck() -> None:
    assert Decisions.recheck(_waiting(2.0, 0.5)) == 0.5  # every skip said when: the soonest
    assert Decisions.recheck(_waiting(2.0, None)) == RECHECK  # a concurrency cap frees without notice
    assert Decisions.recheck(_waiting(0.0)) == RECHECK  # a reset already due cannot spin the loop
    assert Decisions.recheck(None) == RECHECK


def test_the_marks_in_force_say_what_is_limited_and_when_it_resets() -> None:
    clock = FakeClock(100.0)
    limits = RateLimits(clock, lambda: NOW)
    limits.wait("p/requests", 30)
    limits.observe("p/tokens", [(b"x-ratelimit-remaining-tokens", b"100"), (b"x-ratelimit-reset-tokens", b"10s")])
    assert sorted(limits.in_force()) == [
        ("p/requests", "requests", pytest.approx(30.0), None),
        ("p/tokens", "tokens", pytest.approx(10.0), 100),
    ]
    clock.now += 31
    assert limits.in_force() == []


def test_the_anonymous_caller_may_be_a_priority_caller_as_everywhere_else() -> None:
    # No principal (allow_unauthenticated, or authorize= returning True) is the caller "anonymous".
    queue = CapacityQueue(QueueSettings(priority_callers=["anonymous"]), FakeClock())
    assert queue.priority("low", None) == "low"
    assert queue.priority("high", None) == "high"
