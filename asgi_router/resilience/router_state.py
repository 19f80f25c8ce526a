"""All mutable routing state behind one small interface: breakers (with their ramps and the
slow marks of ``slowness.py``), rotation, budgets, statistics.

Nothing else in the router keeps or touches this state; it asks a :class:`RouterState`. The
in-memory implementation serves one process; :mod:`asgi_router.fleet` shares it through Redis, so
that several workers and hosts see one breaker, one rotation and one budget.

The methods are synchronous on purpose: they sit on every request's path (a rotate counter
inside resolution, an admission per attempt), which must never wait on I/O or hold a lock
across an await. A shared implementation answers from a local view and reconciles with the
store in the background, as Envoy's outlier detection does per host; the semantics here
(:mod:`asgi_router.resilience.breaker`) are what it reconciles to.

The routing statistics that strategies read (:class:`~asgi_router.resilience.stats.RoutingStats`: TTFB
averages, rpm/tpm usage, hedge credit, in-flight counts per candidate) are part of this
interface: :class:`RouterState` extends that protocol and :class:`InMemoryState` is an
:class:`~asgi_router.resilience.stats.InMemoryStats`, so one object holds every number a router keeps.
In-flight attempts are one table, read with ``in_flight(key)``, with two kinds of key; each
kind has exactly one owner, so no attempt is counted twice or released twice:

* a *provider* (:meth:`RouterState.begin_attempt` / :meth:`~RouterState.end_attempt`): every
  attempt, taken by the gate's lease at admission and given back when the lease is finished;
  ``max_concurrent`` and the retry budget read it;
* a *candidate* ``provider/model-id`` (:meth:`~asgi_router.resilience.stats.RoutingStats.acquire` /
  ``release``): attempts to the models the configuration names, held by the bookkeeper from
  send until the response was delivered; ``least_busy`` reads it.

Keys are strings: a candidate ``provider/model-id``, a provider name (which never contains a
``/``), or a group name for rotation and hedge credit.

A state shared by several processes says so with an attribute ``shared = True`` (optional, not
part of the protocol): the status page then labels breakers and budgets as the fleet's.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from asgi_router.config.resilience_settings import BreakerSettings, RetryBudgetSettings
from asgi_router.resilience.breaker import ADMITTED, Admission, BreakerView, Cause, CircuitBreaker, Verdict
from asgi_router.resilience.stats import InMemoryStats, RoutingStats

__all__ = ["InMemoryState", "MAX_BREAKERS", "RouterState"]

#: Breakers kept per process. Direct refs let clients name any model id of a configured
#: provider, so the table is bounded: past it, the least recently used breaker is forgotten.
MAX_BREAKERS: Final = 10_000


class RouterState(RoutingStats, Protocol):
    """The router's shared state; every method is cheap, synchronous and never raises."""

    def next_rotation(self, key: str) -> int:
        """The next value of ``key``'s counter (0, 1, 2, ...): one per resolved request."""
        ...

    def fleet_rotation(self, key: str) -> Callable[[], Awaitable[int]] | None:
        """``key``'s counter shared by a fleet, to await once per request; ``None`` when the
        counter is this process's own (:meth:`next_rotation`, no await).

        Asked once per rotate group when the router is built. The one place a request may
        wait on the shared store: a shared counter is one atomic increment there, and a
        state that cannot reach its store answers from :meth:`next_rotation` instead.
        """
        ...

    def admit(self, key: str, policy: BreakerSettings, now: float, *, force: bool = False) -> Admission:
        """May a call to ``key`` go ahead? See :meth:`CircuitBreaker.admit`."""
        ...

    def record(self, key: str, policy: BreakerSettings, now: float, verdict: Verdict, *, probe: bool) -> None:
        """Count a finished call to ``key`` (``probe``: its admission was a probe)."""
        ...

    def trip(
        self, key: str, policy: BreakerSettings, now: float, cause: Cause = "failures", p90: float | None = None
    ) -> None:
        """Open ``key``'s breaker from outside: a failing health probe, or the slowness rule
        (``cause="slow"``, with the p90 time to first byte that opened it)."""
        ...

    def mark_slow(self, key: str, until: float | None) -> None:
        """Mark ``key`` slow until ``until`` (this state's clock), or lift the mark (``None``)."""
        ...

    def slow(self, key: str, now: float) -> bool:
        """Whether ``key`` is marked slow at ``now``: plans try it after the others."""
        ...

    def recover(self, key: str, policy: BreakerSettings, now: float) -> None:
        """Let ``key``'s breaker close if it is due to probe (a passing health probe)."""
        ...

    def breaker(self, key: str) -> BreakerView | None:
        """A snapshot of ``key``'s breaker, ``None`` if it has none yet."""
        ...

    def begin_attempt(self, provider: str, limit: int | None) -> bool:
        """Count an attempt in flight to ``provider``; ``False`` (and not counted) at ``limit``."""
        ...

    def end_attempt(self, provider: str) -> None:
        """The attempt counted by :meth:`begin_attempt` is over."""
        ...

    def begin_retry(self, provider: str, budget: RetryBudgetSettings) -> bool:
        """Take a retry token if retries in flight stay within the provider's budget."""
        ...

    def end_retry(self, provider: str) -> None:
        """Give back the token taken by :meth:`begin_retry`."""
        ...


class InMemoryState(InMemoryStats):
    """:class:`RouterState` for one process and one event loop: plain dicts, no locks.

    Each method runs to completion without awaiting, so calls from concurrent requests in the
    same loop never interleave. ``itertools.count`` keeps rotation atomic even across threads.

    A breaker is created at a key's first failure: until then the key is closed and its
    successes are not counted, which keeps the table (and the hot path) small. The failure rate
    is therefore measured from the first failure on, never diluted by an older run of success.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, half_life: float = 60.0) -> None:
        super().__init__(clock, half_life)
        self._counters: dict[str, itertools.count[int]] = {}
        self._breakers: OrderedDict[str, CircuitBreaker] = OrderedDict()
        self._retries: dict[str, int] = {}
        #: Slow marks: until when each holds (only candidates with a latency target get one).
        self._slow: dict[str, float] = {}

    def fleet_rotation(self, key: str) -> Callable[[], Awaitable[int]] | None:
        return None  # one process: next_rotation is the whole sequence

    def next_rotation(self, key: str) -> int:
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters.setdefault(key, itertools.count())
        return next(counter)

    # --- breakers -------------------------------------------------------------------------

    def _breaker(self, key: str, policy: BreakerSettings) -> CircuitBreaker:
        breaker = self._breakers.get(key)
        if breaker is None:
            breaker = self._breakers[key] = CircuitBreaker(policy)
            if len(self._breakers) > MAX_BREAKERS:
                self._breakers.popitem(last=False)
        else:
            self._breakers.move_to_end(key)
        return breaker

    def admit(self, key: str, policy: BreakerSettings, now: float, *, force: bool = False) -> Admission:
        breaker = self._breakers.get(key)
        if breaker is None:  # never failed, or forgotten: closed
            return ADMITTED
        return breaker.admit(now, force=force)

    def record(self, key: str, policy: BreakerSettings, now: float, verdict: Verdict, *, probe: bool) -> None:
        if verdict == "neutral" and not probe:
            return
        if verdict == "success" and key not in self._breakers:
            return  # a closed breaker with no failures is the same as none: keep the table small
        self._breaker(key, policy).record(now, verdict, probe=probe)

    def trip(
        self, key: str, policy: BreakerSettings, now: float, cause: Cause = "failures", p90: float | None = None
    ) -> None:
        self._breaker(key, policy).trip(now, cause, p90)

    def mark_slow(self, key: str, until: float | None) -> None:
        if until is None:
            self._slow.pop(key, None)
            return
        self._slow[key] = until
        if len(self._slow) > MAX_BREAKERS:
            self._slow.pop(next(iter(self._slow)))

    def slow(self, key: str, now: float) -> bool:
        until = self._slow.get(key)
        return until is not None and now < until

    def recover(self, key: str, policy: BreakerSettings, now: float) -> None:
        breaker = self._breakers.get(key)
        if breaker is not None:
            breaker.recover(now)

    def breaker(self, key: str) -> BreakerView | None:
        breaker = self._breakers.get(key)
        return breaker.view() if breaker is not None else None

    # --- budgets --------------------------------------------------------------------------

    def begin_attempt(self, provider: str, limit: int | None) -> bool:
        count = self._in_flight.get(provider, 0)
        if limit is not None and count >= limit:
            return False
        self._in_flight[provider] = count + 1
        return True

    def end_attempt(self, provider: str) -> None:
        self._in_flight[provider] = max(0, self._in_flight.get(provider, 0) - 1)

    def begin_retry(self, provider: str, budget: RetryBudgetSettings) -> bool:
        active = self._retries.get(provider, 0)
        allowed = max(budget.min_concurrent, budget.ratio * self._in_flight.get(provider, 0))
        if active >= allowed:
            return False
        self._retries[provider] = active + 1
        return True

    def end_retry(self, provider: str) -> None:
        self._retries[provider] = max(0, self._retries.get(provider, 0) - 1)
