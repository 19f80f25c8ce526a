"""A read-only view of the router's state for people and scrapers: the status page and the gauges.

For every configured provider and every ``provider/model-id`` the configuration names: its
breaker's phase and, while open, how long until it lets a probe through; attempts in flight; the
time-to-first-byte average; and rpm/tpm use against the budget the groups give it. Everything is
read through :class:`~asgi_router.resilience.router_state.RouterState` and
:class:`~asgi_router.resilience.stats.RoutingStats`, whose reads are synchronous and cheap, so a
view is taken on demand (a page load, a scrape) and never kept.

An open breaker becomes half-open lazily, when the next call asks to be admitted
(``breaker.py``); a view reports what that call would find: ``half_open`` once ``open_for`` has
run out, with ``half_opens_in`` at 0. Likewise a ramp advances with time by itself: the share
shown is the one the next call would meet.

Besides the phase, a breaker's status says in words what an operator needs (``notes``): why it
opened (``opened: slow (p90 4.1 s / target 2 s)``), where its ramp is (``recovering 10% → 50%``)
and whether its candidate is demoted (``slow``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from asgi_router.config.named import named_models
from asgi_router.config.resilience_settings import BreakerSettings
from asgi_router.config.settings import RouterSettings
from asgi_router.resilience.breaker import BreakerView, Phase, ramp_position
from asgi_router.resilience.router_state import RouterState
from asgi_router.resilience.slowness import Slowness
from asgi_router.resilience.stats import RoutingStats

__all__ = ["BreakerStatus", "Budget", "CandidateStatus", "Overview", "ProviderStatus", "breaker_status"]

BreakerPhase = Literal["closed", "half_open", "open"]


@dataclass(frozen=True, slots=True)
class BreakerStatus:
    """A breaker as the next call would find it."""

    phase: BreakerPhase
    #: Seconds until an open breaker admits a probe (``None`` unless open).
    half_opens_in: float | None = None
    consecutive_failures: int = 0
    #: Why an open or half-open breaker opened: ``failures`` or ``slow``.
    cause: str | None = None
    #: The share of its traffic it takes: below 1.0 while recovering.
    share: float = 1.0
    #: What an operator reads next to the phase, e.g. ``recovering 10% → 50%``.
    notes: tuple[str, ...] = ()


_CLOSED = BreakerStatus("closed")


def _percent(share: float) -> str:
    return f"{share * 100:.0f}%"


def _seconds(value: float) -> str:
    """``4.1 s``, ``2 s``, ``0.05 s``: one decimal from a second up, two figures below."""
    return (f"{value:.1f}".removesuffix(".0") if value >= 1 else f"{value:.2g}") + " s"


def breaker_status(
    view: BreakerView | None,
    now: float,
    policy: BreakerSettings | None = None,
    *,
    slow: bool = False,
    target: float | None = None,
) -> BreakerStatus:
    """What ``view`` (``None``: the key never failed) means at ``now`` (the router's clock);
    ``policy`` places a ramp, ``slow`` and ``target`` are the candidate's slow mark and target."""
    marks = ("slow",) if slow else ()
    if view is None or view.phase is Phase.CLOSED:
        step = ramp_position(view, policy, now) if policy is not None else None
        if step is not None and policy is not None:
            share = policy.ramp[step]
            after = policy.ramp[step + 1] if step + 1 < len(policy.ramp) else 1.0
            notes = (f"recovering {_percent(share)} → {_percent(after)}", *marks)
            return BreakerStatus("closed", None, view.consecutive_failures if view else 0, None, share, notes)
        if view is None and not marks:
            return _CLOSED
        return BreakerStatus("closed", None, view.consecutive_failures if view else 0, notes=marks)
    opened = f"opened: {view.cause}"
    if view.cause == "slow" and view.p90 is not None and target is not None:
        opened += f" (p90 {_seconds(view.p90)} / target {_seconds(target)})"
    notes = (opened,)
    if view.phase is Phase.HALF_OPEN:
        return BreakerStatus("half_open", None, view.consecutive_failures, view.cause, notes=notes)
    opens = (view.opened_at or 0.0) + view.open_for - now
    if opens <= 0:
        return BreakerStatus("half_open", None, view.consecutive_failures, view.cause, notes=notes)
    return BreakerStatus("open", opens, view.consecutive_failures, view.cause, notes=notes)


@dataclass(frozen=True, slots=True)
class Budget:
    """Use of a per-minute budget in the rolling window."""

    used: int
    limit: int


@dataclass(frozen=True, slots=True)
class CandidateStatus:
    key: str
    breaker: BreakerStatus
    in_flight: int
    #: The decayed time-to-first-byte average, in seconds (``None`` before any).
    ttfb: float | None
    rpm: Budget | None
    tpm: Budget | None


@dataclass(frozen=True, slots=True)
class ProviderStatus:
    name: str
    #: False when its ``api_key_env`` is unset (its candidates are skipped).
    configured: bool
    breaker: BreakerStatus
    in_flight: int
    max_concurrent: int | None
    candidates: tuple[CandidateStatus, ...]


class Overview:
    """Reads one router's state for the configured providers and models."""

    def __init__(
        self, settings: RouterSettings, state: RouterState, stats: RoutingStats, clock: Callable[[], float]
    ) -> None:
        self._state = state
        self._stats = stats
        self._clock = clock
        self._policy = settings.breaker
        self._slowness = Slowness(settings)
        self._providers = {name: settings.providers[name] for name in sorted(settings.providers)}
        models = sorted(named_models(settings))
        self._models = {name: tuple(key for key in models if key.split("/", 1)[0] == name) for name in self._providers}
        # The tightest budget any group gives a model (the one that skips it first).
        self._rpm: dict[str, int] = {}
        self._tpm: dict[str, int] = {}
        for group in settings.groups:
            for member in settings.flat_member_settings(group):
                for limit, table in ((member.rpm, self._rpm), (member.tpm, self._tpm)):
                    if limit is not None:
                        table[member.ref] = min(limit, table.get(member.ref, limit))

    @property
    def shared(self) -> bool:
        """Whether the state is shared by several processes (it says so with ``shared = True``)."""
        return getattr(self._state, "shared", False) is True

    def breaker(self, key: str) -> BreakerStatus:
        """``key``'s breaker (a provider's, or a candidate's with its slow mark and target)."""
        now = self._clock()
        if "/" not in key:
            return breaker_status(self._state.breaker(key), now, self._policy)
        slow = self._state.slow(key, now)
        return breaker_status(self._state.breaker(key), now, self._policy, slow=slow, target=self._slowness.target(key))

    def targets(self, keys: Iterable[str]) -> dict[str, float]:
        """The latency target of each of ``keys`` that has one, and of each provider's ``provider/*``."""
        found = {key: target for key in keys if (target := self._slowness.target(key)) is not None}
        for name in self._providers:
            target = self._slowness.target(f"{name}/*")
            if target is not None:
                found[f"{name}/*"] = target
        return found

    def ramp_share(self, key: str) -> float:
        """The share of its traffic ``key`` takes: the smaller of its own and its provider's."""
        provider = self.breaker(key.split("/", 1)[0]).share
        return min(provider, self.breaker(key).share)

    def models(self, provider: str) -> tuple[str, ...]:
        """The ``provider/model-id`` keys the configuration names for ``provider``."""
        return self._models[provider]

    def provider_in_flight(self, provider: str) -> int:
        return self._state.in_flight(provider)

    @property
    def provider_names(self) -> tuple[str, ...]:
        return tuple(self._providers)

    def candidate(self, key: str) -> CandidateStatus:
        stats = self._stats
        rpm, tpm = self._rpm.get(key), self._tpm.get(key)
        usage = stats.usage(key) if rpm is not None or tpm is not None else None
        return CandidateStatus(
            key,
            self.breaker(key),
            stats.in_flight(key),
            stats.latency(key),
            Budget(usage.requests, rpm) if usage is not None and rpm is not None else None,
            Budget(usage.tokens, tpm) if usage is not None and tpm is not None else None,
        )

    def providers(self) -> list[ProviderStatus]:
        """Every provider, in name order, with its configured models."""
        return [
            ProviderStatus(
                name,
                provider.is_configured,
                self.breaker(name),
                self.provider_in_flight(name),
                provider.max_concurrent,
                tuple(self.candidate(key) for key in self._models[name]),
            )
            for name, provider in self._providers.items()
        ]
