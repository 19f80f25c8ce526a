"""Routing statistics behind a small Protocol: in-flight counts, TTFB averages, usage, hedge credit.

Strategies read these numbers to order candidates; the attempt loop and the relay feed them
(see ``bookkeeping.py``). They sit behind :class:`RoutingStats`, which the router's shared state
interface (:class:`~asgi_router.resilience.router_state.RouterState`, also holding breaker, rotation and budget
state) extends: the router's :class:`~asgi_router.resilience.router_state.InMemoryState` *is* an
:class:`InMemoryStats`, and a shared store for a multi-process deployment can replace both
without touching a strategy. Every method is synchronous and cheap: a strategy calls
them while ordering a plan, and no lock may be held across an ``await``.

Keys are ``provider/model-id`` strings (hedge credit is keyed by group name). Time comes from an
injected clock so that tests can move it.

* **TTFB average**: a time-decayed mean. Each observation's weight halves every ``half_life``
  seconds, so a provider that was slow an hour ago is judged on what it does now. Kept as a
  decayed sum and a decayed weight, which is exact for irregular sampling and never divides by
  a zero interval.
* **Usage**: requests and tokens in a rolling 60-second window of one-second buckets, with
  running totals so a read is O(1) amortised. A rolling window has no minute boundary at
  which a burst of twice the budget could slip through.
* **Hedge credit**: a token bucket. Each request earns a fraction of a credit, a hedge spends a
  whole one, and the bucket holds at most :data:`HEDGE_BURST`, so over time at most that fraction
  of requests is hedged.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

__all__ = [
    "HEDGE_BURST",
    "InMemoryStats",
    "Limits",
    "RoutingStats",
    "USAGE_WINDOW",
    "WindowUsage",
    "over_budget",
    "utilisation",
]

#: Seconds covered by rpm/tpm budgets.
USAGE_WINDOW: Final = 60
#: Most hedge credits a group can bank during a quiet spell.
HEDGE_BURST: Final = 5.0


@dataclass(frozen=True, slots=True)
class WindowUsage:
    """Requests and tokens counted in the rolling window."""

    requests: int = 0
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class Limits:
    """A member's per-minute budget (``None``: unlimited)."""

    rpm: int | None = None
    tpm: int | None = None


def over_budget(limits: Limits, usage: WindowUsage, tokens: int) -> bool:
    """Whether one more request of ``tokens`` estimated tokens would exceed ``limits``."""
    if limits.rpm is not None and usage.requests + 1 > limits.rpm:
        return True
    return limits.tpm is not None and usage.tokens + tokens > limits.tpm


def utilisation(limits: Limits, usage: WindowUsage) -> float:
    """The larger of the used shares of rpm and tpm (0 when unlimited)."""
    shares = [0.0]
    if limits.rpm is not None:
        shares.append(usage.requests / limits.rpm)
    if limits.tpm is not None:
        shares.append(usage.tokens / limits.tpm)
    return max(shares)


class RoutingStats(Protocol):
    """What strategies read and the attempt loop writes; synchronous and cheap."""

    def in_flight(self, key: str) -> int:
        """Attempts to ``key`` started and not yet finished."""

    def acquire(self, key: str) -> None:
        """An attempt to ``key`` starts."""

    def release(self, key: str) -> None:
        """An attempt to ``key`` ends (exactly once per :meth:`acquire`)."""

    def latency(self, key: str) -> float | None:
        """The decayed mean time to first byte of ``key``, or ``None`` before any observation."""

    def observe_latency(self, key: str, seconds: float) -> None:
        """Fold one time-to-first-byte observation into ``key``'s mean."""

    def usage(self, key: str) -> WindowUsage:
        """Requests and tokens of ``key`` in the rolling window."""

    def add_usage(self, key: str, requests: int, tokens: int) -> None:
        """Count requests and tokens (tokens may be a negative correction) against ``key`` now."""

    def usage_frees_in(self, key: str) -> float:
        """Seconds until the oldest usage of ``key`` leaves the window (0 when there is none)."""

    def within_budget(self, key: str, limits: Limits, tokens: int) -> bool:
        """Whether one more request of ``tokens`` estimated tokens to ``key`` stays within ``limits``.

        The one budget check of the attempt loop. In memory it is :func:`over_budget` over
        :meth:`usage`; a fleet's shared state answers from the slice of the budget it holds.
        """

    def earn_hedge_credit(self, key: str, amount: float) -> None:
        """One request of group ``key`` earns ``amount`` of a hedge."""

    def spend_hedge_credit(self, key: str) -> bool:
        """Spend one whole hedge credit of group ``key`` if there is one."""


class _Ema:
    __slots__ = ("at", "total", "weight")

    def __init__(self, at: float) -> None:
        self.total = 0.0
        self.weight = 0.0
        self.at = at


class _Window:
    __slots__ = ("buckets", "requests", "tokens")

    def __init__(self) -> None:
        # [second, requests, tokens], oldest first
        self.buckets: deque[list[int]] = deque()
        self.requests = 0
        self.tokens = 0

    def expire(self, second: int) -> None:
        buckets = self.buckets
        while buckets and buckets[0][0] <= second - USAGE_WINDOW:
            _, requests, tokens = buckets.popleft()
            self.requests -= requests
            self.tokens -= tokens


class InMemoryStats:
    """:class:`RoutingStats` in this process's memory (one instance per router)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, half_life: float = 60.0) -> None:
        if half_life <= 0:
            raise ValueError("half_life must be positive")
        self._clock = clock
        self._half_life = half_life
        self._in_flight: dict[str, int] = {}
        self._ema: dict[str, _Ema] = {}
        self._usage: dict[str, _Window] = {}
        self._credit: dict[str, float] = {}

    # in flight -------------------------------------------------------------------------------

    def in_flight(self, key: str) -> int:
        return self._in_flight.get(key, 0)

    def acquire(self, key: str) -> None:
        self._in_flight[key] = self._in_flight.get(key, 0) + 1

    def release(self, key: str) -> None:
        left = self._in_flight.get(key, 0) - 1
        if left > 0:
            self._in_flight[key] = left
        else:
            self._in_flight.pop(key, None)

    # time to first byte ----------------------------------------------------------------------

    def latency(self, key: str) -> float | None:
        ema = self._ema.get(key)
        return ema.total / ema.weight if ema is not None and ema.weight > 0 else None

    def observe_latency(self, key: str, seconds: float) -> None:
        now = self._clock()
        ema = self._ema.get(key)
        if ema is None:
            ema = self._ema[key] = _Ema(now)
        decay = math.exp2(-max(0.0, now - ema.at) / self._half_life)
        ema.total = ema.total * decay + seconds
        ema.weight = ema.weight * decay + 1.0
        ema.at = now

    # usage -----------------------------------------------------------------------------------

    def _window(self, key: str) -> tuple[_Window, int]:
        second = math.floor(self._clock())
        window = self._usage.get(key)
        if window is None:
            window = self._usage[key] = _Window()
        window.expire(second)
        return window, second

    def usage(self, key: str) -> WindowUsage:
        if key not in self._usage:
            return WindowUsage()
        window, _ = self._window(key)
        return WindowUsage(max(0, window.requests), max(0, window.tokens))

    def add_usage(self, key: str, requests: int, tokens: int) -> None:
        window, second = self._window(key)
        buckets = window.buckets
        if buckets and buckets[-1][0] == second:
            buckets[-1][1] += requests
            buckets[-1][2] += tokens
        else:
            buckets.append([second, requests, tokens])
        window.requests += requests
        window.tokens += tokens

    def usage_frees_in(self, key: str) -> float:
        if key not in self._usage:
            return 0.0
        window, _ = self._window(key)
        if not window.buckets:
            return 0.0
        return max(0.0, window.buckets[0][0] + USAGE_WINDOW - self._clock())

    def within_budget(self, key: str, limits: Limits, tokens: int) -> bool:
        return not over_budget(limits, self.usage(key), tokens)

    # hedge credit ----------------------------------------------------------------------------

    def earn_hedge_credit(self, key: str, amount: float) -> None:
        self._credit[key] = min(HEDGE_BURST, self._credit.get(key, 1.0) + amount)

    def spend_hedge_credit(self, key: str) -> bool:
        credit = self._credit.get(key, 1.0)
        if credit < 1.0:
            return False
        self._credit[key] = credit - 1.0
        return True
