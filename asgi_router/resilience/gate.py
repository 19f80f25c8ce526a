"""Admission to a candidate, and the bookkeeping of what became of it.

Before each attempt the decision point (``asgi_router.attempts.decisions``) asks
:meth:`Gate.enter` for the candidate's breaker admissions and its provider's in-flight slot. The
gate answers with what it found, not with a verdict: a :class:`Lease` (both breakers admit it and
a slot was free), the refused breaker :class:`~asgi_router.resilience.breaker.Admission` (with
when that breaker opened or began its ramp, whether it refused for the ramp, and why it opened),
or ``None`` (the provider is at ``max_concurrent``); the decision point turns the last two into
the ``circuit_open`` (or ``recovering``) and ``saturated`` skips. Every lease is
finished exactly once with the attempt's reason: that records the outcome on both breakers and
frees the provider's in-flight slot. A streamed attempt's lease is finished when the relay ends,
so a stream that breaks or goes idle after commit counts against its candidate (a *late
failure*).

How a reason counts (the sets are ``asgi_router.core.classify``'s, the table is the decision
point's docstring; the gate only applies them, because a lease is finished below the attempts
layer too, at a stream's end):

* candidate breaker: a reason in ``breaker.failure_reasons`` is a failure (never
  ``ROUTERS_OWN``); ``BREAKER_SUCCESSES`` are successes; anything else does not count.
* provider breaker: an ``UNREACHABLE`` reason before any response is a failure; any response
  at all is a success, recorded as soon as the status line arrives.
* slowness (``slowness.py``, candidates with a ``latency_target``): a streamed attempt that
  counted either way adds its time to first byte (or its failure) to the candidate's window; the
  judgement opens the breaker (cause ``slow``), marks it slow, or lifts the mark.
  :meth:`Gate.demote` says which candidates are slow, for the decision point's order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import get_args

from asgi_router.config.settings import RouterSettings
from asgi_router.core.candidate import Candidate
from asgi_router.core.classify import BREAKER_SUCCESSES, ROUTERS_OWN, UNREACHABLE
from asgi_router.core.reasons import Reason
from asgi_router.resilience.breaker import ADMITTED, Admission, Verdict
from asgi_router.resilience.router_state import RouterState
from asgi_router.resilience.slowness import Slowness

__all__ = ["Gate", "Lease"]


class Lease:
    """One admitted attempt: its breaker admissions and its in-flight slot, until finished."""

    __slots__ = (
        "_candidate",
        "_candidate_probe",
        "_finished",
        "_gate",
        "_provider",
        "_provider_probe",
        "_responded",
        "_stream",
        "ttfb",
    )

    def __init__(
        self, gate: Gate, provider: str, key: str, provider_admission: Admission, admission: Admission, stream: bool
    ) -> None:
        self._gate = gate
        self._candidate = key
        self._provider = provider
        self._provider_probe = provider_admission.probe
        self._candidate_probe = admission.probe
        self._responded = False
        self._finished = False
        self._stream = stream
        #: Seconds to the first body byte, once the attempt committed (the slowness rule reads it).
        self.ttfb: float | None = None

    def responded(self) -> None:
        """The upstream answered (any status): the provider is reachable."""
        if not self._responded and not self._finished:
            self._responded = True
            self._gate._record(self._provider, "success", self._provider_probe)

    def finish(self, reason: Reason) -> None:
        """Record how the attempt ended and free its slot; later calls do nothing."""
        if self._finished:
            return
        self._finished = True
        gate = self._gate
        if not self._responded:
            verdict: Verdict = "failure" if reason in UNREACHABLE else "neutral"
            gate._record(self._provider, verdict, self._provider_probe)
        verdict = gate.verdicts.get(reason, "neutral")
        gate._record(self._candidate, verdict, self._candidate_probe)
        gate.state.end_attempt(self._provider)
        if self._stream and verdict != "neutral" and gate.slowness.enabled:
            gate._judge(self._candidate, self.ttfb, verdict == "failure")


class Gate:
    """Breakers and concurrency caps for one router; all state lives in ``state``."""

    def __init__(self, settings: RouterSettings, state: RouterState, clock: Callable[[], float]) -> None:
        self.state = state
        self._clock = clock
        self._policy = settings.breaker
        self._breakers = settings.breaker.enabled
        failures = settings.breaker.failure_reasons - ROUTERS_OWN
        #: How an attempt that ended with each reason counts on its candidate's breaker, decided
        #: once from the settings (every lease's end reads it); a reason not here is neutral.
        self.verdicts: dict[str, Verdict] = {
            reason: "failure" if reason in failures else "success" if reason in BREAKER_SUCCESSES else "neutral"
            for reason in {*get_args(Reason), *failures, *BREAKER_SUCCESSES}
        }
        self._budget = settings.retry_budget
        self._limits = {name: provider.max_concurrent for name, provider in settings.providers.items()}
        #: Each judged candidate's recent streamed calls (``slowness.py``).
        self.slowness = Slowness(settings)

    def verdict(self, reason: Reason) -> Verdict:
        """How an attempt that ended with ``reason`` counts on its candidate's breaker."""
        return self.verdicts.get(reason, "neutral")

    def enter(self, candidate: Candidate, *, force: bool = False, stream: bool = False) -> Lease | Admission | None:
        """A lease on ``candidate``; else the breaker admission that refused it, or ``None`` when
        its provider has no free slot. ``force`` ignores open and recovering breakers; ``stream``:
        the request is streamed (its first byte counts for slowness)."""
        provider, key = candidate.provider, candidate.key
        provider_admission = admission = ADMITTED
        if self._breakers:
            now = self._clock()
            provider_admission = self.state.admit(provider, self._policy, now, force=force)
            if not provider_admission.allowed:
                return provider_admission
            admission = self.state.admit(key, self._policy, now, force=force)
            if not admission.allowed:
                self._record(provider, "neutral", provider_admission.probe)
                return admission
        if not self.state.begin_attempt(provider, self._limits.get(provider)):
            self._record(provider, "neutral", provider_admission.probe)
            self._record(key, "neutral", admission.probe)
            return None
        return Lease(self, provider, key, provider_admission, admission, stream)

    def demote(self, candidates: Sequence[Candidate]) -> Sequence[Candidate]:
        """``candidates`` with the slow ones moved after the others, order kept among each."""
        if not self.slowness.enabled or not self._breakers:
            return candidates
        now = self._clock()
        slow = [candidate for candidate in candidates if self.state.slow(candidate.key, now)]
        if not slow:
            return candidates
        return [candidate for candidate in candidates if candidate not in slow] + slow

    def _judge(self, key: str, ttfb: float | None, failed: bool) -> None:
        """Add one streamed call to ``key``'s slowness window and act on the judgement."""
        now = self._clock()
        judgement = self.slowness.observe(key, now, ttfb, failed=failed)
        if judgement.verdict == "open":
            self.slowness.forget(key)
            self.state.mark_slow(key, None)
            self.state.trip(key, self._policy, now, "slow", judgement.p90)
        elif judgement.verdict == "slow":
            self.state.mark_slow(key, now + self._policy.window)
        elif judgement.verdict == "normal" and self.state.slow(key, now):
            self.state.mark_slow(key, None)

    def begin_retry(self, provider: str) -> bool:
        """Take a token from ``provider``'s retry budget (give it back with :meth:`end_retry`)."""
        return self.state.begin_retry(provider, self._budget)

    def end_retry(self, provider: str) -> None:
        self.state.end_retry(provider)

    def trip(self, provider: str) -> None:
        """Open ``provider``'s breaker (its health probes fail)."""
        if self._breakers:
            self.state.trip(provider, self._policy, self._clock())

    def recover(self, provider: str) -> None:
        """Let ``provider``'s breaker close if it is due to probe (its health probes pass)."""
        if self._breakers:
            self.state.recover(provider, self._policy, self._clock())

    def _record(self, key: str, verdict: Verdict, probe: bool) -> None:
        if self._breakers:
            self.state.record(key, self._policy, self._clock(), verdict, probe=probe)
