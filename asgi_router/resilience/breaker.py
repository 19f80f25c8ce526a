"""The circuit-breaker state machine for one key (a candidate or a provider), time passed in.

::

             failures: N in a row, or rate >= threshold over >= min_requests in the window
    CLOSED ──────────────────────────────────────────────────────────────────────► OPEN
      ▲                                                                   │  ▲
      │ probe successes (half_open_probes)                 open_for elapsed│  │ a probe fails
      │                                                  (or a forced try) ▼  │ (open_for doubles,
      └──────────────────────────────────────────────────────────────── HALF_OPEN   capped)

Every method takes ``now`` (monotonic seconds) instead of reading a clock, so that the table
of transitions is tested without sleeping and a shared store could replay it. Nothing here
awaits, so in one event loop each call is atomic without a lock.

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

__all__ = ["ADMITTED", "Admission", "BreakerView", "CircuitBreaker", "Phase", "Verdict"]

#: How a finished call counts: against the breaker, for it, or not at all.
Verdict = Literal["success", "failure", "neutral"]

# The sliding window is kept as this many time buckets (resilience4j's time-based window).
_BUCKETS: Final = 10


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
    opened_at: float | None = None


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


class CircuitBreaker:
    """One key's breaker. Mutable, single-threaded, no I/O: see the module docstring."""

    __slots__ = (
        "_calls",
        "_consecutive",
        "_epochs",
        "_failures",
        "_policy",
        "_probe_successes",
        "_probes",
        "_width",
        "open_for",
        "opened_at",
        "phase",
    )

    def __init__(self, policy: BreakerSettings) -> None:
        self._policy = policy
        self.phase = Phase.CLOSED
        self.opened_at: float | None = None
        self.open_for = policy.open_for
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
        return BreakerView(self.phase, self.opened_at, self.open_for, self._consecutive, len(self._probes))

    def adopt(self, phase: Phase, opened_at: float | None, open_for: float, consecutive: int) -> None:
        """Take a state decided elsewhere (a fleet's shared breaker), times on this one's clock.

        The probes this process holds are forgotten on any change of phase: whatever they
        report later belongs to an earlier phase and is ignored, as :meth:`record` says.
        """
        if phase is Phase.CLOSED:
            if self.phase is not Phase.CLOSED:
                self._close()
            self._consecutive = consecutive
            return
        if phase is not self.phase:
            self._probes.clear()
            self._probe_successes = 0
        self.phase = phase
        self.opened_at = opened_at
        self.open_for = open_for
        self._consecutive = consecutive

    # --- admission --------------------------------------------------------------------------

    def admit(self, now: float, *, force: bool = False) -> Admission:
        """May a call go ahead now? ``force`` admits one anyway (as a probe when not closed)."""
        if self.phase is Phase.CLOSED:
            return ADMITTED
        if self.phase is Phase.OPEN:
            assert self.opened_at is not None
            if now < self.opened_at + self.open_for and not force:
                return Admission(False, opened_at=self.opened_at)
            self.phase = Phase.HALF_OPEN
            self._probes.clear()
            self._probe_successes = 0
        expiry = now - self._policy.probe_timeout
        if self._probes and self._probes[0] <= expiry:
            self._probes = [started for started in self._probes if started > expiry]
        if len(self._probes) < self._policy.half_open_probes or force:
            self._probes.append(now)
            return _PROBE
        return Admission(False, opened_at=self.opened_at)

    # --- results ----------------------------------------------------------------------------

    def record(self, now: float, verdict: Verdict, *, probe: bool = False) -> None:
        """Count a finished call; ``probe`` says whether its admission was a probe."""
        if probe and self._probes:
            self._probes.pop(0)
        if self.phase is Phase.CLOSED:
            if verdict == "success":
                self._consecutive = 0
                self._count(now, failed=False)
            elif verdict == "failure":
                self._consecutive += 1
                self._count(now, failed=True)
                if self._consecutive >= self._policy.consecutive_failures or self._rate_exceeded(now):
                    self._open(now, self._policy.open_for)
        elif self.phase is Phase.HALF_OPEN and probe:
            if verdict == "success":
                self._probe_successes += 1
                if self._probe_successes >= self._policy.half_open_probes:
                    self._close()
            elif verdict == "failure":
                self._open(now, min(self.open_for * 2, self._policy.max_open_for))
        # OPEN, or a non-probe result in HALF_OPEN: from an earlier phase, ignored.

    def trip(self, now: float) -> None:
        """Open from outside (a failing health probe); re-opening doubles as a probe failure would."""
        if self.phase is Phase.CLOSED:
            self._open(now, self._policy.open_for)
        elif self.phase is Phase.HALF_OPEN:
            self._open(now, min(self.open_for * 2, self._policy.max_open_for))
        else:
            self.opened_at = now  # still failing: keep it open a full open_for from now

    def recover(self, now: float) -> None:
        """Evidence of health from outside (a passing health probe): close if it may probe."""
        if self.phase is Phase.HALF_OPEN or (
            self.phase is Phase.OPEN and self.opened_at is not None and now >= self.opened_at + self.open_for
        ):
            self._close()

    # --- internals --------------------------------------------------------------------------

    def _open(self, now: float, open_for: float) -> None:
        self.phase = Phase.OPEN
        self.opened_at = now
        self.open_for = open_for
        self._probes.clear()

    def _close(self) -> None:
        self.phase = Phase.CLOSED
        self.opened_at = None
        self.open_for = self._policy.open_for
        self._consecutive = 0
        self._probes.clear()
        self._epochs = [-1] * _BUCKETS

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
