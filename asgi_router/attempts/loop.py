"""The attempt loop: try a plan's candidates in order until one commits.

For each candidate: splice its model id into the wire body and check it there (target guard),
send, classify, and either move on or stop (``steps.py`` does each step, ``call.py`` the call
itself). Nothing has been sent to the client while this runs, which is what makes failover
safe. What a status or failure means, and which reasons fail over by default, is decided in
:mod:`asgi_router.core.classify`.

Resilience, in :meth:`AttemptLoop.run`: a candidate may be retried in place ``plan.retries``
times when the reason is in ``retry_on`` (never for a client that says it retries on its own,
as the official SDKs do with ``x-stainless-retry-count``: its tries would multiply ours), after
the upstream's hint (``hints.py``) or a full-jitter backoff, within the provider's retry budget;
``max_attempts`` and the request ``deadline`` bound the whole walk, backoff included. If every
candidate was skipped for an open breaker, the one that opened longest ago is tried anyway: a
plan is never failed without a try because of breakers alone. A hedged group races instead of
retrying in place (``hedging.py``: the race is its second chance); the budgets and the all-open
rule apply to it too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from asgi_router.attempts.context import AttemptContext
from asgi_router.attempts.hedging import race
from asgi_router.attempts.outcomes import Committed, Refused
from asgi_router.attempts.steps import Flight, RequestAttempts
from asgi_router.core.candidate import Candidate
from asgi_router.core.header_names import client_retries
from asgi_router.core.router_errors import RouterError
from asgi_router.core.skip import Skip
from asgi_router.inbound.body import InboundRequest
from asgi_router.observability.events import RequestRecord
from asgi_router.routing.facts import EMPTY_FACTS, RequestFacts
from asgi_router.routing.plan import Plan

if TYPE_CHECKING:  # only a router whose tracing is on passes one (opentelemetry is optional)
    from asgi_router.observability.tracing import RequestTrace

__all__ = ["AttemptLoop"]


class AttemptLoop:
    """Runs plans through a router's :class:`AttemptContext`; one per router, no per-request state."""

    def __init__(self, context: AttemptContext) -> None:
        self.context = context

    async def run(
        self,
        plan: Plan,
        request: InboundRequest,
        route: str,
        inbound: Sequence[tuple[bytes, bytes]],
        record: RequestRecord,
        flight: Flight,
        facts: RequestFacts = EMPTY_FACTS,
        trace: RequestTrace | None = None,
    ) -> Committed | Refused | RouterError:
        """Try ``plan`` until a candidate commits, refuses, or every candidate has failed
        (each call a span of ``trace``, when the request is traced)."""
        context = self.context
        deadline = context.clock() + context.policy.deadline
        attempts = RequestAttempts(context, plan, request, route, inbound, record, flight, facts, deadline, trace)
        policy = plan.policy
        decided: Committed | Refused | RouterError | None = None
        if plan.hedged:
            assert policy is not None
            decided = await race(attempts, policy, context.book.stats, context.clock)
        elif plan.retries == 0 or client_retries(inbound):
            # No retries in place (every multi-member group by default, and every request from a
            # client that retries on its own: its tries times ours would multiply the load on a
            # failing upstream): each candidate is one prepare, call, settle.
            for candidate in plan.candidates:
                ready = attempts.prepare(candidate)
                if ready is not None:
                    decided = attempts.settle(ready, await attempts.attempt(ready))
                if decided is not None or attempts.stopped:
                    break
        else:
            for candidate in plan.candidates:
                decided = await self._candidate(attempts, candidate, plan.retries)
                if decided is not None or attempts.stopped:
                    break
        if decided is None:
            oldest = attempts.oldest_open()
            if oldest is not None:
                # Every candidate was skipped for an open breaker: failing untried would make the
                # breakers the outage. Try the one that opened longest ago, as its probe.
                decided = await self._candidate(attempts, oldest, 0, force=True)
        return decided if decided is not None else attempts.exhausted()

    async def _candidate(
        self, attempts: RequestAttempts, candidate: Candidate, retries: int, *, force: bool = False
    ) -> Committed | Refused | RouterError | None:
        """Attempt ``candidate`` and retry it in place up to ``retries`` times; ``None``: move on."""
        ready = attempts.prepare(candidate, force=force)
        retry = 0
        token = False  # a retry token of the provider's budget, held until the retry has ended
        try:
            while ready is not None:
                result = await attempts.attempt(ready)
                if token:
                    token = False
                    self.context.gate.end_retry(candidate.provider)
                decided = attempts.settle(ready, result)
                if decided is not None or retry >= retries:
                    return decided
                wait = attempts.retry_wait(result, retry)
                if wait is None:
                    return None
                if not self.context.gate.begin_retry(candidate.provider):
                    attempts.skip(ready.key, Skip("budget_exhausted"))
                    return None
                token = True
                retry += 1
                await asyncio.sleep(wait)  # cancelled at once if the client disconnects
                ready = attempts.prepare(candidate, retry=True)
            return None
        finally:
            if token:
                self.context.gate.end_retry(candidate.provider)
