"""Breaker operations written to the fleet's store in the background, coalesced per breaker.

A request never waits for the store: what it changes in a breaker (a failure, a probe's result,
a trip, a slow mark, a recovery's step) is handed to :class:`BreakerWrites`, which runs the
breaker script (``scripts.BREAKER``) on the link's background task and hands the store's answer
back to the state that adopts it (``shared_state.py``). The write queue is kept apart from that
state because it has its own rule: a burst of one breaker's failures must cost one round trip,
not one per failure, and no breaker may queue without bound.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Final

from redis.asyncio import Redis
from redis.commands.core import AsyncScript

from asgi_router.config.resilience_settings import BreakerSettings
from asgi_router.fleet.link import Link
from asgi_router.fleet.scripts import BREAKER
from asgi_router.resilience.router_state import MAX_BREAKERS

__all__ = ["MAX_QUEUED_OPS", "NO_EXTRA", "BreakerWrites", "Extra"]

#: Distinct operations one breaker may have waiting for their turn (past it, one is dropped).
MAX_QUEUED_OPS: Final = 8

#: An operation's own arguments: a trip's cause and p90, the step an advance starts from, the
#: seconds a slow mark holds.
Extra = tuple[str, str, int, float]
NO_EXTRA: Final[Extra] = ("failures", "", -1, 0.0)


class _Op:
    """One breaker operation waiting for its turn, and how many times it happened meanwhile."""

    __slots__ = ("count", "extra", "op", "opened")

    def __init__(self, op: str, opened: bool, extra: Extra = NO_EXTRA) -> None:
        self.op = op
        self.count = 1
        self.opened = opened
        self.extra = extra


class BreakerWrites:
    """The background writes of every breaker of one state, through ``link``.

    ``answered(key, answer)`` gets the script's answer to each operation; ``claim_ended(key)``
    is told when a ``claim`` for a probe slot is over, answered or not (the process may ask
    again); ``ttl`` is the breaker keys' time to live in the store.
    """

    def __init__(
        self,
        link: Link,
        prefix: str,
        ttl: int,
        answered: Callable[[str, list[Any]], None],
        claim_ended: Callable[[str], None],
    ) -> None:
        self._link = link
        self._prefix = prefix
        self._ttl = ttl
        self._answered = answered
        self._claim_ended = claim_ended
        #: Per breaker, the operations waiting for their write's turn.
        self._queued: dict[str, list[_Op]] = {}
        self._scripts: weakref.WeakKeyDictionary[Redis, AsyncScript] = weakref.WeakKeyDictionary()

    def write(
        self, key: str, policy: BreakerSettings, op: str, *, opened: bool = False, extra: Extra = NO_EXTRA
    ) -> None:
        """Run one breaker operation in the store, in the background.

        Coalesced per breaker: while a write of ``key`` waits for its turn, the operations that
        follow join it (a repeat of the last one only raises its count), so a burst of failures
        costs one write per breaker, not one per failure (``link.MAX_BACKGROUND`` bounds the
        writes in flight across breakers).
        """
        if not self._link.up:
            self._claim_ended(key)  # no claim can be answered now
            return
        queued = self._queued.get(key)
        if queued is not None:
            last = queued[-1]
            if last.op == op and last.extra == extra and op != "claim":
                last.count += 1
                last.opened = last.opened or opened
            elif len(queued) < MAX_QUEUED_OPS:
                queued.append(_Op(op, opened, extra))
            elif op == "claim":
                self._claim_ended(key)  # dropped: this process may ask again
            return
        self._queued[key] = [_Op(op, opened, extra)]
        keys = [f"{self._prefix}:br:{key}", f"{self._prefix}:breakers"]

        async def run(client: Redis) -> None:
            for step in self._queued.pop(key, []):  # taken as its turn comes: later ones queue anew
                try:
                    answer = await self._script(client)(keys=keys, args=self._args(key, policy, step))
                finally:
                    if step.op == "claim":
                        self._claim_ended(key)
                self._answered(key, answer)

        def skipped() -> None:
            if any(step.op == "claim" for step in self._queued.pop(key, [])):
                self._claim_ended(key)

        if not self._link.spawn(run, skipped=skipped):
            skipped()

    def _args(self, key: str, policy: BreakerSettings, step: _Op) -> list[str | int | float]:
        """``scripts.BREAKER``'s arguments for ``step`` on ``key``."""
        cause, p90, from_step, slow_for = step.extra
        return [
            step.op,
            policy.consecutive_failures,
            policy.open_for,
            policy.probe_interval,
            policy.half_open_probes,
            policy.probe_timeout,
            self._ttl,
            MAX_BREAKERS,
            f"{self._prefix}:breakers",
            key,
            "1" if step.opened else "0",
            f"{self._prefix}:br:",
            step.count,
            len(policy.ramp),
            policy.ramp_step,
            cause,
            p90,
            from_step,
            slow_for,
        ]

    def _script(self, client: Redis) -> AsyncScript:
        script = self._scripts.get(client)
        if script is None:
            script = self._scripts[client] = client.register_script(BREAKER)
        return script
