"""Caller caps as logic, on fake clock: the tallies (UTC days, the rolling minute, session ttl,
the bounds), a refusal's wording and reset, and a fleet slice's answers. The decision itself
(serve, downgrade, refuse) is the decision point's, a table in ``test_decisions.py``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from starlette.types import Scope

from asgi_router import RouterSettings
from asgi_router.attempts.decisions import Decisions
from asgi_router.attempts.request_answers import Downgrade, Refuse
from asgi_router.fleet.caller_budgets import SharedCallerTallies
from asgi_router.resilience.caller_limits import CallerLimits, CallerTicket
from asgi_router.resilience.caller_tally import DAY, PAST, REFUSED, UNDER, CallerTallies, Cap, Table, level_of

from ..doubles import FakeClock


def _scope(session: str | None = None) -> Scope:
    headers = [(b"x-session-id", session.encode())] if session is not None else []
    return {"type": "http", "headers": headers}


def _limits(clock: FakeClock, **settings: Any) -> CallerLimits:
    built = RouterSettings(
        allow_unauthenticated=True,
        providers={"p": {"base_url": "http://127.0.0.1:9/v1"}},
        groups={"cheap": {"members": ["p/small"]}},
        **settings,
    )
    return CallerLimits(built, CallerTallies(built.max_callers, clock, clock.wall))


def _admit(limits: CallerLimits, principal: object, scope: Scope) -> CallerTicket:
    """As the middleware's admit phase: admitted at once while every cap is far, else judged cap
    by cap, answered by the decision point, then applied."""
    ticket = limits.admit(principal, scope)
    if not ticket.judged:
        return ticket
    answer = Decisions.caller(ticket.judged)
    if isinstance(answer, Refuse):
        limits.refuse(ticket, answer.cap, answer.table)
    elif isinstance(answer, Downgrade):
        limits.serve(ticket, answer.cap, answer.ref)
    else:
        limits.serve(ticket)
    return ticket


@pytest.mark.parametrize(
    ("used", "cap", "level"),
    [
        (9.99, Cap("usd_per_day", 10, 20), UNDER),
        (10, Cap("usd_per_day", 10, 20), PAST),
        (20, Cap("usd_per_day", 10, 20), REFUSED),
        (10, Cap("usd_per_day", 10, 10), REFUSED),  # no downgrade_to: the cap refuses
        (10**9, Cap("usd_per_day", 10, None), PAST),  # downgrade without hard_limit: never refused
    ],
)
def test_usage_stands_under_past_or_refused_against_a_cap(used: float, cap: Cap, level: int) -> None:
    assert level_of(used, cap) == level


def test_a_daily_cap_resets_at_midnight_utc_and_the_refusal_says_when() -> None:
    clock = FakeClock(wall=10 * DAY + DAY - 90)  # 23:58:30 UTC
    limits = _limits(clock, callers={"team-a": {"tokens_per_day": 100}})
    ticket = _admit(limits, "team-a", _scope())
    assert ticket.refusal is None
    limits.settle(ticket, 150, 0.0)
    refused = _admit(limits, "team-a", _scope()).refusal
    assert refused is not None and refused.status == 429 and refused.code == "caller_limit_reached"
    assert refused.retry_after == pytest.approx(90)
    assert (
        refused.message
        == "tokens_per_day of team-a is reached (100 tokens a UTC day); it resets at 00:00 UTC, in 1m 30s"
    )
    assert (b"x-should-retry", b"false") in refused.headers
    clock.advance(91)  # a new UTC day
    assert _admit(limits, "team-a", _scope()).refusal is None


def test_an_rpm_cap_counts_a_rolling_minute_and_only_admitted_requests() -> None:
    clock = FakeClock()
    limits = _limits(clock, callers={"*": {"rpm": 2}})
    assert _admit(limits, "u1", _scope()).refusal is None
    clock.advance(30)
    assert _admit(limits, "u1", _scope()).refusal is None
    refused = _admit(limits, "u1", _scope()).refusal
    assert refused is not None and refused.retry_after == pytest.approx(30)
    assert _admit(limits, "u2", _scope()).refusal is None  # each unnamed caller counted alone
    clock.advance(30.5)  # the first request left the window; refusals were never counted
    assert _admit(limits, "u1", _scope()).refusal is None
    assert _admit(limits, "u1", _scope()).refusal is not None


def test_a_session_is_forgotten_ttl_after_its_last_request() -> None:
    clock = FakeClock()
    limits = _limits(clock, sessions={"usd_per_session": 1.0, "ttl": 600, "downgrade_to": "group/cheap"})
    ticket = _admit(limits, "team-a", _scope("s1"))
    limits.settle(ticket, 10, 1.5)
    downgraded = _admit(limits, "team-a", _scope("s1"))
    assert downgraded.downgrade_to == "group/cheap" and downgraded.limit == "usd_per_session"
    assert _admit(limits, "team-a", _scope("s2")).downgrade_to is None
    assert _admit(limits, "team-b", _scope("s1")).downgrade_to is None  # sessions are per caller
    clock.advance(599)
    assert _admit(limits, "team-a", _scope("s1")).downgrade_to == "group/cheap"  # seen again: kept
    clock.advance(601)
    assert _admit(limits, "team-a", _scope("s1")).downgrade_to is None


def test_tallies_of_unnamed_callers_and_sessions_are_bounded_least_recently_seen_first() -> None:
    clock = FakeClock()
    limits = _limits(clock, callers={"team-a": {"rpm": 10}, "*": {"rpm": 10}}, max_callers=3)
    for name in ("u1", "u2", "u3", "u1", "u4"):
        _admit(limits, name, _scope())
    assert [name for name, _ in limits.tallies.others()] == ["u4", "u1", "u3"]  # u2 went first
    _admit(limits, "team-a", _scope())
    assert len(limits.tallies.others()) == 3  # a named caller is kept apart, for good


def test_requests_far_from_every_cap_share_a_ticket_and_are_each_counted() -> None:
    clock = FakeClock()
    limits = _limits(clock, callers={"*": {"rpm": 4, "tokens_per_day": 100}}, sessions={"tokens_per_session": 50})
    first = _admit(limits, "u1", _scope("s1"))
    second = _admit(limits, "u1", _scope("s1"))
    assert second is first  # nothing on it is the request's own
    assert _admit(limits, "u1", _scope("s2")) is not first  # another session: another ticket
    assert first.tally is not None and len(first.tally.starts) == 3  # every start counted against rpm
    limits.charge(first, 30, 0.0)
    limits.charge(second, 30, 0.0)
    assert first.tally.tokens == 60 and first.session is not None and first.session.tokens == 60
    past = _admit(limits, "u1", _scope("s1"))  # the session's 60 of 50: judged cap by cap again
    assert past is not first and past.refusal is not None and past.limit == "tokens_per_session"
    assert _admit(limits, "u1", _scope()).refusal is None  # the fourth start in the minute
    assert _admit(limits, "u1", _scope()).limit == "rpm"  # a fifth: past the caller's rpm


def test_a_forgotten_caller_or_expired_session_is_not_charged_through_a_shared_ticket() -> None:
    clock = FakeClock()
    limits = _limits(
        clock, callers={"*": {"tokens_per_day": 100}}, sessions={"tokens_per_session": 50, "ttl": 60}, max_callers=1
    )
    shared = _admit(limits, "u1", _scope("s1"))
    limits.charge(shared, 40, 0.0)
    _admit(limits, "u2", _scope())  # u1 is pushed out of the bounded table
    again = _admit(limits, "u1", _scope("s1"))
    assert again is not shared and again.tally is not None and again.tally.tokens == 0
    assert again.session is shared.session  # the session table had room: still seen, kept
    clock.advance(61)
    fresh = _admit(limits, "u1", _scope("s1"))
    assert fresh.session is not None and fresh.session is not again.session and fresh.session.tokens == 0


def test_usage_under_every_cap_yesterday_is_not_carried_into_today() -> None:
    clock = FakeClock(wall=10 * DAY + DAY - 60)  # 23:59 UTC
    limits = _limits(clock, callers={"team-a": {"tokens_per_day": 100}})
    limits.settle(_admit(limits, "team-a", _scope()), 90, 0.0)
    clock.advance(120)  # a new UTC day: judged under the cap without reading the day...
    ticket = _admit(limits, "team-a", _scope())
    assert ticket.refusal is None
    limits.settle(ticket, 20, 0.0)  # ...and charged on today's usage only
    assert ticket.tally is not None and ticket.tally.tokens == 20
    assert ticket.tally.day_ends == 12 * DAY  # the next charge rolls at the next midnight, not before
    limits.settle(ticket, 30, 0.0)
    assert ticket.tally.tokens == 50
    assert _admit(limits, "team-a", _scope()).refusal is None


def test_an_rpm_tally_keeps_only_the_last_minutes_starts() -> None:
    clock = FakeClock()
    limits = _limits(clock, callers={"*": {"rpm": 1000}})
    for _ in range(300):
        tally = _admit(limits, "u1", _scope()).tally
        clock.advance(1.0)
    assert tally is not None and len(tally.starts) <= 61  # the older starts went as later ones came


def test_the_caller_is_the_principals_text_or_anonymous() -> None:
    clock = FakeClock()
    limits = _limits(clock, callers={"anonymous": {"rpm": 1}, "42": {"rpm": 1}})
    assert _admit(limits, None, _scope()).label == "anonymous"
    assert _admit(limits, None, _scope()).refusal is not None
    assert _admit(limits, 42, _scope()).label == "42"
    assert _admit(limits, "someone", _scope()).label == "other"


class FakeLink:
    """The fleet link's surface a slice uses, with the store's answers given by the test."""

    def __init__(self) -> None:
        self.up = True
        self.asks: list[Callable[[Any], Awaitable[None]]] = []

    def ensure(self) -> None:
        pass

    def spawn(self, op: Callable[[Any], Awaitable[None]]) -> None:
        self.asks.append(op)


class FakeStore:
    """Answers the lease script's call with what the test says: ``[granted, level, used, frees_in]``."""

    def __init__(self, *answer: float) -> None:
        self.answer = answer
        self.calls: list[dict[str, Any]] = []

    def register_script(self, text: str) -> Callable[..., Awaitable[list[str]]]:
        async def run(keys: list[str], args: list[Any]) -> list[str]:
            self.calls.append({"keys": keys, "args": args})
            return [str(part) for part in self.answer]

        return run


@pytest.mark.anyio
async def test_a_fleet_slice_decides_once_known_and_an_empty_rpm_slice_waits_for_nothing() -> None:
    link = FakeLink()
    clock = FakeClock()
    tallies = SharedCallerTallies(link, "t", 100, 600.0, clock, clock.wall)  # type: ignore[arg-type]
    cap = Cap("rpm", 100.0, 100.0)
    tally = tallies.caller("team-a", True)
    assert tallies.level("c:team-a", tally, cap) == UNDER  # before any answer: this process's view
    store = FakeStore(2, UNDER, 40, 30)
    await link.asks.pop()(store)
    assert store.calls[0]["args"][:4] == ["window", 100.0, 100.0, 2.0]  # a 2 % slice of the cap
    assert "team-a" not in store.calls[0]["keys"][0]  # names never reach the store
    tallies.started("c:team-a", tally, cap)  # half the slice is gone: its refill is asked for
    assert len(link.asks) == 1
    assert tallies.level("c:team-a", tally, cap) == UNDER
    tallies.started("c:team-a", tally, cap)
    # The slice is empty, its refill on the way and the fleet (40 of 100 as last answered) under
    # the cap: still under, one request ahead of the grants.
    assert tallies.level("c:team-a", tally, cap) == UNDER
    tallies.started("c:team-a", tally, cap)
    assert tallies.level("c:team-a", tally, cap) == REFUSED  # no more than one ahead: never over
    await link.asks.pop()(FakeStore(2, UNDER, 43, 30))  # the refill pays the request ahead
    assert tallies.level("c:team-a", tally, cap) == UNDER
    await link.asks.pop()(FakeStore(0, REFUSED, 100, 12))  # (asked again at once: low again)
    assert tallies.level("c:team-a", tally, cap) == REFUSED
    assert tallies.used_by("c:team-a", tally, cap) == 100  # the fleet's count
    link.up = False  # the store is unreachable: this process's own view decides
    assert tallies.level("c:team-a", tally, cap) == UNDER


@pytest.mark.anyio
async def test_an_empty_rpm_slice_is_past_the_cap_only_when_the_fleets_count_is() -> None:
    link = FakeLink()
    clock = FakeClock()
    tallies = SharedCallerTallies(link, "t", 100, 600.0, clock, clock.wall)  # type: ignore[arg-type]
    cap = Cap("rpm", 20.0, 20.0)  # a slice of one request: every request empties it
    tally = tallies.caller("team-a", True)
    tallies.level("c:team-a", tally, cap)
    await link.asks.pop()(FakeStore(1, UNDER, 20, 30))  # the cap's last request granted (20 of 20)
    tallies.started("c:team-a", tally, cap)
    assert link.asks  # the refill is on its way
    assert tallies.level("c:team-a", tally, cap) == REFUSED  # 20 of 20 as last answered: at the cap
    await link.asks.pop()(FakeStore(0, REFUSED, 20, 12))
    assert tallies.level("c:team-a", tally, cap) == REFUSED  # nothing granted, nothing coming
    clock.advance(61)
    tallies.level("c:team-a", tally, cap)  # the window moved on: asked again
    await link.asks.pop()(FakeStore(1, UNDER, 1, 60))
    tallies.started("c:team-a", tally, cap)
    assert tallies.level("c:team-a", tally, cap) == UNDER  # 1 of 20: the refill is on its way
    tallies.started("c:team-a", tally, cap)
    assert tallies.level("c:team-a", tally, cap) == REFUSED  # one ahead already


@pytest.mark.anyio
async def test_a_fleet_usd_slice_takes_the_stores_level_and_carries_a_debt() -> None:
    link = FakeLink()
    clock = FakeClock()
    tallies = SharedCallerTallies(link, "t", 100, 600.0, clock, clock.wall)  # type: ignore[arg-type]
    cap = Cap("usd_per_day", 50.0, 100.0)
    tally = tallies.caller("team-a", True)
    tallies.level("c:team-a", tally, cap)
    await link.asks.pop()(FakeStore(1.0, UNDER, 1.0, DAY))
    tallies.charge(
        "c:team-a", tally, Table((cap,), "group/cheap", daily=True), 1000, 3.0
    )  # cost more than the slice held
    store = FakeStore(1.0, PAST, 53.0, DAY)
    await link.asks.pop()(store)
    assert store.calls[0]["args"][4] == 2.0  # the debt goes with the ask
    assert tallies.level("c:team-a", tally, cap) == PAST
