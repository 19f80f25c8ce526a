"""The circuit-breaker state machine, driven by a table of (time, action, expected phase) steps.

Like resilience4j's ``CircuitBreakerStateMachineTest``: every transition is a row, time is
passed in (no clock, no sleeping), and every step asserts the phase it must leave behind.

Actions: ``ok``/``fail`` (a call admitted while closed reports), ``probe_ok``/``probe_fail``/
``probe_none`` (a probe reports success, failure, or nothing that counts), ``admit`` (must be
admitted as a plain call), ``probe`` (must be admitted as a probe), ``refuse`` (must be
refused), ``force`` (forced admission: must be a probe), ``trip``/``recover`` (health probes).
"""

from __future__ import annotations

from typing import Any

import pytest

from asgi_router.config.resilience_settings import BreakerSettings
from asgi_router.resilience.breaker import CircuitBreaker, Phase

C, O, H = Phase.CLOSED, Phase.OPEN, Phase.HALF_OPEN  # noqa: E741 - a table reads best in letters

Step = tuple[float, str, Phase]


def _run(steps: list[Step], **policy: Any) -> CircuitBreaker:
    breaker = CircuitBreaker(BreakerSettings(**policy))
    for number, (now, action, expected) in enumerate(steps):
        where = f"step {number}: {action} at t={now}"
        if action in ("ok", "fail"):
            breaker.record(now, "success" if action == "ok" else "failure")
        elif action.startswith("probe_"):
            verdict = {"probe_ok": "success", "probe_fail": "failure", "probe_none": "neutral"}[action]
            breaker.record(now, verdict, probe=True)  # type: ignore[arg-type]
        elif action in ("admit", "probe", "refuse", "force"):
            admission = breaker.admit(now, force=action == "force")
            assert admission.allowed is (action != "refuse"), where
            assert admission.probe is (action in ("probe", "force")), where
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
        "a failed probe re-opens it for twice as long",
        {},
        [*_opened(), (30, "probe", H), (31, "probe_fail", O), (90, "refuse", O), (91, "probe", H)],
    ),
    (
        "closing resets open_for to its base",
        {},
        [
            *_opened(),
            (30, "probe", H),
            (30, "probe_fail", O),
            (90, "probe", H),
            (90, "probe_ok", C),
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
        [*_opened(), (30, "probe", H), (30, "force", H), (31, "probe_fail", O), (90, "refuse", O)],
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
        "trip while open keeps it open a full open_for from the latest trip",
        {},
        [(0, "trip", O), (20, "trip", O), (49, "refuse", O), (50, "probe", H)],
    ),
    (
        "trip while half-open re-opens it for twice as long",
        {},
        [(0, "trip", O), (30, "probe", H), (30, "trip", O), (89, "refuse", O), (90, "probe", H)],
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


def test_open_for_doubles_on_each_reopen_up_to_max_open_for() -> None:
    breaker = _run(_opened())
    durations = [breaker.open_for]
    now = 0.0
    for _ in range(6):
        now += breaker.open_for
        assert breaker.admit(now).probe
        breaker.record(now, "failure", probe=True)
        durations.append(breaker.open_for)
    assert durations == [30, 60, 120, 240, 300, 300, 300]


def test_view_reports_phase_open_since_and_probes_in_flight() -> None:
    breaker = _run([*_opened(at=7), (37, "probe", H)])
    view = breaker.view()
    assert view.phase is H
    assert view.opened_at == 7
    assert view.open_for == 30
    assert view.probes_in_flight == 1
