"""The shared-state settings, the rotation seam a shared counter plugs into, and the pieces of
the fleet state that need no Redis: adopting a breaker decided elsewhere, budgets by member."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from asgi_router import RouterSettings
from asgi_router.config.config_error import ConfigError
from asgi_router.config.resilience_settings import BreakerSettings
from asgi_router.fleet.state_factory import budgets_of, make_state
from asgi_router.observability.redaction import secrets_of
from asgi_router.resilience.breaker import CircuitBreaker, Phase
from asgi_router.resilience.router_state import InMemoryState
from asgi_router.resilience.stats import Limits
from asgi_router.routing.plan import Plan, ResolveError, Resolver

PASSWORD = "Zq9-state-url-password"
_PROVIDERS: dict[str, Any] = {"a": {"base_url": "http://127.0.0.1:1/v1"}, "b": {"base_url": "http://127.0.0.1:2/v1"}}


@pytest.fixture(autouse=True)
def _clean_router_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ASGI_ROUTER_"):
            monkeypatch.delenv(name)


def _settings(**kwargs: Any) -> RouterSettings:
    return RouterSettings(allow_unauthenticated=True, providers=_PROVIDERS, **kwargs)


# --- settings -----------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [None, "memory://", "MEMORY://"])
def test_no_state_url_or_memory_keeps_the_state_in_this_process(url: str | None) -> None:
    settings = _settings(state_url=url)
    assert settings.state_url is None
    assert type(make_state(settings)) is InMemoryState


@pytest.mark.parametrize(
    "url",
    [
        f"redis://user:{PASSWORD}@127.0.0.1:6379/0",
        f"rediss://:{PASSWORD}@redis.example:6380/1",
        "unix:///run/redis.sock?db=2",
        f"redis+sentinel://user:{PASSWORD}@s1:26379,s2:26379/primary/0",
    ],
)
def test_redis_urls_are_accepted_and_kept_secret(url: str) -> None:
    settings = _settings(state_url=url)
    assert settings.state_url is not None and settings.state_url.get_secret_value() == url
    assert PASSWORD not in repr(settings) and PASSWORD not in str(settings.model_dump())


def test_state_url_and_prefix_come_from_the_environment_under_their_pinned_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ASGI_ROUTER_STATE_URL", "redis://127.0.0.1:6379/0")
    monkeypatch.setenv("ASGI_ROUTER_STATE_KEY_PREFIX", "gateway-b")
    settings = _settings()
    assert settings.state_url is not None
    assert settings.state_url.get_secret_value() == "redis://127.0.0.1:6379/0"
    assert settings.state_key_prefix == "gateway-b"


def test_the_key_prefix_defaults_to_asgi_router() -> None:
    assert _settings().state_key_prefix == "asgi_router"


@pytest.mark.parametrize("prefix", ["", "a:b", "two words"])
def test_a_prefix_that_is_not_one_key_segment_is_refused(prefix: str) -> None:
    with pytest.raises(ValueError, match="state_key_prefix"):
        _settings(state_key_prefix=prefix)


def test_an_unknown_scheme_is_refused_naming_the_scheme_never_the_password() -> None:
    with pytest.raises(ValueError, match="scheme 'http'") as refused:
        _settings(state_url=f"http://user:{PASSWORD}@host/0")
    assert PASSWORD not in str(refused.value)


def test_a_redis_url_without_the_redis_package_is_refused_at_load_saying_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "redis" else real(name, *a))
    config = tmp_path / "router.toml"
    config.write_text(f'allow_unauthenticated = true\nstate_url = "redis://u:{PASSWORD}@127.0.0.1:6379/0"\n')
    with pytest.raises(ConfigError, match=r"asgi-router\[redis\]") as refused:
        RouterSettings.from_toml(config)
    assert PASSWORD not in str(refused.value)


# --- the rotation seam ----------------------------------------------------------------------------


class _FleetCounter(InMemoryState):
    """An in-memory state whose rotate counters are 'shared': awaited, and counted here."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []
        self.shared = 0

    def fleet_rotation(self, key: str) -> Callable[[], Awaitable[int]]:
        async def next_value() -> int:
            self.asked.append(key)
            self.shared += 1
            return self.shared - 1

        return next_value


def _rotate_settings() -> RouterSettings:
    return _settings(groups={"r": {"strategy": "rotate", "members": ["a/m", "b/m"]}, "o": {"members": ["a/m", "b/m"]}})


def _plan(result: Plan | ResolveError) -> Plan:
    assert isinstance(result, Plan), result
    return result


@pytest.mark.anyio
async def test_a_rotate_group_on_a_shared_counter_is_settled_by_one_awaited_step_per_request() -> None:
    state = _FleetCounter()
    resolver = Resolver(_rotate_settings(), state)
    orders = []
    for _ in range(3):
        pending = _plan(resolver.resolve_string("group/r"))
        assert pending.rotation is not None  # resolution itself never awaits
        settled = await pending.settle()
        assert settled.rotation is None
        orders.append(settled.labels)
    assert orders == [("a/m", "b/m"), ("b/m", "a/m"), ("a/m", "b/m")]
    assert state.asked == ["r", "r", "r"]


@pytest.mark.anyio
async def test_other_strategies_and_in_memory_state_never_wait_on_a_counter() -> None:
    shared = _FleetCounter()
    order = _plan(Resolver(_rotate_settings(), shared).resolve_string("group/o"))
    in_memory = _plan(Resolver(_rotate_settings(), InMemoryState()).resolve_string("group/r"))
    assert order.rotation is None and in_memory.rotation is None
    assert await order.settle() is order
    assert shared.asked == []


# --- pieces that need no Redis ----------------------------------------------------------------------


POLICY = BreakerSettings(consecutive_failures=3, open_for=10)


def test_a_breaker_adopts_an_opening_decided_elsewhere_and_refuses_until_its_time_is_up() -> None:
    breaker = CircuitBreaker(POLICY)
    breaker.adopt(Phase.OPEN, 100.0, 10.0, 3)
    assert not breaker.admit(105.0).allowed
    assert breaker.admit(110.0).probe


def test_a_breaker_adopting_a_close_forgets_its_probes_and_counts() -> None:
    breaker = CircuitBreaker(POLICY)
    for _ in range(3):
        breaker.record(0.0, "failure")
    assert breaker.admit(10.0).probe
    breaker.adopt(Phase.CLOSED, None, 10.0, 0)
    view = breaker.view()
    assert (view.phase, view.probes_in_flight, view.consecutive_failures) == (Phase.CLOSED, 0, 0)
    breaker.record(11.0, "success", probe=True)  # the old probe reports: ignored, still closed
    assert breaker.view().phase is Phase.CLOSED


def test_budgets_are_the_members_with_rpm_or_tpm_at_the_largest_any_group_gives() -> None:
    settings = _settings(
        groups={
            "x": {"members": [{"ref": "a/m", "rpm": 10}, "b/m"]},
            "y": {"members": [{"ref": "a/m", "rpm": 30, "tpm": 1000}]},
        }
    )
    assert budgets_of(settings) == {"a/m": Limits(rpm=30, tpm=1000)}


def test_the_log_scrubber_knows_the_redis_password() -> None:
    settings = _settings(state_url=f"redis://user:{PASSWORD}@127.0.0.1:6379/0")
    assert PASSWORD in secrets_of(settings)


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://h:6379", "scheme 'http'"),
        ("h:6379", "scheme '(none)'"),
        # No scheme: what stands before '://' is a user part and its password, never quoted.
        ("u:sk-secret-in-the-user-part@://h", "scheme '(not a URL scheme)'"),
        ("sk-a-secret-far-longer-than-any-scheme://h", "scheme '(not a URL scheme)'"),
    ],
)
def test_an_unknown_state_url_scheme_is_named_only_when_it_is_shaped_like_one(url: str, said: str) -> None:
    with pytest.raises(ValueError) as refused:
        _settings(state_url=url)
    assert said in str(refused.value)
    assert "secret" not in str(refused.value)
