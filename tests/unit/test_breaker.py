"""The circuit-breaker state machine, driven by a table of (time, action, expected phase) steps.

Like resilience4j's ``CircuitBreakerStateMachineTest``: every transition is a row, time is
passed in (no clock, no sleeping), and every step asserts the phase it must leave behind.

Actions: ``ok``/``fail`` (a call admitted while closed reports), ``probe_ok``/``probe_fail``/
``probe_none`` (a probe reports success, failure, or nothing that counts), ``admit`` (must be
admitted as a plain call), ``probe`` (must be admitted as a probe), ``refuse`` (must be
refused), ``recovering`` (must be refused for the ramp), ``force`` (forced admission: must be a
probe), ``trip``/``recover`` (health probes). Rows that are not about the ramp run without one
(``ramp = []``: a successful probe closes at once); the ramp has its own tests below.
"""

from __future__ import annotations

from typing import Any

import pytest

from asgi_router.config.resilience_settings import BreakerSettings
from asgi_router.resilience.breaker import CircuitBreaker, Phase

C, O, H = Phase.CLOSED, Phase.OPEN, Phase.HALF_OPEN  # noqa: E741 - a table reads best in letters

Step = tuple[float, str, Phase]


def _run(steps: list[Step], **policy: Any) -> CircuitBreaker:
    breaker = CircuitBreaker(BreakerSettings(**{"ramp": [], **policy}))
    for number, (now, action, expected) in enumerate(steps):
        where = f"step {number}: {action} at t={now}"
        if action in ("ok", "fail"):
            breaker.record(now, "success" if action == "ok" else "failure")
        elif action.startswith("probe_"):
            verdict = {"probe_ok": "success", "probe_fail": "failure", "probe_none": "neutral"}[action]
            breaker.record(now, verdict, probe=True)  # type: ignore[arg-type]
        elif action in ("admit", "probe", "refuse", "recovering", "force"):
            admission = breaker.admit(now, force=action == "force")
            assert admission.allowed is (action not in ("refuse", "recovering")), where
            assert admission.probe is (action in ("probe", "force")), where
            assert admission.recovering is (action == "recovering"), where
            if action == "refuse":
                assert admission.opened_at == breaker.opened_at, where
        elif action == "trip":
            breaker.trip(now)
        elif action == "recover":
            breaker.recover(now)
        else:  # pragma: no cover - a typo in the table
            raise AssertionError(f"unknown action {action!r}")
        assert breaker.phase is expected, where
    return breaker


def _opened(at: float = 0.0, failures: int = 5) -> list[Step]:
    """Steps that open a default breaker at ``at`` with consecutive failures."""
    return [(at, "fail", C)] * (failures - 1) + [(at, "fail", O)]


TRANSITIONS: list[tuple[str, dict[str, Any], list[Step]]] = [
    ("closed admits calls and stays closed on successes", {}, [(0, "admit", C)] + [(0, "ok", C)] * 50),
    ("closed opens on the fifth consecutive failure", {}, [(0, "fail", C)] * 4 + [(0, "fail", O)]),
    (
        "a success resets the consecutive count",
        {},
        [(0, "fail", C)] * 4 + [(0, "ok", C)] + [(0, "fail", C)] * 4 + [(0, "fail", O)],
    ),
    (
        "failure rate at the threshold opens once the window holds min_requests",
        {"consecutive_failures": 100},
        [(0, "ok", C), (0, "fail", C)] * 9 + [(0, "ok", C), (0, "fail", O)],
    ),
    (
        "failure rate below the threshold keeps it closed",
        {"consecutive_failures": 100},
        [(0, "ok", C), (0, "ok", C), (0, "fail", C)] * 20,
    ),
    (
        "calls older than the window no longer count toward the rate",
        {"consecutive_failures": 100},
        [(0, "ok", C), (0, "fail", C)] * 9 + [(61, "ok", C), (61, "fail", C)],
    ),
    (
        "open refuses until open_for has passed, then admits one probe",
        {},
        [*_opened(), (29.9, "refuse", O), (30, "probe", H), (30, "refuse", H)],
    ),
    (
        "a successful probe closes it and resets the failure count",
        {},
        [*_opened(), (30, "probe", H), (31, "probe_ok", C), (31, "admit", C)] + [(31, "fail", C)] * 4,
    ),
    (
        "a failed probe re-opens it for probe_interval",
        {},
        [*_opened(), (30, "probe", H), (31, "probe_fail", O), (35.9, "refuse", O), (36, "probe", H)],
    ),
    (
        "a failed probe waits probe_interval, however large max_open_for is",
        {"probe_interval": 2, "max_open_for": 3000},
        [*_opened(), (30, "probe", H), (30, "probe_fail", O), (31.9, "refuse", O), (32, "probe", H)],
    ),
    (
        "closing resets open_for to its base",
        {},
        [
            *_opened(),
            (30, "probe", H),
            (30, "probe_fail", O),
            (35, "probe", H),
            (35, "probe_ok", C),
            *_opened(100),
            (129, "refuse", O),
            (130, "probe", H),
        ],
    ),
    (
        "a probe that never reports frees its slot after probe_timeout",
        {"probe_timeout": 10},
        [*_opened(), (30, "probe", H), (39.9, "refuse", H), (40, "probe", H), (41, "probe_ok", C)],
    ),
    (
        "a late result of a call admitted while closed does not move a half-open breaker",
        {},
        [*_opened(), (30, "probe", H), (30, "fail", H), (30, "ok", H), (30, "refuse", H), (31, "probe_ok", C)],
    ),
    (
        "results that arrive while open change nothing",
        {},
        [*_opened(), (1, "ok", O), (2, "fail", O), (3, "probe_ok", O), (29, "refuse", O), (30, "probe", H)],
    ),
    (
        "a probe that counts neither way frees its slot and stays half-open",
        {},
        [*_opened(), (30, "probe", H), (31, "probe_none", H), (31, "probe", H), (32, "probe_ok", C)],
    ),
    (
        "forced admission probes an open breaker before open_for; success closes it",
        {},
        [*_opened(), (1, "force", H), (1, "force", H), (2, "probe_ok", C)],
    ),
    (
        "forced admission probes past a full half-open; its failure re-opens it",
        {},
        [*_opened(), (30, "probe", H), (30, "force", H), (31, "probe_fail", O), (35.9, "refuse", O)],
    ),
    (
        "half_open_probes admits that many probes and needs that many successes",
        {"half_open_probes": 2},
        [
            *_opened(),
            (30, "probe", H),
            (30, "probe", H),
            (30, "refuse", H),
            (31, "probe_ok", H),
            (31, "probe", H),
            (32, "probe_ok", C),
        ],
    ),
    (
        "one failed probe among several re-opens it",
        {"half_open_probes": 2},
        [*_opened(), (30, "probe", H), (30, "probe", H), (31, "probe_ok", H), (31, "probe_fail", O)],
    ),
    ("trip opens a closed breaker", {}, [(0, "trip", O), (29, "refuse", O), (30, "probe", H)]),
    (
        "trip while open does not lengthen the wait; once due it counts as a failed probe",
        {},
        [(0, "trip", O), (20, "trip", O), (29.9, "refuse", O), (30, "trip", O), (34.9, "refuse", O), (35, "probe", H)],
    ),
    (
        "trip while half-open re-opens it for probe_interval",
        {},
        [(0, "trip", O), (30, "probe", H), (30, "trip", O), (34.9, "refuse", O), (35, "probe", H)],
    ),
    (
        "recover closes a half-open breaker",
        {},
        [(0, "trip", O), (30, "probe", H), (30, "recover", C), (30, "admit", C)],
    ),
    (
        "recover closes an open breaker once open_for has passed, not before",
        {},
        [(0, "trip", O), (10, "recover", O), (30, "recover", C)],
    ),
]


@pytest.mark.parametrize(("policy", "steps"), [(p, s) for _, p, s in TRANSITIONS], ids=[n for n, _, _ in TRANSITIONS])
def test_breaker_transition(policy: dict[str, Any], steps: list[Step]) -> None:
    _run(steps, **policy)


def test_failed_probes_wait_probe_interval_never_longer_at_the_defaults() -> None:
    breaker = _run(_opened())
    durations = [breaker.open_for]
    now = 0.0
    for _ in range(6):
        now += breaker.open_for
        assert breaker.admit(now).probe
        breaker.record(now, "failure", probe=True)
        durations.append(breaker.open_for)
    assert durations == [30, 5, 5, 5, 5, 5, 5]


def test_view_reports_phase_open_since_and_probes_in_flight() -> None:
    breaker = _run([*_opened(at=7), (37, "probe", H)])
    view = breaker.view()
    assert view.phase is H
    assert view.opened_at == 7
    assert view.open_for == 30
    assert view.probes_in_flight == 1


# --- the ramp: a breaker closed after an outage takes its traffic back in steps ----------------


def _recovered(**policy: Any) -> CircuitBreaker:
    """A breaker with the given policy (default ramp) that opened at 0 and closed on a probe at 30."""
    breaker = CircuitBreaker(BreakerSettings(**policy))
    for _ in range(5):
        breaker.record(0, "failure")
    assert breaker.admit(30).probe
    breaker.record(30, "success", probe=True)
    assert breaker.phase is C
    return breaker


def _admitted(breaker: CircuitBreaker, now: float, asks: int) -> int:
    return sum(breaker.admit(now).allowed for _ in range(asks))


def test_a_recovered_breaker_takes_a_tenth_then_half_then_all_as_successes_come() -> None:
    breaker = _recovered()
    assert _admitted(breaker, 30, 100) == 10
    for _ in range(5):
        breaker.record(31, "success")
    assert _admitted(breaker, 31, 100) == 50
    for _ in range(5):
        breaker.record(32, "success")
    assert _admitted(breaker, 32, 100) == 100
    assert breaker.view().ramp_step is None


def test_a_ramp_refusal_says_recovering_and_when_the_ramp_began() -> None:
    breaker = _recovered()
    refused = breaker.admit(30)
    assert not refused.allowed and refused.recovering and refused.opened_at == 30
    assert breaker.phase is C  # the gauges' "closed": the ramp is its own gauge


def test_a_ramp_advances_after_ramp_step_seconds_without_traffic() -> None:
    breaker = _recovered(ramp_step=10)
    assert breaker.share(39.9) == 0.1
    assert breaker.share(40) == 0.5
    assert breaker.share(50) == 1.0
    assert breaker.admit(50) is not None and breaker.view().ramp_step is None


def test_successes_must_come_in_a_row_to_advance_a_step() -> None:
    breaker = _recovered(ramp_successes=3)
    for verdict in ("success", "success", "neutral", "success"):
        breaker.record(31, verdict)  # type: ignore[arg-type]
    assert breaker.share(31) == 0.5  # neutral results neither count nor break the run


def test_a_failure_during_the_ramp_reopens_it_for_probe_interval() -> None:
    breaker = _recovered()
    breaker.record(31, "success")
    breaker.record(32, "failure")
    assert breaker.phase is O
    assert not breaker.admit(36.9).allowed
    assert breaker.admit(37).probe
    breaker.record(37, "success", probe=True)
    assert breaker.share(37) == 0.1  # closed again: the ramp starts from its first step


def test_forced_admission_passes_a_ramp() -> None:
    breaker = _recovered()
    assert all(breaker.admit(30, force=True).allowed for _ in range(20))


def test_a_health_probe_that_closes_the_breaker_starts_the_ramp() -> None:
    breaker = CircuitBreaker(BreakerSettings())
    breaker.trip(0)
    breaker.recover(30)
    assert breaker.phase is C and breaker.share(30) == 0.1


def test_an_empty_ramp_closes_at_once() -> None:
    breaker = _recovered(ramp=[])
    assert _admitted(breaker, 30, 10) == 10


def test_a_ramp_of_one_step_goes_from_that_share_to_all() -> None:
    breaker = _recovered(ramp=[0.25], ramp_successes=1)
    assert _admitted(breaker, 30, 8) == 2
    breaker.record(30, "success")
    assert _admitted(breaker, 30, 8) == 8


def test_a_slow_trip_records_its_cause_and_p90_until_the_breaker_closes() -> None:
    breaker = CircuitBreaker(BreakerSettings(ramp=[]))
    breaker.trip(0, "slow", 4.1)
    view = breaker.view()
    assert (view.phase, view.cause, view.p90) == (O, "slow", 4.1)
    refused = breaker.admit(1)
    assert refused.cause == "slow" and not refused.recovering
    assert breaker.admit(30).probe
    breaker.record(30, "failure", probe=True)
    assert breaker.view().cause == "slow"  # a failed probe keeps the cause it opened for
    assert breaker.admit(35).probe
    breaker.record(35, "success", probe=True)
    assert (breaker.view().cause, breaker.view().p90) == ("failures", None)
