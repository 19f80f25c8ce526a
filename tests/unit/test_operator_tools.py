"""The pure parts of what operators see: rule explanations, recorded facts, breaker views, page
settings, and a browser's credentials.

``explain`` and ``replay`` must decide exactly as the router does: a rule's conditions agree with
:func:`matches` for any request, and recorded facts replay to the same rule decisions as the live
request they were taken from.
"""

from __future__ import annotations

import base64
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from asgi_router import RouterSettings
from asgi_router.config.resilience_settings import BreakerSettings
from asgi_router.config.rules_settings import RuleSettings
from asgi_router.inbound.auth import presented_key
from asgi_router.resilience.breaker import CircuitBreaker
from asgi_router.resilience.overview import BreakerStatus, breaker_status
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.recorded import FactRecorder, recorded_facts
from asgi_router.routing.rules import conditions, matches

_maybe = st.none() | st.booleans()
_tier = st.sampled_from(["gold", "silver"])
_rules = st.builds(
    RuleSettings,
    name=st.just("r"),
    route=st.just("p/m"),
    stream=_maybe,
    tools=_maybe,
    reasoning=_maybe,
    images=_maybe,
    min_prompt_tokens=st.none() | st.integers(0, 60),
    max_prompt_tokens=st.none() | st.integers(1, 60),
    headers=st.dictionaries(st.sampled_from(["x-tier", "X-Team"]), _tier, max_size=2),
    metadata=st.dictionaries(st.sampled_from(["team", "app"]), _tier, max_size=2),
)
_message = st.fixed_dictionaries(
    {"role": st.just("user"), "content": st.text(max_size=80) | st.just([{"type": "image_url", "image_url": {}}])}
)
_payloads = st.fixed_dictionaries(
    {"model": st.just("group/g"), "messages": st.lists(_message, max_size=3)},
    optional={
        "stream": st.booleans(),
        "tools": st.lists(st.just({"type": "function"}), max_size=1),
        "reasoning_effort": st.just("low"),
        "metadata": st.dictionaries(st.sampled_from(["team", "app", "user"]), _tier, max_size=3),
    },
)
_headers = st.lists(
    st.tuples(st.sampled_from([b"x-tier", b"x-team", b"authorization", b"x-other"]), _tier.map(str.encode)),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(rule=_rules, payload=_payloads, headers=_headers)
def test_a_rule_matches_exactly_when_each_of_its_explained_conditions_holds(
    rule: RuleSettings, payload: dict[str, Any], headers: list[tuple[bytes, bytes]]
) -> None:
    facts = RequestFacts(payload, headers)
    assert all(condition.held for condition in conditions(rule, facts)) == matches(rule, facts)


@settings(max_examples=300, deadline=None)
@given(rules=st.lists(_rules, min_size=1, max_size=3), payload=_payloads, headers=_headers)
def test_recorded_facts_replay_to_the_same_rule_decisions_as_the_live_request(
    rules: list[RuleSettings], payload: dict[str, Any], headers: list[tuple[bytes, bytes]]
) -> None:
    live = RequestFacts(payload, headers)
    recorded = FactRecorder(rules)(live)
    replayed = recorded_facts(recorded)
    for rule in rules:
        if "authorization" in rule.headers:
            continue  # a credential is never recorded: such a rule replays as if it were absent
        assert matches(rule, replayed) == matches(rule, live)


def test_recorded_facts_never_keep_a_credential_header() -> None:
    rules = [RuleSettings(name="r", route="p/m", headers={"Authorization": "Bearer k", "Cookie": "a", "x-tier": "g"})]
    facts = RequestFacts({}, [(b"authorization", b"Bearer k"), (b"cookie", b"a"), (b"x-tier", b"g")])
    assert FactRecorder(rules)(facts)["headers"] == {"x-tier": "g"}


def test_conditions_say_what_each_wants_and_what_the_request_has() -> None:
    rule = RuleSettings(name="r", route="p/m", min_prompt_tokens=100, headers={"x-tier": "gold"}, stream=True)
    facts = RequestFacts({"stream": True, "messages": [{"content": "x" * 40}]}, [])
    assert [(c.wants, c.found, c.held) for c in conditions(rule, facts)] == [
        ("stream = true", "stream = true", True),
        ("headers.x-tier = 'gold'", "x-tier absent", False),
        ("min_prompt_tokens = 100", "prompt_tokens = 14 (estimated)", False),
    ]


_POLICY = BreakerSettings(consecutive_failures=1, open_for=30)


@pytest.mark.parametrize(
    ("failures_at", "now", "expected"),
    [
        (None, 0.0, BreakerStatus("closed")),
        (10.0, 15.0, BreakerStatus("open", 25.0, 1, "failures", notes=("opened: failures",))),
        # due: the next call is its probe
        (10.0, 40.0, BreakerStatus("half_open", None, 1, "failures", notes=("opened: failures",))),
    ],
)
def test_a_breaker_is_reported_as_the_next_call_would_find_it(
    failures_at: float | None, now: float, expected: BreakerStatus
) -> None:
    breaker = CircuitBreaker(_POLICY)
    if failures_at is not None:
        breaker.record(failures_at, "failure")
    assert breaker_status(breaker.view() if failures_at is not None else None, now) == expected


def test_a_probing_breaker_is_half_open() -> None:
    breaker = CircuitBreaker(_POLICY)
    breaker.record(0.0, "failure")
    assert breaker.admit(31.0).probe
    assert breaker_status(breaker.view(), 31.0).phase == "half_open"


def test_a_recovering_breaker_is_reported_closed_with_its_ramp_in_words() -> None:
    breaker = CircuitBreaker(_POLICY)
    breaker.record(0.0, "failure")
    breaker.recover(30.0)
    status = breaker_status(breaker.view(), 31.0, _POLICY)
    assert (status.phase, status.share, status.notes) == ("closed", 0.1, ("recovering 10% → 50%",))
    later = breaker_status(breaker.view(), 40.0, _POLICY)  # ramp_step (10 s) passed: the next step
    assert (later.share, later.notes) == (0.5, ("recovering 50% → 100%",))
    assert breaker_status(breaker.view(), 50.0, _POLICY).notes == ()


def test_a_slow_opening_is_reported_with_its_p90_and_target_and_a_slow_mark_in_a_word() -> None:
    breaker = CircuitBreaker(_POLICY)
    breaker.trip(0.0, "slow", 4.1)
    status = breaker_status(breaker.view(), 1.0, _POLICY, target=2.0)
    assert (status.phase, status.cause, status.notes) == ("open", "slow", ("opened: slow (p90 4.1 s / target 2 s)",))
    assert breaker_status(None, 0.0, _POLICY, slow=True).notes == ("slow",)


def _settings(**fields: Any) -> RouterSettings:
    return RouterSettings(allow_unauthenticated=True, **fields)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"status_route": "/v1/models"}, "status_route '/v1/models' is already taken by models_route"),
        ({"metrics_route": "/v1/chat/completions"}, "metrics_route '/v1/chat/completions' is already taken by routes"),
        ({"status_route": "/s", "metrics_route": "/s.json"}, "status_route + '.json' '/s.json' is already taken"),
        ({"status_route": "/status/"}, "must not end with '/'"),
        ({"metrics_route": "metrics"}, "metrics_route 'metrics' must be a path starting with '/'"),
        ({"status_route": "/s?x=1"}, "no query"),
    ],
)
def test_page_routes_are_refused_when_they_cannot_be_served(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("?", r"\?").replace("+", r"\+").replace("[", r"\[")):
        _settings(**fields)


def test_an_empty_page_route_is_off_as_toml_and_the_environment_say_it() -> None:
    settings = _settings(metrics_route="", status_route="")
    assert (settings.metrics_route, settings.status_route, settings.metrics_public) == (None, None, False)


def test_metrics_route_is_refused_without_prometheus_client_with_the_command_that_installs_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    with pytest.raises(ValidationError, match=r"metrics_route needs prometheus_client.*asgi-router\[metrics\]"):
        _settings(metrics_route="/metrics")


def _basic(user_password: bytes) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", b"Basic " + base64.b64encode(user_password))]


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        (_basic(b"ops:the-key"), b"the-key"),
        (_basic(b":the-key"), b"the-key"),  # no user name
        (_basic(b"ops:pass:with:colons"), b"pass:with:colons"),
        (_basic(b"ops:"), None),  # no password
        (_basic(b"no-colon"), None),
        ([(b"authorization", b"Basic not*base64")], None),
        ([(b"authorization", b"Bearer the-key")], b"the-key"),
    ],
)
def test_a_browser_presents_its_key_as_the_password_of_basic_auth(
    headers: list[tuple[bytes, bytes]], key: bytes | None
) -> None:
    assert presented_key(headers, basic=True) == key
    if headers[0][1].startswith(b"Basic"):
        assert presented_key(headers) is None  # only where a browser is expected
