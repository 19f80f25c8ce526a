"""Slowness as a symptom: each candidate's p90 time to first byte against its latency target.

"Process alive but degraded" is not "unavailable", and the two get different answers. Over the
breaker's ``window``, once it holds ``min_requests`` streamed calls, a candidate whose p90 time
to first byte exceeds ``slow_factor * latency_target``:

* and whose calls failed more often than ``slow_error_rate`` is **opened** (open cause ``slow``;
  requests skip it as ``circuit_open`` like any open breaker);
* otherwise is **slow**: plans try it after the candidates that are not slow. The mark holds for
  a ``window`` from the last judgement that found it slow, and is lifted as soon as its p90 is
  back under the target itself (not under the factor: the gap keeps a candidate near the line
  from flapping). A slow candidate that gets no traffic (the faster ones serve) is thus tried
  again once its mark runs out, on fresh evidence.

Only streamed calls count: a non-streamed answer's first byte is its whole generation, which
says how long the answer is rather than how sick the model is. The target is the member
table's ``latency_target`` (the tightest, where several groups set one), else its provider's,
else ``breaker.latency_target``; a candidate with none is not judged and costs nothing.

Pure logic on an injected ``now``: the gate feeds it each streamed call's outcome and applies
its :class:`Judgement` to the router's state (which a fleet shares).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Final, Literal

from asgi_router.config.resilience_settings import BreakerSettings
from asgi_router.config.settings import RouterSettings
from asgi_router.resilience.router_state import MAX_BREAKERS

__all__ = ["MAX_SAMPLES", "Judgement", "Slowness", "latency_targets"]

#: Streamed calls kept per candidate: past it the oldest go first, so a busy candidate is
#: judged on its latest calls and the table stays small.
MAX_SAMPLES: Final = 512
# A failed call's sample: it has no time to first byte, only its failure.
_FAILED: Final = -1.0


@dataclass(frozen=True, slots=True)
class Judgement:
    """What the window says of one candidate now."""

    verdict: Literal["open", "slow", "normal", "unknown"]
    #: The p90 time to first byte the verdict was reached on (``unknown``: none).
    p90: float | None = None


_UNKNOWN: Final = Judgement("unknown")


def latency_targets(settings: RouterSettings) -> tuple[dict[str, float], dict[str, float], float | None]:
    """The targets by member (tightest per ``provider/model-id``), by provider, and the router's."""
    members: dict[str, float] = {}
    for group in settings.groups:
        for member in settings.flat_member_settings(group):
            if member.latency_target is not None:
                members[member.ref] = min(member.latency_target, members.get(member.ref, math.inf))
    providers = {
        name: provider.latency_target
        for name, provider in settings.providers.items()
        if provider.latency_target is not None
    }
    return members, providers, settings.breaker.latency_target


class Slowness:
    """Every judged candidate's recent streamed calls; one per router, no I/O."""

    def __init__(self, settings: RouterSettings) -> None:
        self._policy: BreakerSettings = settings.breaker
        self._members, self._providers, self._default = latency_targets(settings)
        #: Whether any candidate has a target (else nothing is ever recorded).
        self.enabled = bool(self._members or self._providers or self._default is not None)
        #: Bounded like the breaker table (a client may name a new direct-ref model id per
        #: request): past it the candidate judged longest ago is forgotten.
        self._samples: OrderedDict[str, deque[tuple[float, float]]] = OrderedDict()

    def target(self, key: str) -> float | None:
        """``key``'s latency target in seconds, ``None`` when it has none."""
        found = self._members.get(key)
        if found is not None:
            return found
        return self._providers.get(key.split("/", 1)[0], self._default)

    def observe(self, key: str, now: float, ttfb: float | None, *, failed: bool) -> Judgement:
        """Count one streamed call of ``key`` (its first-byte time, or that it failed) and judge."""
        target = self.target(key)
        if target is None:
            return _UNKNOWN
        table = self._samples
        samples = table.get(key)
        if samples is None:
            samples = table[key] = deque(maxlen=MAX_SAMPLES)
            if len(table) > MAX_BREAKERS:
                table.popitem(last=False)
        else:
            table.move_to_end(key)
        if failed or ttfb is None:
            samples.append((now, _FAILED))
        else:
            samples.append((now, ttfb))
        return self._judge(samples, now, target)

    def forget(self, key: str) -> None:
        """Start ``key``'s window afresh (it was opened: what came before is judged already)."""
        self._samples.pop(key, None)

    def _judge(self, samples: deque[tuple[float, float]], now: float, target: float) -> Judgement:
        policy = self._policy
        horizon = now - policy.window
        while samples and samples[0][0] <= horizon:
            samples.popleft()
        if len(samples) < policy.min_requests:
            return _UNKNOWN
        times = [ttfb for _, ttfb in samples if ttfb != _FAILED]
        failures = len(samples) - len(times)
        if not times:
            return _UNKNOWN  # every call failed: the classic rules judge that
        # The p90 by the nearest-rank rule: the smallest value at least 90 % of them reach.
        above = len(times) - math.ceil(0.9 * len(times)) + 1
        p90 = heapq.nlargest(above, times)[-1]
        if p90 > policy.slow_factor * target:
            if failures > policy.slow_error_rate * len(samples):
                return Judgement("open", p90)
            return Judgement("slow", p90)
        if p90 <= target:
            return Judgement("normal", p90)
        return Judgement("unknown", p90)  # between the target and the factor: keep the mark as it is
