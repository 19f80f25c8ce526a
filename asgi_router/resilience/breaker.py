"""The circuit-breaker state machine for one key (a candidate or a provider), time passed in.

::

             failures: N in a row, or rate >= threshold over >= min_requests in the window
             (or the slowness rule: open cause ``slow``)
    CLOSED ──────────────────────────────────────────────────────────────────────► OPEN
      ▲  ▲                                                                   │  ▲
      │  │ probe successes (half_open_probes)                open_for elapsed │  │ a probe fails:
      │  └──────── RAMPING ◄─────────────────────────────── HALF_OPEN ◄───────┘  │ probe again after
      │  last step   │  (closed, at a share of traffic)                          │ probe_interval
      └──────────────┘  a failure ───────────────────────────────────────────────┘

Every method takes ``now`` (monotonic seconds) instead of reading a clock, so that the table
of transitions is tested without sleeping and a shared store could replay it. Nothing here
awaits, so in one event loop each call is atomic without a lock.

**Recovery.** A breaker that closes after an outage does not take all of its traffic at once
(Envoy's slow start): it is *closed* (the gauges say 0) but *ramping*, admitting the share
``ramp[step]`` of the calls that ask and refusing the rest with ``recovering``. A step ends
after ``ramp_successes`` successes in a row or ``ramp_step`` seconds, whichever comes first (low
traffic must not stall a ramp); after the last step it takes everything. A failure while ramping
re-opens it. The share is kept by a credit that earns the share per call asked and admits one
call per whole credit: exact over any run of calls, with no random draw to make a test flaky.

**Coming back.** The first opening lasts ``open_for``; after that a real request probes at
most every ``probe_interval`` (a failed probe waits that long again, never longer). The wait
does not grow with the outage: a recovered upstream is back within one ``probe_interval`` of
its recovery plus the time to its next request, whatever happened before.

Which calls count: a result whose admission came from the current phase. A call admitted while
closed that ends after the breaker opened is ignored (its failure is old news, its success is
not a probe); only probe results move a half-open breaker. A probe that never reports (a
cancelled task, a stream that runs for minutes) frees its slot after ``probe_timeout``, so a
stuck probe cannot wedge the breaker half-open.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal

from asgi_router.config.resilience_settings import BreakerSettings

__all__ = [
    "ADMITTED",
    "Admission",
    "BreakerView",
    "Cause",
    "CircuitBreaker",
    "Phase",
    "Verdict",
    "ramp_position",
]

#: How a finished call counts: against the breaker, for it, or not at all.
Verdict = Literal["success", "failure", "neutral"]
#: Why a breaker opened: calls failed, or the slowness rule (slow *and* failing).
Cause = Literal["failures", "slow"]

# The sliding window is kept as this many time buckets (resilience4j's time-based window).
_BUCKETS: Final = 10
# A whole ramp credit, less what summing a share's binary fraction loses (ten times 0.1 is
# 0.999...): the tenth call of a 10 % step is the one admitted, as the share promises.
_WHOLE: Final = 1.0 - 1e-9


class Phase(Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class Admission:
    """Whether a call may go ahead; a refused one says when its breaker opened."""

    allowed: bool
    #: The call holds one of the half-open probe slots; report it with ``probe=True``.
    probe: bool = False
    #: When the breaker opened (refused while open or half-open), or when its ramp began
    #: (refused while recovering): the all-open fallback tries the oldest.
    opened_at: float | None = None
    #: Refused for the ramp (reason ``recovering``), not for an open breaker.
    recovering: bool = False
    #: Refused while open or half-open: why it opened.
    cause: Cause | None = None


#: The common answer, allocated once.
ADMITTED: Final = Admission(True)
_PROBE: Final = Admission(True, probe=True)


@dataclass(frozen=True, slots=True)
class BreakerView:
    """A read-only snapshot, for tests and status pages."""

    phase: Phase
    opened_at: float | None
    open_for: float
    consecutive_failures: int
    probes_in_flight: int
    #: Why it opened (kept while open or half-open).
    cause: Cause = "failures"
    #: The ramp step it is on (an index into ``ramp``) and since when; ``None``: not ramping.
    ramp_step: int | None = None
    ramp_since: float | None = None
    #: ``slow`` openings: the p90 time to first byte that opened it, in seconds.
    p90: float | None = None


def ramp_position(view: BreakerView | None, policy: BreakerSettings, now: float) -> int | None:
    """The ramp step ``view`` is on at ``now`` (time advances a step by itself), ``None`` once past it."""
    if view is None or view.ramp_step is None or view.ramp_since is None:
        return None
    step = view.ramp_step + max(0, int((now - view.ramp_since) // policy.ramp_step))
    return step if step < len(policy.ramp) else None


class CircuitBreaker:
    """One key's breaker. Mutable, single-threaded, no I/O: see the module docstring."""

    __slots__ = (
        "_calls",
        "_consecutive",
        "_credit",
        "_epochs",
        "_failures",
        "_policy",
        "_probe_successes",
        "_probes",
        "_ramp_ok",
        "_width",
        "cause",
        "open_for",
        "opened_at",
        "p90",
        "phase",
        "ramp_since",
        "ramp_step",
    )

    def __init__(self, policy: BreakerSettings) -> None:
        self._policy = policy
        self.phase = Phase.CLOSED
        self.opened_at: float | None = None
        self.open_for = policy.open_for
        self.cause: Cause = "failures"
        self.p90: float | None = None
        #: The ramp step (an index into ``policy.ramp``) and since when; ``None``: full traffic.
        self.ramp_step: int | None = None
        self.ramp_since: float | None = None
        self._ramp_ok = 0
        self._credit = 0.0
        self._consecutive = 0
        self._width = policy.window / _BUCKETS
        self._epochs = [-1] * _BUCKETS
        self._calls = [0] * _BUCKETS
        self._failures = [0] * _BUCKETS
        self._probes: list[float] = []
        self._probe_successes = 0

    @property
    def consecutive_failures(self) -> int:
        """Failures in a row while closed (what ``consecutive_failures`` is compared with)."""
        return self._consecutive

    def view(self) -> BreakerView:
        return BreakerView(
            self.phase,
            self.opened_at,
            self.open_for,
            self._consecutive,
            len(self._probes),
            self.cause,
            self.ramp_step,
            self.ramp_since,
            self.p90,
        )

    def adopt(
        self,
        phase: Phase,
        opened_at: float | None,
        open_for: float,
        consecutive: int,
        *,
        cause: Cause = "failures",
        ramp_step: int | None = None,
        ramp_since: float | None = None,
        p90: float | None = None,
    ) -> None:
        """Take a state decided elsewhere (a fleet's shared breaker), times on this one's clock.

        The probes this process holds are forgotten on any change of phase: whatever they
        report later belongs to an earlier phase and is ignored, as :meth:`record` says. A
        change of ramp step starts this process's count of successes in a row afresh.
        """
        if phase is Phase.CLOSED:
            if self.phase is not Phase.CLOSED:
                self._close(None)
            if ramp_step != self.ramp_step:
                self._ramp_ok = 0
            self.ramp_step = ramp_step
            self.ramp_since = ramp_since if ramp_step is not None else None
            self._consecutive = consecutive
            return
        if phase is not self.phase:
            self._probes.clear()
            self._probe_successes = 0
        self.phase = phase
        self.opened_at = opened_at
        self.open_for = open_for
        self._consecutive = consecutive
        self.cause = cause
        self.p90 = p90
        self.ramp_step = self.ramp_since = None

    # --- admission --------------------------------------------------------------------------

    def admit(self, now: float, *, force: bool = False) -> Admission:
        """May a call go ahead now? ``force`` admits one anyway (as a probe when open or half-open)."""
        if self.phase is Phase.CLOSED:
            if self.ramp_step is None:
                return ADMITTED
            return self._ramp_admit(now, force)
        if self.phase is Phase.OPEN:
            assert self.opened_at is not None
            if now < self.opened_at + self.open_for and not force:
                return Admission(False, opened_at=self.opened_at, cause=self.cause)
            self.phase = Phase.HALF_OPEN
            self._probes.clear()
            self._probe_successes = 0
        expiry = now - self._policy.probe_timeout
        if self._probes and self._probes[0] <= expiry:
            self._probes = [started for started in self._probes if started > expiry]
        if len(self._probes) < self._policy.half_open_probes or force:
            self._probes.append(now)
            return _PROBE
        return Admission(False, opened_at=self.opened_at, cause=self.cause)

    def share(self, now: float) -> float:
        """The share of traffic it takes now: 1.0 unless ramping."""
        self._advance_by_time(now)
        return 1.0 if self.ramp_step is None else self._policy.ramp[self.ramp_step]

    def _ramp_admit(self, now: float, force: bool) -> Admission:
        self._advance_by_time(now)
        if self.ramp_step is None:
            return ADMITTED
        self._credit += self._policy.ramp[self.ramp_step]
        if self._credit >= _WHOLE:
            self._credit -= 1.0
            return ADMITTED
        if force:
            return ADMITTED
        return Admission(False, opened_at=self.ramp_since, recovering=True)

    def _advance_by_time(self, now: float) -> None:
        since = self.ramp_since
        while self.ramp_step is not None and since is not None and now >= since + self._policy.ramp_step:
            since += self._policy.ramp_step
            self._next_step(since)

    def _next_step(self, now: float) -> None:
        assert self.ramp_step is not None
        self._ramp_ok = 0
        if self.ramp_step + 1 < len(self._policy.ramp):
            self.ramp_step += 1
            self.ramp_since = now
        else:
            self.ramp_step = self.ramp_since = None

    # --- results ----------------------------------------------------------------------------

    def record(self, now: float, verdict: Verdict, *, probe: bool = False) -> None:
        """Count a finished call; ``probe`` says whether its admission was a probe."""
        if probe and self._probes:
            self._probes.pop(0)
        if self.phase is Phase.CLOSED:
            if self.ramp_step is not None:
                self._advance_by_time(now)
            if verdict == "success":
                self._consecutive = 0
                self._count(now, failed=False)
                if self.ramp_step is not None:
                    self._ramp_ok += 1
                    if self._ramp_ok >= self._policy.ramp_successes:
                        self._next_step(now)
            elif verdict == "failure":
                self._consecutive += 1
                self._count(now, failed=True)
                if self.ramp_step is not None:
                    self._reopen(now, "failures")  # a relapse while recovering
                elif self._consecutive >= self._policy.consecutive_failures or self._rate_exceeded(now):
                    self._open(now, self._policy.open_for, "failures")
        elif self.phase is Phase.HALF_OPEN and probe:
            if verdict == "success":
                self._probe_successes += 1
                if self._probe_successes >= self._policy.half_open_probes:
                    self._close(now)
            elif verdict == "failure":
                self._reopen(now, self.cause)
        # OPEN, or a non-probe result in HALF_OPEN: from an earlier phase, ignored.

    def trip(self, now: float, cause: Cause = "failures", p90: float | None = None) -> None:
        """Open from outside: a failing health probe, or the slowness rule (``cause="slow"``).

        While closed it opens for ``open_for`` (a ramping breaker relapses: ``probe_interval``);
        half-open, or open and due to probe, it counts as a failed probe; open and not yet due,
        it stays as it is (the wait never grows with the outage).
        """
        if self.phase is Phase.CLOSED:
            if self.ramp_step is not None:
                self._reopen(now, cause)
            else:
                self._open(now, self._policy.open_for, cause)
            self.p90 = p90
        elif self.phase is Phase.HALF_OPEN or (self.opened_at is not None and now >= self.opened_at + self.open_for):
            self._reopen(now, self.cause)

    def recover(self, now: float) -> None:
        """Evidence of health from outside (a passing health probe): close if it may probe."""
        if self.phase is Phase.HALF_OPEN or (
            self.phase is Phase.OPEN and self.opened_at is not None and now >= self.opened_at + self.open_for
        ):
            self._close(now)

    # --- internals --------------------------------------------------------------------------

    def _open(self, now: float, open_for: float, cause: Cause) -> None:
        self.phase = Phase.OPEN
        self.opened_at = now
        self.open_for = open_for
        self.cause = cause
        self.ramp_step = self.ramp_since = None
        self._probes.clear()

    def _reopen(self, now: float, cause: Cause) -> None:
        """Open again after a failed probe or a relapse: probe again after ``probe_interval``."""
        self._open(now, self._policy.probe_interval, cause)

    def _close(self, now: float | None) -> None:
        """Close; after an outage (``now`` given) start the ramp, if there is one."""
        self.phase = Phase.CLOSED
        self.opened_at = None
        self.open_for = self._policy.open_for
        self.cause = "failures"
        self.p90 = None
        self._consecutive = 0
        self._probes.clear()
        self._epochs = [-1] * _BUCKETS
        self._ramp_ok = 0
        self._credit = 0.0
        if now is not None and self._policy.ramp:
            self.ramp_step, self.ramp_since = 0, now
        else:
            self.ramp_step = self.ramp_since = None

    def _count(self, now: float, *, failed: bool) -> None:
        epoch = int(now // self._width)
        slot = epoch % _BUCKETS
        if self._epochs[slot] != epoch:
            self._epochs[slot] = epoch
            self._calls[slot] = 0
            self._failures[slot] = 0
        self._calls[slot] += 1
        if failed:
            self._failures[slot] += 1

    def _rate_exceeded(self, now: float) -> bool:
        oldest = int(now // self._width) - _BUCKETS
        calls = failures = 0
        for slot, epoch in enumerate(self._epochs):
            if epoch > oldest:
                calls += self._calls[slot]
                failures += self._failures[slot]
        return calls >= self._policy.min_requests and failures >= self._policy.failure_rate * calls
