"""SharedState's time rules on a fake clock: no Redis, no sleeping.

What the fleet's store decides is pinned against a real redis-server (tests/test_fleet_state.py).
What this process decides from the store's answers is time logic of its own, pinned here one
rule at a time: an opening adopted from the fleet lasts its remaining time on this process's
clock, an older answer never moves a breaker backwards, and a process refused a probe slot asks
again only after ``CLAIM_PAUSE``. The store's answers are handed in as the link would hand them:
a published message (the link's ``on_message``), or a script's answer to a background write.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from asgi_router.config.resilience_settings import BreakerSettings
from asgi_router.fleet.shared_state import CLAIM_PAUSE, SharedState
from asgi_router.resilience.breaker import Phase

from ..doubles import FakeClock

pytestmark = pytest.mark.anyio

POLICY = BreakerSettings(consecutive_failures=3, open_for=0.3, half_open_probes=1, probe_timeout=5)
KEY = "mock/flaky"
#: Nothing listens there: the state is never connected, the tests hand it the store's answers.
NOWHERE = "redis://127.0.0.1:1/0"


def published(phase: str, age: float, version: int, open_for: float = POLICY.open_for) -> bytes:
    """A breaker change as the store publishes it: ``[key, phase, age, open_for, consecutive, version]``."""
    return json.dumps([KEY, phase, age, open_for, POLICY.consecutive_failures, version]).encode()


class ScriptAnswers:
    """Stands for the Redis client a background write runs on: its breaker script answers ``answer``."""

    def __init__(self, answer: list[Any]) -> None:
        self.answer = answer

    def register_script(self, script: str) -> Callable[..., Awaitable[list[Any]]]:
        async def run(keys: list[str], args: list[Any]) -> list[Any]:
            return self.answer

        return run


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def state(clock: FakeClock) -> SharedState:
    return SharedState(NOWHERE, "t", POLICY, clock=clock)


def test_an_opening_adopted_from_the_fleet_lasts_its_remaining_time_on_this_clock(
    state: SharedState, clock: FakeClock
) -> None:
    state._on_message(published("open", age=0.1, version=10))  # opened elsewhere 0.1 s ago
    assert not state.admit(KEY, POLICY, clock()).allowed
    clock.advance(0.19)
    assert not state.admit(KEY, POLICY, clock()).allowed  # 0.29 s of its 0.3 s
    clock.advance(0.02)
    admission = state.admit(KEY, POLICY, clock())  # the store is down: this process's own view decides
    assert admission.allowed and admission.probe


def test_an_older_answer_never_moves_a_breaker_backwards(state: SharedState) -> None:
    state._on_message(published("open", age=0.0, version=10))
    state._on_message(published("closed", age=0.0, version=9))  # overtaken on the way
    view = state.breaker(KEY)
    assert view is not None and view.phase is Phase.OPEN
    state._on_message(published("closed", age=0.0, version=11))
    view = state.breaker(KEY)
    assert view is not None and view.phase is Phase.CLOSED


def test_a_message_that_is_not_a_breaker_change_is_ignored(state: SharedState) -> None:
    state._on_message(b"not json")
    state._on_message(b'{"a": 1}')
    assert state.breaker(KEY) is None


async def test_a_process_refused_a_probe_slot_asks_again_only_after_the_claim_pause(
    state: SharedState, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[Callable[[Any], Awaitable[None]]] = []
    monkeypatch.setattr(state.link, "spawn", lambda op, **_: writes.append(op) or True)
    monkeypatch.setattr(state.link, "up", True)
    state._on_message(published("open", age=0.0, version=10))
    assert not state.admit(KEY, POLICY, clock()).allowed and not writes  # open: nothing to ask yet

    clock.advance(POLICY.open_for)
    assert not state.admit(KEY, POLICY, clock()).allowed
    assert len(writes) == 1  # time is up: one claim for a probe slot
    assert not state.admit(KEY, POLICY, clock()).allowed and len(writes) == 1  # not twice while it is asked
    # The slots are taken (another process probes): half-open, nothing granted.
    await writes.pop()(ScriptAnswers([b"half_open", "0.3", "0.3", 3, 11, 0]))

    clock.advance(CLAIM_PAUSE / 2)
    assert not state.admit(KEY, POLICY, clock()).allowed and not writes  # within the pause: no new ask
    clock.advance(CLAIM_PAUSE / 2 + 1e-9)  # (the epsilon: float sums of tenths fall just short)
    assert not state.admit(KEY, POLICY, clock()).allowed and len(writes) == 1  # asked again
    await writes.pop()(ScriptAnswers([b"half_open", "0.3", "0.3", 3, 12, 1]))  # granted

    admission = state.admit(KEY, POLICY, clock())
    assert admission.allowed and admission.probe
    assert not state.admit(KEY, POLICY, clock()).allowed  # one slot, one probe
