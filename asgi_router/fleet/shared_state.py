"""``SharedState``: the router's state shared by every process that names the same Redis.

It *is* an :class:`~asgi_router.resilience.router_state.InMemoryState`: every question a request asks
is answered from this process's own view, synchronously, exactly as in one process. What is
shared is kept fresh in the background:

* **Breakers.** A failure is written to the store (``scripts.BREAKER``) as it is recorded here
  (a burst of one breaker's failures coalesced into one write, ``breaker_writes.py``);
  the store counts failures in a row across the fleet and opens the breaker at the policy's
  count, whichever process failed. A change of phase is published, and every process adopts
  it as the message arrives. A success costs nothing unless the fleet's count is above zero
  (then one write resets it). Once an open breaker's time is up, a process that meets it asks
  the store for one of the ``half_open_probes`` slots (in the background; that request is
  skipped as ``circuit_open``) and only a process holding a slot sends a probe: the probes are
  counted fleet-wide. The failure-rate rule is judged on each process's own calls (counting
  the fleet's successes would cost a write per success); an opening it decides is shared.
* **Recovery and slowness.** The store closes a breaker and starts its ramp (``breaker.py``) in
  one step, so every process admits the same share from the same moment. Successes in a row
  are counted by each process on its own (a success still costs no round trip); the process
  that reaches ``ramp_successes`` writes ``advance`` from the step it counted on, which the
  store takes unless the fleet is past that step already, and publishes. Time advances a step
  in every process alike (each converts the step's age to its own clock). A slow mark is written
  when it is set, lifted, or renewed by more than half a ``window``, and published; an opening
  by the slowness rule carries its cause and p90.
* **Rotation.** :meth:`fleet_rotation` is one atomic ``INCR`` per request of a rotate group,
  the one round trip a request may wait for, at most ``link.REQUEST_TIMEOUT``.
* **Budgets.** Leased slices (``budgets.py``).
* **Providers' stated limits.** Marks published on the same channel (``shared_rate_limits.py``).

Every answer from the store carries a version (the store's clock in microseconds, never lower
than the key's last): an answer older than what this process has already adopted is ignored, so
a reply and a message arriving out of order never move a breaker backwards.

While the store is unreachable (``link.py``) nothing is written or waited for: the process runs
on its own view, as a single process does, and adopts the store's view again when it is back.
Local by design: in-flight counts and ``max_concurrent``, the retry budget, TTFB averages and
hedge credit protect or describe this process only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Final

from redis.asyncio import Redis

from asgi_router.config.resilience_settings import BreakerSettings
from asgi_router.fleet.breaker_writes import NO_EXTRA, BreakerWrites, Extra
from asgi_router.fleet.budgets import Leases
from asgi_router.fleet.link import Link, read_message
from asgi_router.fleet.scripts import RESYNC
from asgi_router.fleet.shared_rate_limits import FleetRateLimits
from asgi_router.resilience.breaker import ADMITTED, Admission, Cause, Phase, Verdict
from asgi_router.resilience.router_state import MAX_BREAKERS, InMemoryState
from asgi_router.resilience.stats import Limits, WindowUsage

__all__ = ["CLAIM_PAUSE", "RESYNC_BATCH", "ROTATION_TTL", "SharedState"]

#: Seconds a rotate counter outlives its group's last request.
ROTATION_TTL: Final = 86_400
#: Seconds between two asks of one process for a half-open breaker's probe slot.
CLAIM_PAUSE: Final = 0.1


#: Breakers read per call when the store is (again) reachable.
RESYNC_BATCH: Final = 500


class SharedState(InMemoryState):
    """:class:`~asgi_router.resilience.router_state.RouterState` shared through Redis at ``url``.

    ``prefix`` starts every key (two gateways on one Redis keep apart by it); ``policy`` is the
    breaker policy (the keys' time to live follows it); ``budgets`` are the members with an
    rpm/tpm budget, whose usage is leased in slices (``budgets.py``).
    """

    #: The status page labels breakers and budgets as the fleet's (``resilience/overview.py``).
    shared = True

    def __init__(
        self,
        url: str,
        prefix: str,
        policy: BreakerSettings,
        budgets: dict[str, Limits] | None = None,
        clock: Callable[[], float] = time.monotonic,
        half_life: float = 60.0,
    ) -> None:
        super().__init__(clock, half_life)
        self._prefix = prefix
        self._policy = policy
        ramp = policy.ramp_step * len(policy.ramp)  # a ramp's state outlives the ramp
        self._ttl = math.ceil(max(policy.max_open_for, policy.window, policy.probe_timeout, ramp)) * 2 + 60
        self.link = Link(url, f"{prefix}:breakers", on_up=self._resync, on_message=self._on_message, clock=clock)
        self._leases = Leases(self.link, prefix, clock, dict(budgets or {}))
        #: The newest version adopted per breaker.
        self._versions: dict[str, int] = {}
        #: Half-open probe slots the store granted to this process.
        self._slots: set[str] = set()
        self._claiming: set[str] = set()
        #: When a process refused a probe slot may ask for one again (bounded like the versions).
        self._claim_after: dict[str, float] = {}
        #: Per candidate, until when the slow mark last written to the store holds.
        self._slow_sent: dict[str, float] = {}
        self._writes = BreakerWrites(self.link, prefix, self._ttl, self._answered, self._claiming.discard)
        #: Providers' stated limits, shared on the same channel (``shared_rate_limits.py``).
        self.rate_limits = FleetRateLimits(self.link, f"{prefix}:breakers")

    # --- lifespan -------------------------------------------------------------------------------

    def start(self) -> None:
        """Connect now (lifespan startup); without a lifespan the first request connects."""
        self.link.start()

    async def aclose(self) -> None:
        await self.link.aclose()

    # --- rotation -------------------------------------------------------------------------------

    def fleet_rotation(self, key: str) -> Callable[[], Awaitable[int]]:
        name = f"{self._prefix}:rot:{key}"

        async def increment(client: Redis) -> int:
            async with client.pipeline(transaction=False) as pipe:
                pipe.incr(name)
                pipe.expire(name, ROTATION_TTL)
                value, _ = await pipe.execute()
            return int(value) - 1

        async def next_value() -> int:
            value = await self.link.call(increment, request=True)
            return self.next_rotation(key) if value is None else value

        return next_value

    # --- breakers -------------------------------------------------------------------------------

    def admit(self, key: str, policy: BreakerSettings, now: float, *, force: bool = False) -> Admission:
        breaker = self._breakers.get(key)
        if breaker is None:
            return ADMITTED
        if force or breaker.phase is Phase.CLOSED or not self.link.up:
            return breaker.admit(now, force=force)
        # Open or half-open with the fleet: a probe needs one of the fleet's slots.
        opened_at = breaker.opened_at
        if breaker.phase is Phase.OPEN and opened_at is not None and now < opened_at + breaker.open_for:
            return Admission(False, opened_at=opened_at, cause=breaker.cause)
        if key in self._slots:
            self._slots.discard(key)
            return breaker.admit(now, force=True)
        if key not in self._claiming and now >= self._claim_after.get(key, 0.0):
            self._claiming.add(key)
            self._claim_after[key] = now + CLAIM_PAUSE  # the slots are taken: ask again a little later
            self._write(key, policy, "claim")
        return Admission(False, opened_at=opened_at, cause=breaker.cause)

    def record(self, key: str, policy: BreakerSettings, now: float, verdict: Verdict, *, probe: bool) -> None:
        breaker = self._breakers.get(key)
        was_closed = breaker is None or breaker.phase is Phase.CLOSED
        counted = breaker is not None and breaker.consecutive_failures > 0
        # The step this success counts toward (time may have moved it on since the last call).
        step = breaker.ramp_step if breaker is not None and was_closed and breaker.share(now) < 1.0 else None
        super().record(key, policy, now, verdict, probe=probe)
        if not self.link.up or verdict == "neutral":
            return
        if step is not None and verdict == "success":
            after = self._breakers[key]
            if after.phase is Phase.CLOSED and after.ramp_step != step:
                self._write(key, policy, "advance", extra=("failures", "", step, 0.0))
        if probe:
            self._write(key, policy, "probe_ok" if verdict == "success" else "probe_fail")
        elif verdict == "failure" and was_closed:
            opened = self._breakers[key].phase is not Phase.CLOSED  # by this process's failure-rate rule
            self._write(key, policy, "fail", opened=opened)
        elif verdict == "success" and was_closed and counted:
            self._write(key, policy, "ok")

    def trip(
        self, key: str, policy: BreakerSettings, now: float, cause: Cause = "failures", p90: float | None = None
    ) -> None:
        super().trip(key, policy, now, cause, p90)
        self._write(key, policy, "trip", extra=(cause, "" if p90 is None else f"{p90:.6f}", -1, 0.0))

    def mark_slow(self, key: str, until: float | None) -> None:
        now = self._clock()
        was = self.slow(key, now)
        super().mark_slow(key, until)
        if until is None:
            if was or key in self._slow_sent:
                self._slow_sent.pop(key, None)
                self._write(key, self._policy, "slow", extra=("failures", "", -1, 0.0))
            return
        sent = self._slow_sent.get(key)
        if sent is None or sent <= now or until - sent > self._policy.window / 2:
            if len(self._slow_sent) >= MAX_BREAKERS:
                self._slow_sent.clear()  # bounded like the table: a mark may then be written again
            self._slow_sent[key] = until
            self._write(key, self._policy, "slow", extra=("failures", "", -1, until - now))

    def recover(self, key: str, policy: BreakerSettings, now: float) -> None:
        super().recover(key, policy, now)
        if key in self._breakers:
            self._write(key, policy, "recover")

    def _write(
        self, key: str, policy: BreakerSettings, op: str, *, opened: bool = False, extra: Extra = NO_EXTRA
    ) -> None:
        """One breaker operation for the store, written in the background (``breaker_writes.py``)."""
        self._writes.write(key, policy, op, opened=opened, extra=extra)

    def _answered(self, key: str, answer: list[Any]) -> None:
        """The store's answer to a write: its view of ``key``, and whether it granted a probe slot."""
        phase, age, open_for, consecutive, version, granted, *rest = answer
        self._adopt(key, phase, age, open_for, consecutive, version, *rest)
        if int(granted):
            self._slots.add(key)
            self._claim_after.pop(key, None)

    def _adopt(
        self,
        key: str,
        phase: Any,
        age: Any,
        open_for: Any,
        consecutive: Any,
        version: Any,
        cause: Any = "failures",
        p90: Any = "",
        step: Any = -1,
        step_age: Any = 0,
        slow_left: Any = 0,
    ) -> None:
        """Take the store's view of ``key``'s breaker (its ramp step and slow mark with it) unless
        this process has a newer one."""
        version = int(version)
        if version <= self._versions.get(key, 0):
            return
        if len(self._versions) >= 2 * MAX_BREAKERS:
            self._versions.clear()  # bounded like the table; an old answer may then be adopted once
            self._claim_after.clear()
        self._versions[key] = version
        decoded = Phase(phase.decode() if isinstance(phase, bytes) else phase)
        breaker = self._breaker(key, self._policy)
        if decoded is not breaker.phase:
            self._slots.discard(key)
        now = self._clock()
        opened_at = None if decoded is Phase.CLOSED else now - float(age)
        ramp_step = int(step)
        why = _text(cause)
        breaker.adopt(
            decoded,
            opened_at,
            float(open_for),
            int(consecutive),
            cause="slow" if why == "slow" else "failures",
            ramp_step=ramp_step if ramp_step >= 0 else None,
            ramp_since=now - float(step_age) if ramp_step >= 0 else None,
            p90=float(p90) if _text(p90) else None,
        )
        left = float(slow_left)
        InMemoryState.mark_slow(self, key, now + left if left > 0 else None)
        if left <= 0:
            self._slow_sent.pop(key, None)

    def _on_message(self, data: bytes) -> None:
        """A breaker changed phase somewhere in the fleet (or a member hit its provider's limit)."""
        if self.rate_limits.heard(data):
            return
        try:
            key, phase, age, open_for, consecutive, version, *rest = read_message(data)
            if any(float(figure) < 0 for figure in (age, open_for, consecutive, version)):
                return  # not a breaker any process wrote: ignored whole
            self._adopt(str(key), str(phase), age, open_for, consecutive, version, *rest)
        except (ValueError, TypeError):
            return  # not ours, or garbage: the next resync puts things right

    async def _resync(self, client: Redis) -> None:
        """The store is (again) reachable: adopt every breaker it holds, forget the old slices."""
        self._versions.clear()  # a restarted store counts versions from its own clock again
        self._slots.clear()
        self._claiming.clear()
        self._claim_after.clear()
        # The most recently written breakers only, as many as the table keeps, read in batches
        # by a script: an index that something else filled far past the bound costs a bounded
        # read, and no single call holds Redis (or waits on it) for long.
        for start in range(0, MAX_BREAKERS, RESYNC_BATCH):
            read = await self.link.call(partial(self._adopt_batch, start, min(start + RESYNC_BATCH, MAX_BREAKERS) - 1))
            if not read:  # the index ends here, or the store went down
                break
        self._leases.reset()

    async def _adopt_batch(self, first: int, last: int, client: Redis) -> int:
        """Adopt the breakers ranked ``first`` to ``last`` in the index; how many names it held."""
        index, hashes = f"{self._prefix}:breakers", f"{self._prefix}:br:"
        answer = await client.register_script(RESYNC)(keys=[index], args=[hashes, first, last])
        seconds, micros, held, found = answer
        now = float(seconds) + float(micros) / 1e6
        for name, phase, opened_at, open_for, consecutive, version, cause, p90, step, step_at, slow in found:
            closed = phase in (b"closed", "closed")
            age = 0.0 if closed else now - float(opened_at)
            step_age = now - float(step_at) if int(step) >= 0 else 0.0
            slow_left = max(0.0, float(slow) - now)
            self._adopt(_text(name), phase, age, open_for, consecutive, version, cause, p90, step, step_age, slow_left)
        return int(held)

    # --- budgets --------------------------------------------------------------------------------

    def begin_attempt(self, provider: str, limit: int | None) -> bool:
        self.link.ensure()  # every attempt passes here: a loop's first request connects it
        return super().begin_attempt(provider, limit)

    def within_budget(self, key: str, limits: Limits, tokens: int) -> bool:
        decided = self._leases.within(key, limits, tokens)
        return super().within_budget(key, limits, tokens) if decided is None else decided

    def add_usage(self, key: str, requests: int, tokens: int) -> None:
        super().add_usage(key, requests, tokens)
        self._leases.spend(key, requests, tokens)

    def usage(self, key: str) -> WindowUsage:
        local = super().usage(key)
        fleet = self._leases.usage(key)
        if fleet is None:
            return local
        return WindowUsage(max(local.requests, fleet.requests), max(local.tokens, fleet.tokens))

    def usage_frees_in(self, key: str) -> float:
        fleet = self._leases.frees_in(key)
        return super().usage_frees_in(key) if not fleet else fleet


def _text(value: Any) -> str:
    """A string the store answered (bytes from a reply, str from a message)."""
    return value.decode() if isinstance(value, bytes) else str(value)
