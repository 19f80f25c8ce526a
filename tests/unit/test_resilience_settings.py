"""Resilience settings: the documented defaults, TOML and environment spellings, validation."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from asgi_router.attempts.decisions import retries_for
from asgi_router.config.settings import RouterSettings
from asgi_router.routing.plan import Plan, Resolver

_PROVIDERS: dict[str, Any] = {"openai": {"base_url": "https://api.openai.com/v1"}}


@pytest.fixture(autouse=True)
def _clean_router_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ASGI_ROUTER_"):
            monkeypatch.delenv(name)


def test_defaults_are_the_documented_ones() -> None:
    settings = RouterSettings(allow_unauthenticated=True, providers=_PROVIDERS)
    assert settings.retries == 2
    assert (settings.backoff.base, settings.backoff.cap) == (0.25, 4.0)
    assert settings.max_retry_wait == 10.0
    assert settings.max_attempts == 10
    assert settings.deadline == 300.0
    assert (settings.retry_budget.ratio, settings.retry_budget.min_concurrent) == (0.2, 3)
    breaker = settings.breaker
    assert breaker.enabled
    assert (breaker.consecutive_failures, breaker.failure_rate, breaker.min_requests) == (5, 0.5, 20)
    assert (breaker.window, breaker.open_for, breaker.max_open_for) == (60.0, 30.0, 300.0)
    assert (breaker.half_open_probes, breaker.probe_timeout) == (1, 30.0)
    assert breaker.failure_reasons == {"connect_error", "timeout", "upstream_5xx", "stream_interrupted"}
    assert settings.retry_on == {"connect_error", "timeout", "rate_limited", "upstream_5xx", "stream_interrupted"}
    assert (settings.events.queue_size, settings.events.recent, settings.events.shutdown_grace) == (1024, 100, 2.0)
    provider = settings.providers["openai"]
    assert provider.max_concurrent is None
    assert provider.health is None


def test_toml_spells_every_resilience_key(tmp_path: Path) -> None:
    path = tmp_path / "router.toml"
    path.write_text(
        textwrap.dedent(
            """
            retries = 3
            max_retry_wait = 5
            deadline = 60
            max_attempts = 4
            retry_on = ["timeout", "upstream_5xx"]
            backoff = {base = 0.1, cap = 2}
            retry_budget = {ratio = 0.5, min_concurrent = 1}

            [breaker]
            consecutive_failures = 3
            open_for = 10
            failure_reasons = ["upstream_5xx"]

            [events]
            queue_size = 16
            recent = 5

            [providers.openai]
            base_url = "https://api.openai.com/v1"
            max_concurrent = 8
            health = {interval = 5, path = "/models"}

            [groups.g]
            members = ["openai/a", "openai/b"]
            retries = 1
            """
        ),
        encoding="utf-8",
    )
    settings = RouterSettings.from_toml(path, allow_unauthenticated=True)
    assert settings.retries == 3
    assert settings.max_retry_wait == 5
    assert settings.deadline == 60
    assert settings.max_attempts == 4
    assert settings.retry_on == {"timeout", "upstream_5xx"}
    assert settings.backoff.base == 0.1
    assert settings.retry_budget.ratio == 0.5
    assert settings.breaker.consecutive_failures == 3
    assert settings.breaker.open_for == 10
    assert settings.breaker.failure_reasons == {"upstream_5xx"}
    assert settings.events.queue_size == 16
    provider = settings.providers["openai"]
    assert provider.max_concurrent == 8
    assert provider.health is not None
    assert (provider.health.interval, provider.health.path) == (5, "/models")
    assert settings.groups["g"].retries == 1


def test_environment_sets_nested_breaker_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_BREAKER__OPEN_FOR", "12")
    monkeypatch.setenv("ASGI_ROUTER_RETRIES", "0")
    settings = RouterSettings(allow_unauthenticated=True, providers=_PROVIDERS)
    assert settings.breaker.open_for == 12
    assert settings.retries == 0


INVALID: list[tuple[dict[str, Any], str]] = [
    ({"retries": -1}, "retries"),
    ({"max_attempts": 0}, "max_attempts"),
    ({"deadline": 0}, "deadline"),
    ({"retry_on": ["bogus"]}, "retry_on"),
    ({"backoff": {"base": 1, "cap": 0.5}}, "cap"),
    ({"retry_budget": {"ratio": 1.5}}, "ratio"),
    ({"breaker": {"failure_rate": 0}}, "failure_rate"),
    ({"breaker": {"open_for": 60, "max_open_for": 30}}, "max_open_for"),
    ({"breaker": {"surprise": 1}}, "surprise"),
    ({"breaker": {"ramp": [0.5, 0.1]}}, "ramp must rise"),
    ({"breaker": {"ramp": [1.0]}}, "ramp.0"),
    ({"breaker": {"probe_interval": 0}}, "probe_interval"),
    ({"breaker": {"slow_factor": 1}}, "slow_factor"),
    ({"providers": {"openai": {**_PROVIDERS["openai"], "latency_target": 0}}}, "latency_target"),
    (
        {"groups": {"g": {"members": ["openai/a"]}, "h": {"members": [{"ref": "group/g", "latency_target": 1}]}}},
        "latency_target belong",
    ),
    ({"providers": {"openai": {**_PROVIDERS["openai"], "max_concurrent": 0}}}, "max_concurrent"),
    ({"providers": {"openai": {**_PROVIDERS["openai"], "health": {"path": "models"}}}}, "health.path"),
    ({"providers": {"openai": {**_PROVIDERS["openai"], "health": {"interval": 0}}}}, "interval"),
]


@pytest.mark.parametrize(("overrides", "named"), INVALID, ids=[named for _, named in INVALID])
def test_invalid_resilience_settings_are_refused_naming_the_key(overrides: dict[str, Any], named: str) -> None:
    kwargs: dict[str, Any] = {"providers": _PROVIDERS, **overrides}
    with pytest.raises(ValidationError) as info:
        RouterSettings(allow_unauthenticated=True, **kwargs)
    assert named in str(info.value)


def test_the_recovery_and_slowness_defaults_and_an_old_file_with_max_open_for_loads() -> None:
    settings = RouterSettings(
        allow_unauthenticated=True, providers=_PROVIDERS, breaker={"open_for": 30, "max_open_for": 300}
    )
    breaker = settings.breaker
    assert (breaker.ramp, breaker.ramp_successes, breaker.ramp_step, breaker.probe_interval) == ([0.1, 0.5], 5, 10, 5)
    assert (breaker.latency_target, breaker.slow_factor, breaker.slow_error_rate) == (None, 2.0, 0.05)


def _plan(settings: RouterSettings, ref: str) -> Plan:
    plan = Resolver(settings).resolve_string(ref)
    assert isinstance(plan, Plan)
    return plan


def test_retries_in_place_one_candidate_retries_several_fail_over_unless_the_group_says() -> None:
    settings = RouterSettings(
        allow_unauthenticated=True,
        providers=_PROVIDERS,
        retries=3,
        groups={
            "one": {"members": ["openai/a"]},
            "two": {"members": ["openai/a", "openai/b"]},
            "two_retrying": {"members": ["openai/a", "openai/b"], "retries": 1},
            "one_never": {"members": ["openai/a"], "retries": 0},
        },
    )
    assert retries_for(_plan(settings, "openai/gpt-4o"), settings.retries) == 3
    assert retries_for(_plan(settings, "group/one"), settings.retries) == 3
    assert retries_for(_plan(settings, "group/two"), settings.retries) == 0
    assert retries_for(_plan(settings, "group/two_retrying"), settings.retries) == 1
    assert retries_for(_plan(settings, "group/one_never"), settings.retries) == 0
