"""The hedging race (``attempts/hedging.py``) on its own: when a hedge starts, which racer wins.

The race only decides *when* to start a request's steps and which result wins; the steps are
stood in for here by a pass whose calls end when the loop's (fake) clock says so. The loop's
timers run on a fake clock, so ``hedge_after`` and each call's length are exact and take no
real time.
"""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from asgi_router.attempts.hedging import race
from asgi_router.attempts.steps import RequestAttempts
from asgi_router.core.candidate import Candidate
from asgi_router.resilience.stats import RoutingStats
from asgi_router.routing.policy import GroupPolicy

from ..doubles import FAKE_CLOCK_BACKEND
from ..waiting import eventually

pytestmark = pytest.mark.anyio

FIRST, SECOND = Candidate("p", "first"), Candidate("q", "second")


@pytest.fixture
def anyio_backend() -> object:
    """The loop's timers run on a fake clock: the race's waits take no real time."""
    return FAKE_CLOCK_BACKEND


def _now() -> float:
    return asyncio.get_running_loop().time()


class _Ready:
    """A candidate admitted to the race (hashable, as the race keys its racers by it)."""

    def __init__(self, candidate: Candidate) -> None:
        self.candidate = candidate
        self.cancel_reason = ""


class _State:
    hedge: str | None = None
    in_flight: object = None


class _Pass:
    """A request's steps: each candidate's call commits (its name) or fails (``None``) after
    its scripted seconds; what the race asked is written down."""

    def __init__(self, calls: dict[Candidate, tuple[float, bool]]) -> None:
        self._calls = calls
        self.state = _State()
        self.started: list[tuple[Candidate, float]] = []
        self.discarded: list[tuple[Candidate, str]] = []

    def candidates(self) -> list[Candidate]:
        return list(self._calls)

    def prepare(self, candidate: Candidate) -> _Ready:
        self.started.append((candidate, _now()))
        return _Ready(candidate)

    async def attempt(self, ready: _Ready) -> str | None:
        seconds, commits = self._calls[ready.candidate]
        await asyncio.sleep(seconds)
        return ready.candidate.model_id if commits else None

    def settle(self, ready: _Ready, result: str | None) -> str | None:
        return result

    def outcome(self, settled: str | None, result: str | None) -> str | None:
        return settled

    async def discard(self, ready: _Ready, result: object, reason: str) -> None:
        self.discarded.append((ready.candidate, reason))

    async def abandon(self, decided: object) -> None:
        pass


class _Credits:
    """The group's hedge credit: ``credits`` hedges to spend."""

    def __init__(self, credits: int) -> None:
        self.credits = credits

    def earn_hedge_credit(self, group: str, amount: float) -> None:
        pass

    def spend_hedge_credit(self, group: str) -> bool:
        if self.credits <= 0:
            return False
        self.credits -= 1
        return True


async def _race(steps: _Pass, credits: int = 1) -> object:
    policy = GroupPolicy("g", hedge_after=0.8)
    return await race(cast(RequestAttempts, steps), policy, cast(RoutingStats, _Credits(credits)), _now)


async def test_a_silent_first_candidate_gets_a_hedge_after_hedge_after_and_the_first_to_commit_wins() -> None:
    steps = _Pass({FIRST: (5.0, True), SECOND: (0.5, True)})
    start = _now()
    decided = await _race(steps)
    assert decided == "second"
    assert [(candidate, when - start) for candidate, when in steps.started] == [(FIRST, 0.0), (SECOND, 0.8)]
    assert steps.discarded == [(FIRST, "hedge_lost")]  # the loser is cancelled, evented as lost
    assert steps.state.hedge == "won"
    assert _now() - start == pytest.approx(1.3)  # the answer came with the hedge, not the first byte


async def test_a_first_candidate_that_commits_before_the_hedge_leaves_the_hedge_lost() -> None:
    steps = _Pass({FIRST: (1.0, True), SECOND: (5.0, True)})
    decided = await _race(steps)
    assert decided == "first"
    assert steps.discarded == [(SECOND, "hedge_lost")]
    assert steps.state.hedge == "lost"


async def test_a_first_candidate_that_answers_within_hedge_after_starts_no_hedge() -> None:
    steps = _Pass({FIRST: (0.5, True), SECOND: (0.1, True)})
    assert await _race(steps) == "first"
    assert [candidate for candidate, _ in steps.started] == [FIRST]
    assert steps.state.hedge is None


async def test_a_hedge_due_without_credit_is_denied_and_the_first_candidate_is_waited_for() -> None:
    steps = _Pass({FIRST: (3.0, True), SECOND: (0.1, True)})
    start = _now()
    assert await _race(steps, credits=0) == "first"
    assert [candidate for candidate, _ in steps.started] == [FIRST]
    assert steps.state.hedge == "denied"
    assert _now() - start == pytest.approx(3.0)


async def test_a_hedge_that_fails_lets_the_first_candidate_carry_on() -> None:
    steps = _Pass({FIRST: (3.0, True), SECOND: (0.5, False)})
    assert await _race(steps) == "first"
    assert steps.discarded == []
    assert steps.state.hedge == "failed"


async def test_a_client_that_leaves_mid_race_cancels_every_racer() -> None:
    steps = _Pass({FIRST: (5.0, True), SECOND: (5.0, True)})
    racing = asyncio.ensure_future(_race(steps))
    await eventually(lambda: len(steps.started) == 2)  # both racing (the hedge at 0.8, fake time)
    racing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await racing
    assert sorted(reason for _, reason in steps.discarded) == ["client_disconnected", "client_disconnected"]
    assert steps.state.hedge == "lost"
