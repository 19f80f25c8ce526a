"""rpm/tpm budgets across a fleet: each process spends a slice of the budget leased from Redis.

Two designs were measured (``python -m bench``'s ``fleet`` part, see the Performance page): an
exact check, one atomic script per request that sums the window and counts the request, and
leased slices. The exact check puts a Redis round trip on every request of a budgeted member, on
the request's path; a slice puts one round trip on every few percent of the budget, in the
background, and the request only compares two integers. Slices were chosen: the hot path never
waits on Redis, and the bound holds by construction, since the store never grants more than the
budget holds.

How a slice works, per ``provider/model-id`` with a budget:

* A process asks for a slice of about 2 % of the limit (at least one request, and at least the
  tokens the request in hand needs). The script sums the fleet's rolling 60 s window, grants what
  is left up to the slice, and counts the grant as used at once: the fleet together never holds
  more than the limit.
* A request is admitted while the process's slice covers it (one request, its estimated tokens),
  and spends it when it is sent. When the slice runs low (half of it spent) the next one is asked
  for in the background, so under a steady load a request never finds its slice empty while the
  fleet's budget lasts. When the store grants nothing, the process stops asking until the
  window frees up.
* What a process used beyond its slice (a token count corrected upward once the response was
  read, a race between two requests of one process) is a debt, counted with its next ask.
* A process asks for a member's first slice when a request first needs it, not before: an idle
  process holds nothing back from the others (small budgets would otherwise be spread over
  processes that serve none of it). Until that first answer, the member admits one request on
  the process's own view, counted as a debt with the ask. While the store is unreachable the
  process enforces the whole budget on its own view (as a single process does).

A slice not spent stays counted until it leaves the window: a fleet may serve a little *under*
its budget (at most a slice per process), never over it while Redis answers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

from redis.asyncio import Redis

from asgi_router.fleet.link import Link
from asgi_router.fleet.scripts import LEASE
from asgi_router.resilience.stats import USAGE_WINDOW, Limits, WindowUsage

__all__ = ["SLICE", "Leases"]

#: The share of a limit leased at a time.
SLICE: Final = 0.02


class _Slice:
    """What one process holds of one member's budget."""

    __slots__ = ("asking", "exhausted_until", "known", "low_requests", "low_tokens", "requests", "tokens", "used")

    def __init__(self) -> None:
        self.requests = 0
        self.tokens = 0
        #: An answer arrived since the store was last reachable: the slice, not the local view, decides.
        self.known = False
        self.asking = False
        self.exhausted_until = 0.0
        self.low_requests = 0
        self.low_tokens = 0
        #: The fleet's usage in the window, as of the last answer.
        self.used = WindowUsage()


class Leases:
    """The slices this process holds, keyed by ``provider/model-id``."""

    def __init__(self, link: Link, prefix: str, clock: Callable[[], float], budgets: dict[str, Limits]) -> None:
        self._link = link
        self._prefix = prefix
        self._clock = clock
        self._budgets = budgets
        self._slices: dict[str, _Slice] = {key: _Slice() for key in budgets}

    def reset(self) -> None:
        """The store was (re)connected: forget every slice (the next request asks for a new one)."""
        self._slices = {key: _Slice() for key in self._budgets}

    def within(self, key: str, limits: Limits, tokens: int) -> bool | None:
        """Whether the slice covers one more request of ``tokens``; ``None``: the local view decides."""
        held = self._slices.get(key)
        if held is None or not self._link.up:
            return None
        if not held.known:
            if not held.asking:
                self._ask(key, held, limits, tokens)
            return None if held.requests >= 0 else False  # one request on the local view, until the answer
        covered = (limits.rpm is None or held.requests >= 1) and (limits.tpm is None or held.tokens >= tokens)
        low = not covered or held.requests <= held.low_requests or held.tokens <= held.low_tokens
        if low and not held.asking and self._clock() >= held.exhausted_until:
            self._ask(key, held, limits, tokens)
        return covered

    def spend(self, key: str, requests: int, tokens: int) -> None:
        """Count a request sent (or a token correction) against the slice; below zero is a debt."""
        held = self._slices.get(key)
        if held is not None:
            held.requests -= requests
            held.tokens -= tokens

    def usage(self, key: str) -> WindowUsage | None:
        """The fleet's usage as of the last answer, when one is known."""
        held = self._slices.get(key)
        return held.used if held is not None and held.known and self._link.up else None

    def frees_in(self, key: str) -> float | None:
        """Seconds until the fleet's window frees up, when the store said it is spent."""
        held = self._slices.get(key)
        if held is None or not held.known or not self._link.up:
            return None
        return max(0.0, held.exhausted_until - self._clock())

    def _ask(self, key: str, held: _Slice, limits: Limits, tokens: int) -> None:
        held.asking = True
        want_requests = max(1, math.ceil((limits.rpm or 0) * SLICE))
        want_tokens = max(tokens, math.ceil((limits.tpm or 0) * SLICE), 1)
        held.low_requests = want_requests // 2 if limits.rpm is not None else -(10**9)
        held.low_tokens = want_tokens // 2 if limits.tpm is not None else -(10**9)
        # What was spent beyond the slice goes to the store with this ask.
        debt_requests, debt_tokens = max(0, -held.requests), max(0, -held.tokens)
        held.requests += debt_requests
        held.tokens += debt_tokens
        keys = [f"{self._prefix}:use:{key}:r", f"{self._prefix}:use:{key}:t"]
        args: list[str | int | float] = [
            -1 if limits.rpm is None else limits.rpm,
            -1 if limits.tpm is None else limits.tpm,
            want_requests,
            want_tokens,
            debt_requests,
            debt_tokens,
            USAGE_WINDOW,
        ]
        slices = self._slices

        async def ask(client: Redis) -> None:
            try:
                answer = await client.register_script(LEASE)(keys=keys, args=args)
                granted_requests, granted_tokens, used_requests, used_tokens, frees_in = (int(n) for n in answer)
            finally:
                held.asking = False
            if slices is not self._slices:
                return  # reset meanwhile: this slice belongs to the store's previous life
            held.requests += granted_requests if limits.rpm is not None else 0
            held.tokens += granted_tokens if limits.tpm is not None else 0
            held.used = WindowUsage(max(0, used_requests), max(0, used_tokens))
            held.known = True
            spent = (limits.rpm is not None and granted_requests == 0 and held.requests < 1) or (
                limits.tpm is not None and granted_tokens == 0 and held.tokens < max(1, tokens)
            )
            held.exhausted_until = self._clock() + max(1, frees_in) if spent else 0.0

        if not self._link.spawn(ask) or not self._link.up:
            held.asking = False
