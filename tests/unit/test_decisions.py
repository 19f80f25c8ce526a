"""The decision point (``asgi_router.attempts.decisions``), table by table, on a fake clock.

Every reason has a row (a test fails when ``Reason`` gains one without it): what the default
policy answers after a call that ended with it, with and without retries left, and how its
candidate's and its provider's breakers count it. Then each setting the docs describe
(``docs/resilience.md``, ``docs/errors-and-headers.md``) against the answers it changes:
``failover_on``, ``retry_on``, ``retries``, ``x-stainless-retry-count``, ``max_retry_wait``,
the ``deadline``, ``max_attempts``, the retry budget, ``breaker.failure_reasons``, the fatal
``router_error``, and the all-open rule; and every admission check, in its order; and the
caller's caps table (serve, downgrade, refuse).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

import pytest

from asgi_router.attempts.bookkeeping import Bookkeeper
from asgi_router.attempts.decisions import (
    COMMIT,
    EXHAUSTED,
    FAIL_OVER,
    FATAL,
    PASS_THROUGH,
    Decisions,
    FailOver,
    Next,
    Retry,
    retries_for,
)
from asgi_router.attempts.outcomes import Attempted, Committed, Failed, Refused
from asgi_router.attempts.request_answers import Continue, Downgrade, Refuse
from asgi_router.attempts.retry_state import RetryState
from asgi_router.attempts.wire_body import WireBody
from asgi_router.config.catalog_settings import ModelInfo
from asgi_router.config.settings import RouterSettings
from asgi_router.core.candidate import Candidate
from asgi_router.core.classify import DEFAULT_FAILOVER
from asgi_router.core.header_names import CLIENT_RETRY_COUNT
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import AttemptSummary
from asgi_router.core.skip import Skip
from asgi_router.protocols.responses_to_chat import STATEFUL
from asgi_router.resilience.breaker import Verdict
from asgi_router.resilience.caller_limits import Judged
from asgi_router.resilience.caller_tally import PAST, REFUSED, UNDER, Cap, Table
from asgi_router.resilience.gate import Gate, Lease
from asgi_router.resilience.retry import RetryPolicy
from asgi_router.resilience.router_state import InMemoryState
from asgi_router.resilience.stats import InMemoryStats, Limits
from asgi_router.routing.catalog import Catalog
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan
from asgi_router.routing.policy import GroupPolicy
from asgi_router.transports.provider import ProviderRuntime

from ..doubles import FakeClock

CANDIDATE = Candidate("p", "m")
KEY = CANDIDATE.key
EMPTY = RequestFacts({})


class RecordingState(InMemoryState):
    """The in-memory state, noting every breaker verdict the gate records."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.verdicts: list[tuple[str, Verdict]] = []

    def record(self, key: str, policy: Any, now: float, verdict: Verdict, *, probe: bool = False) -> None:
        self.verdicts.append((key, verdict))
        super().record(key, policy, now, verdict, probe=probe)


@dataclass
class Parts:
    decisions: Decisions
    book: Bookkeeper
    gate: Gate
    state: RecordingState
    clock: FakeClock
    stats: InMemoryStats
    settings: RouterSettings


def _parts(*, catalog: dict[str, ModelInfo] | None = None, **overrides: Any) -> Parts:
    provider: dict[str, Any] = {"base_url": "http://127.0.0.1:1"}
    if "max_concurrent" in overrides:
        provider["max_concurrent"] = overrides.pop("max_concurrent")
    settings = RouterSettings.model_validate({"allow_unauthenticated": True, "providers": {"p": provider}, **overrides})
    clock = FakeClock(100.0)
    state = RecordingState(clock)
    stats = InMemoryStats(clock)
    gate = Gate(settings, state, clock)
    book = Bookkeeper(stats, Catalog(catalog or {}), [KEY], [KEY], honoured=["p"], clock=clock)
    decisions = Decisions(book, gate, RetryPolicy.from_settings(settings), clock, lambda: 0.5)
    return Parts(decisions, book, gate, state, clock, stats, settings)


def _failed(reason: Reason, **fields: Any) -> Failed:
    return Failed(reason, fatal=reason == "router_error", **fields)


def _committed() -> Committed:
    return Committed(CANDIDATE, cast(Any, None), b"{}", cast(Any, None), 0.0, 0.0, 0.0, 1)


def _refused(reason: Reason = "client_error") -> Refused:
    return Refused(CANDIDATE, 400, [], b"{}", 1, reason)


# --- every reason has a row ----------------------------------------------------------------------

Kind = Literal["commit", "pass", "failure", "skip", "aborted"]


@dataclass(frozen=True)
class Row:
    """One reason under the default settings."""

    #: How the reason reaches the decision point: a committed call, a refusal passed through, a
    #: failed call, a skip at admission (never after a call) or an aborted call (the client left,
    #: a lost race: never asked what next).
    kind: Kind
    #: After a call with no retries left (every multi-member group by default).
    once: Next | None
    #: After a first call with ``retries = 2`` (a plan of one candidate by default).
    retried: type[Next] | Next | None
    #: The candidate breaker's verdict when a lease is finished with it.
    candidate: Verdict | None
    #: The provider breaker's verdict (``success`` when a response came: recorded on arrival).
    provider: Verdict | None
    #: Whether a response came before the attempt ended with it.
    responded: bool = True


ROWS: dict[Reason, Row] = {
    "served": Row("commit", COMMIT, COMMIT, "success", "success"),
    "client_error": Row("pass", PASS_THROUGH, PASS_THROUGH, "success", "success"),
    "connect_error": Row("failure", FAIL_OVER, Retry, "failure", "failure", responded=False),
    "timeout": Row("failure", FAIL_OVER, Retry, "failure", "failure", responded=False),
    "rate_limited": Row("failure", FAIL_OVER, Retry, "neutral", "success"),
    "upstream_5xx": Row("failure", FAIL_OVER, Retry, "failure", "success"),
    "stream_interrupted": Row("failure", FAIL_OVER, Retry, "failure", "success"),
    "auth_error": Row("failure", FAIL_OVER, FAIL_OVER, "neutral", "success"),
    "billing": Row("failure", FAIL_OVER, FAIL_OVER, "neutral", "success"),
    "model_not_found": Row("failure", FAIL_OVER, FAIL_OVER, "neutral", "success"),
    "context_window": Row("failure", FAIL_OVER, FAIL_OVER, "neutral", "success"),
    "guardrail_failed": Row("failure", FAIL_OVER, FAIL_OVER, "neutral", "success"),
    "router_error": Row("failure", FATAL, FATAL, "neutral", "neutral", responded=False),
    "client_disconnected": Row("aborted", None, None, "neutral", "neutral", responded=False),
    "hedge_lost": Row("aborted", None, None, "neutral", "neutral", responded=False),
    "provider_not_configured": Row("skip", None, None, None, None),
    "protocol_mismatch": Row("skip", None, None, None, None),
    "budget_exhausted": Row("skip", None, None, None, None),
    "over_budget": Row("skip", None, None, None, None),
    "circuit_open": Row("skip", None, None, None, None),
    "recovering": Row("skip", None, None, None, None),
    "saturated": Row("skip", None, None, None, None),
}


def test_every_reason_has_a_row_in_the_decision_table() -> None:
    # A reason added to asgi_router.core.reasons without deciding what it means fails here.
    assert set(get_args(Reason)) == set(ROWS)


def _result(reason: Reason, kind: Kind) -> Attempted:
    if kind == "commit":
        return _committed()
    if kind == "pass":
        return _refused(reason)
    return _failed(reason)


@pytest.mark.parametrize("reason", [reason for reason, row in ROWS.items() if row.once is not None])
def test_after_a_call_with_no_retries_left_the_default_policy_answers_per_reason(reason: Reason) -> None:
    row = ROWS[reason]
    parts = _parts()
    answer = parts.decisions.after(_result(reason, row.kind), DEFAULT_FAILOVER, 400.0, "p")
    assert answer == row.once


@pytest.mark.parametrize("reason", [reason for reason, row in ROWS.items() if row.retried is not None])
def test_after_a_first_call_with_retries_left_the_default_policy_answers_per_reason(reason: Reason) -> None:
    row = ROWS[reason]
    parts = _parts()
    answer = parts.decisions.after(_result(reason, row.kind), DEFAULT_FAILOVER, 400.0, "p", 0, 2)
    if isinstance(row.retried, type):
        assert isinstance(answer, row.retried)
    else:
        assert answer == row.retried


@pytest.mark.parametrize("reason", [reason for reason, row in ROWS.items() if row.candidate is not None])
def test_a_finished_lease_counts_on_both_breakers_per_reason(reason: Reason) -> None:
    row = ROWS[reason]
    parts = _parts()
    lease = parts.gate.enter(CANDIDATE)
    assert isinstance(lease, Lease)
    if row.responded:
        lease.responded()
    lease.finish(reason)
    assert parts.state.verdicts == [("p", row.provider), (KEY, row.candidate)]


@pytest.mark.parametrize("reason", [reason for reason, row in ROWS.items() if row.kind == "skip"])
def test_a_skip_reason_is_answered_at_admission_and_never_after_a_call(reason: Reason) -> None:
    answers = {answer.reason for answer in (_admission(case) for case in ADMISSIONS) if isinstance(answer, Skip)}
    assert reason in answers


# --- settings against the answers they change -----------------------------------------------------


@dataclass(frozen=True)
class AfterCase:
    name: str
    result: Attempted
    expected: Next | type[Next]
    settings: dict[str, Any]
    failover_on: frozenset[Reason] = DEFAULT_FAILOVER
    retry: int = 0
    retries: int = 2
    #: Seconds left of the request's deadline.
    left: float = 300.0


AFTER_CASES = [
    AfterCase("failover_on without the reason stops", _failed("timeout"), EXHAUSTED, {}, frozenset({"rate_limited"})),
    AfterCase("failover_on without it stops, retries or not", _failed("timeout"), EXHAUSTED, {}, frozenset(), 0, 0),
    AfterCase("a reason outside retry_on fails over", _failed("rate_limited"), FAIL_OVER, {"retry_on": ["timeout"]}),
    AfterCase("a reason in retry_on is retried", _failed("timeout"), Retry(0.125), {"retry_on": ["timeout"]}),
    AfterCase("retry_on may add auth_error", _failed("auth_error"), Retry, {"retry_on": ["auth_error"]}),
    AfterCase("no retries left fails over", _failed("timeout"), FAIL_OVER, {}, retry=2, retries=2),
    AfterCase("retries = 0 never retries", _failed("timeout"), FAIL_OVER, {}, retries=0),
    AfterCase("the backoff doubles per retry", _failed("timeout"), Retry(0.25), {}, retry=1),
    AfterCase(
        "the backoff stops at its cap",
        _failed("timeout"),
        Retry(0.5),
        {"backoff": {"base": 1, "cap": 1}},
        retry=5,
        retries=9,
    ),
    AfterCase("a hint replaces the backoff", _failed("rate_limited", retry_after=3.0), Retry(3.0), {}),
    AfterCase("a hint at max_retry_wait is waited", _failed("rate_limited", retry_after=10.0), Retry(10.0), {}),
    AfterCase("a hint over max_retry_wait fails over", _failed("rate_limited", retry_after=10.5), FAIL_OVER, {}),
    AfterCase(
        "max_retry_wait is a setting", _failed("rate_limited", retry_after=3.0), FAIL_OVER, {"max_retry_wait": 2}
    ),
    AfterCase("a wait past the deadline fails over", _failed("upstream_5xx", retry_after=3.0), FAIL_OVER, {}, left=2.0),
    AfterCase("a backoff past the deadline fails over", _failed("timeout"), FAIL_OVER, {}, left=0.1),
    AfterCase("router_error is fatal with retries left", _failed("router_error"), FATAL, {}),
    AfterCase(
        "router_error is fatal even if failed over on", _failed("router_error"), FATAL, {}, frozenset({"router_error"})
    ),
    AfterCase("a commit commits", _committed(), COMMIT, {}, frozenset()),
    AfterCase("a refusal is passed through", _refused(), PASS_THROUGH, {}),
    AfterCase("a refused rate limit is passed through", _refused("rate_limited"), PASS_THROUGH, {}, frozenset()),
]


@pytest.mark.parametrize("case", AFTER_CASES, ids=[case.name for case in AFTER_CASES])
def test_what_next_follows_the_settings(case: AfterCase) -> None:
    parts = _parts(**case.settings)
    answer = parts.decisions.after(
        case.result, case.failover_on, parts.clock.now + case.left, "p", case.retry, case.retries
    )
    if isinstance(case.expected, type):
        assert isinstance(answer, case.expected)
    else:
        assert answer == case.expected


def test_a_retry_takes_a_retry_budget_token_and_a_refused_one_fails_over_as_a_budget_exhausted_skip() -> None:
    parts = _parts(retry_budget={"ratio": 0.2, "min_concurrent": 1})
    first = parts.decisions.after(_failed("timeout"), DEFAULT_FAILOVER, 400.0, "p", 0, 2)
    assert isinstance(first, Retry)  # holds the one token min_concurrent allows
    second = parts.decisions.after(_failed("timeout"), DEFAULT_FAILOVER, 400.0, "p", 0, 2)
    assert second == FailOver(Skip("budget_exhausted"))
    parts.gate.end_retry("p")
    assert isinstance(parts.decisions.after(_failed("timeout"), DEFAULT_FAILOVER, 400.0, "p", 0, 2), Retry)


@pytest.mark.parametrize(
    ("reason", "failover_on", "passes"),
    [
        ("client_error", DEFAULT_FAILOVER, True),
        ("client_error", DEFAULT_FAILOVER | {"client_error"}, False),
        ("context_window", DEFAULT_FAILOVER, False),
        ("context_window", frozenset(), True),
        ("rate_limited", DEFAULT_FAILOVER, False),
        ("rate_limited", DEFAULT_FAILOVER - {"rate_limited"}, True),
        ("upstream_5xx", frozenset({"timeout"}), True),
        ("auth_error", DEFAULT_FAILOVER, False),
    ],
)
def test_an_answer_is_passed_through_exactly_when_its_reason_is_not_failed_over_on(
    reason: Reason, failover_on: frozenset[Reason], passes: bool
) -> None:
    assert Decisions.passes_through(reason, failover_on) is passes


@pytest.mark.parametrize(
    ("retries", "inbound", "expected"),
    [
        (2, [], 2),
        (0, [], 0),
        (2, [(CLIENT_RETRY_COUNT, b"0")], 0),
        (2, [(b"x-other", b"1"), (CLIENT_RETRY_COUNT, b"1")], 0),
        (0, [(CLIENT_RETRY_COUNT, b"0")], 0),
    ],
)
def test_a_client_that_retries_on_its_own_gets_no_retries_in_place(
    retries: int, inbound: list[tuple[bytes, bytes]], expected: int
) -> None:
    plan = Plan((CANDIDATE,), retries=retries)
    assert _parts().decisions.retries_in_place(plan, inbound) == expected


OTHER = Candidate("q", "m")


@pytest.mark.parametrize(
    ("attempts", "stopped", "skips", "expected"),
    [
        (0, False, [(5.0, CANDIDATE), (3.0, OTHER)], OTHER),  # the one that opened longest ago
        (0, False, [(3.0, CANDIDATE), (5.0, OTHER)], CANDIDATE),
        (1, False, [(3.0, CANDIDATE)], None),  # something was tried: breakers were not the only why
        (0, True, [(3.0, CANDIDATE)], None),  # max_attempts or the deadline stopped the walk
        (0, False, None, None),  # no breaker skipped anything
    ],
)
def test_the_all_open_rule_tries_the_oldest_open_candidate_only_when_breakers_alone_stopped_the_plan(
    attempts: int, stopped: bool, skips: list[tuple[float, Candidate]] | None, expected: Candidate | None
) -> None:
    assert _parts().decisions.all_open(attempts, stopped, skips) == expected


_STATEFUL_SKIP = AttemptSummary("chat/m", "protocol_mismatch", skipped=True, detail=STATEFUL)


@pytest.mark.parametrize(
    ("skipped", "expected"),
    [
        ([_STATEFUL_SKIP, AttemptSummary("claude/m", "protocol_mismatch", skipped=True, detail=STATEFUL)], True),
        ([_STATEFUL_SKIP, AttemptSummary("native/m", "upstream_5xx", status=503)], False),  # a native member tried
        ([_STATEFUL_SKIP, AttemptSummary("native/m", "provider_not_configured", skipped=True)], False),
        ([AttemptSummary("chat/m", "protocol_mismatch", skipped=True, detail="tools: ...")], False),
        ([], False),
        (None, False),
    ],
)
def test_only_a_plan_of_translated_members_skipped_for_previous_response_id_is_unsupported_on_member(
    skipped: list[AttemptSummary] | None, expected: bool
) -> None:
    assert Decisions.stateless_only(skipped) is expected


# --- admission, check by check in its order -------------------------------------------------------


@dataclass(frozen=True)
class AdmissionCase:
    name: str
    expected: Skip | None  # None: admitted
    settings: dict[str, Any]
    configured: bool = True
    no_provider: bool = False
    wire: str | None = None
    attempts: int = 0
    left: float = 300.0
    window: int | None = None
    spent: bool = False
    open_breaker: bool = False
    busy: bool = False
    force: bool = False
    #: Its provider's breaker closed after an outage and ramps (10 % first: this one is past it).
    recovering: bool = False
    #: Its own breaker was opened by the slowness rule.
    slow_open: bool = False


ADMISSIONS = [
    AdmissionCase("everything allows it", None, {}),
    AdmissionCase("no such provider", Skip("provider_not_configured"), {}, no_provider=True),
    AdmissionCase(
        "its key variable is unset",
        Skip("provider_not_configured", detail="I20A_UNSET_KEY is not set"),
        {},
        configured=False,
    ),
    AdmissionCase("no body for the route", Skip("protocol_mismatch", detail="no such route"), {}, wire="no such route"),
    AdmissionCase(
        "a translated Responses member, the request continuing a stored response",
        Skip("protocol_mismatch", detail=STATEFUL),
        {},
        wire=STATEFUL,
    ),
    AdmissionCase("max_attempts reached", Skip("budget_exhausted", stops=True), {"max_attempts": 2}, attempts=2),
    AdmissionCase("below max_attempts", None, {"max_attempts": 2}, attempts=1),
    AdmissionCase("the deadline passed", Skip("budget_exhausted", stops=True), {}, left=0.0),
    AdmissionCase("the catalog window is too small", Skip("context_window"), {}, window=10),
    AdmissionCase("the rpm budget is spent", Skip("over_budget", retry_after=60.0), {}, spent=True),
    AdmissionCase("a breaker is open", Skip("circuit_open", opened_at=100.0, cause="failures"), {}, open_breaker=True),
    AdmissionCase("a breaker opened slow", Skip("circuit_open", opened_at=100.0, cause="slow"), {}, slow_open=True),
    AdmissionCase("a breaker recovers: past its share", Skip("recovering", opened_at=130.0), {}, recovering=True),
    AdmissionCase("a forced candidate passes a ramp", None, {}, recovering=True, force=True),
    AdmissionCase("an empty ramp closes at once", None, {"breaker": {"ramp": []}}, recovering=True),
    AdmissionCase("a forced candidate passes an open breaker", None, {}, open_breaker=True, force=True),
    AdmissionCase("breakers off: an open one is not asked", None, {"breaker": {"enabled": False}}, open_breaker=True),
    AdmissionCase("its provider is at max_concurrent", Skip("saturated"), {"max_concurrent": 1}, busy=True),
    AdmissionCase("a key comes before the budgets", Skip("provider_not_configured"), {}, no_provider=True, left=0.0),
    AdmissionCase("the budgets come before the window", Skip("budget_exhausted", stops=True), {}, left=0.0, window=10),
    AdmissionCase("the window comes before the breaker", Skip("context_window"), {}, window=10, open_breaker=True),
    AdmissionCase(
        "the breaker comes before the cap",
        Skip("circuit_open", opened_at=100.0, cause="failures"),
        {"max_concurrent": 1},
        open_breaker=True,
        busy=True,
    ),
]


def _admission(case: AdmissionCase) -> Lease | Skip:
    catalog = {KEY: ModelInfo(context_window=case.window)} if case.window is not None else None
    parts = _parts(catalog=catalog, **case.settings)
    provider: ProviderRuntime | None = None
    if not case.no_provider:
        settings = parts.settings.providers["p"]
        if not case.configured:
            settings = settings.model_copy(update={"api_key_env": "I20A_UNSET_KEY"})
        provider = ProviderRuntime.build("p", settings, parts.settings.routes)
    policy = GroupPolicy("g", limits={KEY: Limits(rpm=1)}) if case.spent else None
    if case.spent:
        parts.stats.add_usage(KEY, 1, 0)
    if case.busy:
        assert isinstance(parts.gate.enter(CANDIDATE), Lease)
    if case.open_breaker:
        parts.gate.trip("p")
    if case.slow_open:
        parts.state.trip(KEY, parts.settings.breaker, parts.clock.now, "slow", 9.0)
    if case.recovering:
        parts.gate.trip("p")
        parts.clock.now += parts.settings.breaker.open_for
        parts.gate.recover("p")
    wire = case.wire if case.wire is not None else WireBody({"model": "x"})
    facts = RequestFacts({"messages": [{"role": "user", "content": "x" * 400}]})
    deadline = parts.clock.now + case.left
    return parts.decisions.admit(CANDIDATE, provider, wire, case.attempts, deadline, policy, facts, force=case.force)


def test_the_order_puts_slow_candidates_after_the_others_keeping_the_order_among_each() -> None:
    parts = _parts(breaker={"latency_target": 1.0})
    fast, slow, other = Candidate("p", "fast"), Candidate("p", "slow"), Candidate("p", "other")
    parts.state.mark_slow(slow.key, parts.clock.now + 60)
    assert list(parts.decisions.order([slow, fast, other])) == [fast, other, slow]
    assert list(_parts().decisions.order([slow, fast, other])) == [slow, fast, other]  # no target: as given


@pytest.mark.parametrize("case", ADMISSIONS, ids=[case.name for case in ADMISSIONS])
def test_admission_answers_each_check_in_its_order(case: AdmissionCase) -> None:
    answer = _admission(case)
    if case.expected is None:
        assert isinstance(answer, Lease)
    else:
        assert answer == case.expected


# --- the caller's caps ---------------------------------------------------------------------------

USD = Cap("usd_per_day", 10.0, 20.0)  # with downgrade_to and hard_limit 2
SOFT = Table((USD,), "group/cheap")
RPM = Cap("rpm", 5.0, 5.0)  # without downgrade_to: refusal starts at the cap
HARD = Table((RPM,), None)
TOKENS = Cap("tokens_per_session", 100.0, None)  # with downgrade_to and no hard_limit
SESSION = Table((TOKENS,), "group/session-cheap")


@pytest.mark.parametrize(
    ("judged", "expected"),
    [
        ((), None),  # every cap under its limit: served as asked
        (((USD, UNDER, SOFT),), None),
        (((USD, PAST, SOFT),), Downgrade(USD, "group/cheap")),
        (((USD, REFUSED, SOFT),), Refuse(USD, SOFT)),  # past hard_limit times the cap
        (((RPM, REFUSED, HARD),), Refuse(RPM, HARD)),
        (((RPM, PAST, HARD),), Refuse(RPM, HARD)),  # past, with nowhere to go
        (((TOKENS, PAST, SESSION),), Downgrade(TOKENS, "group/session-cheap")),
        (((USD, PAST, SOFT), (RPM, REFUSED, HARD)), Refuse(RPM, HARD)),  # a refusal wins
        (((USD, PAST, SOFT), (TOKENS, PAST, SESSION)), Downgrade(USD, "group/cheap")),  # the first names it
        (((USD, UNDER, SOFT), (TOKENS, PAST, SESSION)), Downgrade(TOKENS, "group/session-cheap")),
    ],
)
def test_the_callers_caps_serve_downgrade_or_refuse_as_the_table_says(
    judged: tuple[Judged, ...], expected: Downgrade | Refuse | None
) -> None:
    assert _parts().decisions.caller(judged) == expected


# --- the request's retry state: every verdict, with what it implies -------------------------------


def test_a_429_marks_the_member_over_budget_until_its_retry_after_whatever_comes_next() -> None:
    parts = _parts()
    retry = RetryState(parts.decisions, Plan((CANDIDATE,), retries=0), [], 400.0)
    answer = retry.after(_failed("rate_limited", retry_after=3.0), DEFAULT_FAILOVER, CANDIDATE, False)
    assert answer == FAIL_OVER
    assert parts.book.over_stated_limit(KEY, RequestFacts({}, [])) == pytest.approx(3.0)
    parts.clock.now += 3.0
    assert parts.book.over_stated_limit(KEY, RequestFacts({}, [])) is None


def test_the_retry_state_retries_a_candidate_in_place_as_often_as_its_plan_allows_and_gives_tokens_back() -> None:
    parts = _parts(retry_budget={"ratio": 0.2, "min_concurrent": 1})
    retry = RetryState(parts.decisions, Plan((CANDIDATE,), retries=1), [], 400.0)
    retry.retrying(CANDIDATE)
    assert isinstance(retry.after(_failed("timeout"), DEFAULT_FAILOVER, CANDIDATE, True), Retry)
    assert not parts.gate.begin_retry("p")  # the retry holds the one token min_concurrent allows
    retry.retry_over()
    assert retry.after(_failed("timeout"), DEFAULT_FAILOVER, CANDIDATE, True) == FAIL_OVER  # one retry
    assert parts.gate.begin_retry("p")  # given back


def test_the_retry_state_gives_a_client_that_retries_on_its_own_no_retries_in_place() -> None:
    retry = RetryState(_parts().decisions, Plan((CANDIDATE,), retries=2), [(CLIENT_RETRY_COUNT, b"0")], 400.0)
    assert retry.retries == 0
    assert retry.after(_failed("timeout"), DEFAULT_FAILOVER, CANDIDATE, True) == FAIL_OVER


@pytest.mark.parametrize(
    ("in_place", "replanned", "expected"),
    [
        (False, False, CANDIDATE),  # skipped for its open breaker: the all-open rule's choice
        (True, False, None),  # skipped while retried in place: not a breaker-only pass
        (False, True, None),  # planned again: a fresh pass has skipped nothing yet
    ],
)
def test_the_retry_state_keeps_open_breaker_skips_of_its_pass_for_the_all_open_rule(
    in_place: bool, replanned: bool, expected: Candidate | None
) -> None:
    parts = _parts()
    parts.gate.trip("p")
    plan = Plan((CANDIDATE,))
    retry = RetryState(parts.decisions, plan, [], 400.0, EMPTY)
    provider = ProviderRuntime.build("p", parts.settings.providers["p"], parts.settings.routes)
    skipped = retry.admit(CANDIDATE, provider, WireBody({"model": "x"}), 0, in_place=in_place)
    assert skipped == Skip("circuit_open", opened_at=100.0, cause="failures")
    if replanned:
        retry.replanned(plan)
    assert retry.all_open(0, False) == expected
    assert retry.all_open(1, False) is None  # something was tried: breakers were not the only why


OTHER_RESUMABLE = Candidate("q", "m")


@pytest.mark.parametrize(
    ("reason", "total", "resumes", "expected"),
    [
        ("stream_interrupted", False, 0, Continue(((CANDIDATE, "prefill"), (OTHER_RESUMABLE, "prefix")))),
        ("timeout", False, 0, Continue(((OTHER_RESUMABLE, "prefix"),))),
        ("timeout", True, 0, None),  # a stall past the attempt's total: no continuation runs past it
        ("stream_interrupted", True, 0, None),
        ("stream_interrupted", False, 2, None),  # max_resumes spent
        ("upstream_5xx", False, 0, None),  # neither a cut nor a stall
    ],
)
def test_after_a_break_the_retry_state_answers_as_the_resume_table_says(
    reason: Reason, total: bool, resumes: int, expected: Continue | None
) -> None:
    retry = RetryState(_parts().decisions, Plan((CANDIDATE, OTHER_RESUMABLE)), [])
    for _ in range(resumes):
        retry.resumed()
    candidates, modes = (CANDIDATE, OTHER_RESUMABLE), ("prefill", "prefix")
    assert retry.may_continue(reason, total, 2) is (expected is not None)
    assert retry.after_break(candidates, modes, CANDIDATE, reason, total, 2) == expected  # type: ignore[arg-type]
    assert retry.take_broken() == (CANDIDATE.key,)  # whatever the verdict, the break is the record's
    assert retry.take_broken() == ()  # each once


@pytest.mark.parametrize(
    ("breaks", "silence", "expected"),
    [
        # a cut after a short silence: the same candidate first
        ((CANDIDATE,), 0.1, [CANDIDATE, OTHER_RESUMABLE]),
        # a cut after half the idle timeout (2 s) without a byte: a stall, the next one (not it)
        ((CANDIDATE,), 1.0, [OTHER_RESUMABLE]),
        # its second break: it broke before in the request, so it is asked after the others
        ((CANDIDATE, CANDIDATE), 0.1, [OTHER_RESUMABLE, CANDIDATE]),
        # another broke before: that one goes last, the one that just broke is asked first
        ((OTHER_RESUMABLE, CANDIDATE), 0.1, [CANDIDATE, OTHER_RESUMABLE]),
    ],
)
def test_after_repeated_breaks_and_silences_the_retry_state_asks_those_that_broke_last(
    breaks: tuple[Candidate, ...], silence: float, expected: list[Candidate]
) -> None:
    retry = RetryState(_parts().decisions, Plan((CANDIDATE, OTHER_RESUMABLE)), [])
    candidates, modes = (CANDIDATE, OTHER_RESUMABLE), ("prefill", "prefix")
    for broken in breaks[:-1]:
        retry.after_break(candidates, modes, broken, "stream_interrupted", False, 5, 0.0, 2.0)  # type: ignore[arg-type]
    answer = retry.after_break(candidates, modes, breaks[-1], "stream_interrupted", False, 5, silence, 2.0)  # type: ignore[arg-type]
    assert answer is not None
    assert [candidate for candidate, _ in answer.order] == expected


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        (Plan((CANDIDATE,)), 2),  # a direct ref: the router's retries
        (Plan((CANDIDATE,), policy=GroupPolicy("g", size=1)), 2),  # a group of one member
        (Plan((CANDIDATE, OTHER), policy=GroupPolicy("g", size=2)), 0),  # a longer group fails over
        (Plan((CANDIDATE,), policy=GroupPolicy("g", size=2)), 0),  # even when its plan has one left
        (Plan((CANDIDATE, OTHER), policy=GroupPolicy("g", size=2), retries=1), 1),  # the group's own
        (Plan((CANDIDATE,), retries=0), 0),
    ],
)
def test_retries_in_place_are_the_groups_own_else_the_routers_for_one_candidate_else_none(
    plan: Plan, expected: int
) -> None:
    assert retries_for(plan, 2) == expected
    assert _parts().decisions.retries_in_place(plan, []) == expected
