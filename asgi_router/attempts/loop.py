"""The attempt loop: drive a plan's candidates in order until one commits.

For each candidate: admit it or skip it, call it, and do what the decision point
(``decisions.py``) answers: commit, pass through, retry in place after a wait, fail over, or
stop. ``steps.py`` does and records each step, ``call.py`` the call itself; this module only
drives. Nothing has been sent to the client while this runs, which is what makes failover
safe.

Driving, in :meth:`AttemptLoop.run`: a plan whose candidates may be retried in place (the
decision point says how often: never for a client that retries on its own) runs each candidate
through :meth:`AttemptLoop._candidate`, which holds the retry-budget token of a retry until it
has ended and sleeps the answered wait; other plans run each candidate once. When the walk ends
with nothing decided, the decision point may name a candidate to try anyway (every candidate
skipped for an open or recovering breaker: the one that opened, or began its ramp, longest ago,
as its probe). Candidates marked slow are tried after the others, as the decision point orders
them. A hedged group
races instead of retrying in place (``hedging.py``: the race is its second chance); the budgets
and the all-open rule apply to it too.

A group with a ``queue`` whose walk found no capacity waits in it (``capacity_queue.py``); at the
head, each re-check is a new plan from the pipeline's plan phase (the ``replan`` it is given), its
sticky member first again, walked as a fresh pass: a plan made before the wait would keep an order
the strategy no longer gives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from asgi_router.attempts.capacity import Capacity, Stuck, header_value
from asgi_router.attempts.capacity_queue import CapacityQueue
from asgi_router.attempts.context import AttemptContext
from asgi_router.attempts.decisions import Retry
from asgi_router.attempts.hedging import race
from asgi_router.attempts.outcomes import Committed, Refused
from asgi_router.attempts.steps import RequestAttempts
from asgi_router.core.candidate import Candidate
from asgi_router.core.router_errors import RouterError
from asgi_router.inbound.body import InboundRequest
from asgi_router.request.request_state import RequestState
from asgi_router.routing.facts import EMPTY_FACTS, RequestFacts
from asgi_router.routing.plan import Plan

__all__ = ["AttemptLoop"]


class AttemptLoop:
    """Runs plans through a router's :class:`AttemptContext`; one per router, no per-request state."""

    def __init__(self, context: AttemptContext, capacity: Capacity | None = None) -> None:
        self.context = context
        #: Sticky sessions and queues of the groups that configure them (``None``: no group does).
        self.capacity = capacity

    async def run(
        self,
        plan: Plan,
        request: InboundRequest,
        state: RequestState,
        facts: RequestFacts = EMPTY_FACTS,
        replan: Callable[[RequestState, InboundRequest], Awaitable[Plan | RouterError]] | None = None,
    ) -> tuple[Plan, Committed | Refused | RouterError]:
        """Try ``plan`` until a candidate commits, refuses, or every candidate has failed
        (each call a span of the request's trace, when it is traced).

        ``replan`` is the pipeline's plan phase, asked again (with ``state`` and ``request``)
        for a request that waited for capacity; without it the old plan is walked again.
        """
        context = self.context
        inbound = state.scope["headers"]
        deadline = context.clock() + context.policy.deadline
        capacity, stuck, queue = self.capacity, None, None
        group = plan.policy
        planned_as = plan  # the plan the answer reads: the request's own, or the one made again
        if capacity is not None and group is not None:  # a group's plan: sticky? queued?
            if capacity.fleet is not None and group.sticky is not None:  # the one awaited look-up
                plan, stuck = await capacity.stick_shared(plan, request.payload, inbound, state.principal)
            else:
                plan, stuck = capacity.stick(plan, request.payload, inbound, state.principal)
            queue = capacity.queues.get(group.name) if group.queue is not None else None
        attempts = RequestAttempts(context, plan, request, state, facts, deadline)
        decided: Committed | Refused | RouterError | None = None
        walked = queue is None or queue.head() is None  # with requests waiting, a newcomer waits behind them
        if walked:
            decided = await self._walk(attempts, plan, inbound)
        waits = queue is not None and (not walked or (decided is None and attempts.capacity_only()))
        if waits and queue is not None and capacity is not None:
            # An object, not a closure: the variables a nested function captures are cells made
            # on every call of this one, held while every request waits for its upstream.
            planned = None if replan is None else _Replanned(replan, state, request, capacity, stuck)
            decided, attempts = await self._wait(queue, attempts, walked, planned)
            if planned is not None:
                stuck = planned.stuck
                if planned.plan is not None:
                    planned_as = planned.plan
        if decided is None:
            oldest = attempts.oldest_open()
            if oldest is not None:
                # Every candidate was skipped for an open (or recovering) breaker: failing untried would make the
                # breakers the outage. Try the one that opened longest ago, as its probe.
                decided = await self._candidate(attempts, oldest, 0, force=True)
        if decided is None:
            decided = attempts.exhausted()
        if stuck is not None and capacity is not None:  # every answer of a keyed request says how it stuck
            state.sticky = (stuck.group, capacity.answered(stuck, decided))
        return planned_as, decided

    async def _walk(
        self, attempts: RequestAttempts, plan: Plan, inbound: Sequence[tuple[bytes, bytes]]
    ) -> Committed | Refused | RouterError | None:
        """One pass over ``plan``'s candidates; ``None``: none committed or refused."""
        context = self.context
        policy = plan.policy
        decided: Committed | Refused | RouterError | None = None
        if plan.hedged:
            assert policy is not None
            decided = await race(attempts, policy, context.book.stats, context.clock)
        elif (retries := context.decisions.retries_in_place(plan, inbound)) == 0:
            # Each candidate is one prepare, call, settle (every multi-member group by default).
            for candidate in attempts.candidates():
                ready = attempts.prepare(candidate)
                if ready is not None:
                    result = await attempts.attempt(ready)
                    decided = attempts.outcome(attempts.settle(ready, result), result)
                if decided is not None or attempts.stopped:
                    break
        else:
            for candidate in attempts.candidates():
                decided = await self._candidate(attempts, candidate, retries)
                if decided is not None or attempts.stopped:
                    break
        return decided

    async def _wait(
        self,
        queue: CapacityQueue,
        first: RequestAttempts,
        walked: bool,
        planned: Callable[[], Awaitable[Plan | RouterError]] | None,
    ) -> tuple[Committed | Refused | RouterError | None, RequestAttempts]:
        """Wait in ``queue`` for capacity; at the head, plan the request again (``planned``; the
        old plan when there is none) and walk the new plan. What came of the last walk, and its
        pass (``first``, the request's own, when the queue was full)."""
        clock = self.context.clock
        plan, state, inbound = first.plan, first.state, first.inbound
        settings = queue.settings
        group = plan.policy.name if plan.policy is not None else ""
        priority = queue.priority(header_value(inbound, settings.priority_header.encode("latin-1")), state.principal)
        joined = clock()
        ticket = queue.join(priority)
        if ticket is None:
            state.queued = (group, "full", 0.0)
            queue.recent.append(("full", 0.0))
            decided = None if walked else await self._walk(first, plan, inbound)  # today's answer, and why
            return decided, first
        until = min(joined + settings.max_wait, first.deadline)
        outcome = "left"  # unless the loop below ends otherwise: the client left (cancelled)
        attempts, decided = first, None
        # A request that has just found no capacity pauses before it is planned again; one that
        # joined behind others waits for its turn first.
        pause = first.recheck() if walked else 0.0
        try:
            while True:
                remaining = until - clock()
                if remaining <= 0:
                    outcome = "timed_out"
                    break
                if pause:
                    await asyncio.sleep(min(pause, remaining))
                    pause = 0.0
                    continue
                if not await queue.my_turn(ticket, remaining):
                    continue
                if planned is not None:
                    fresh = await planned()
                    if isinstance(fresh, RouterError):  # its ref no longer resolves: that is its answer
                        decided, outcome = fresh, "served"
                        break
                    plan = fresh
                attempts = first.again(plan, quiet=walked)
                attempts.admitted = partial(queue.leave, ticket)
                decided = await self._walk(attempts, plan, inbound)
                if decided is not None or not attempts.capacity_only():
                    outcome = "served"
                    break
                walked = True  # the skips of the walks after the first are not evented again
                pause = attempts.recheck()
        finally:
            queue.leave(ticket)
            waited = clock() - joined
            state.queued = (group, outcome, waited)
            queue.recent.append((outcome, waited))
        return decided, attempts

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
                answer = attempts.settle(ready, result, retry, retries)
                if not isinstance(answer, Retry):
                    return attempts.outcome(answer, result)
                token = True  # the decision point took it with its answer
                retry += 1
                await asyncio.sleep(answer.wait)  # cancelled at once if the client disconnects
                ready = attempts.prepare(candidate, retry=True)
            return None
        finally:
            if token:
                self.context.gate.end_retry(candidate.provider)


class _Replanned:
    """A queued request's plan phase asked again at the head of its queue, its sticky member
    (if any) first; :attr:`stuck` is how the last plan stuck."""

    __slots__ = ("_capacity", "_replan", "_request", "_state", "plan", "stuck")

    def __init__(
        self,
        replan: Callable[[RequestState, InboundRequest], Awaitable[Plan | RouterError]],
        state: RequestState,
        request: InboundRequest,
        capacity: Capacity,
        stuck: Stuck | None,
    ) -> None:
        self._replan = replan
        self._state = state
        self._request = request
        self._capacity = capacity
        self.stuck = stuck
        #: The last plan made (``None``: none yet).
        self.plan: Plan | None = None

    async def __call__(self) -> Plan | RouterError:
        state = self._state
        fresh = await self._replan(state, self._request)
        if isinstance(fresh, RouterError):
            return fresh
        self.plan = fresh
        if fresh.policy is None:
            return fresh
        capacity = self._capacity
        payload, inbound = self._request.payload, state.scope["headers"]
        if capacity.fleet is not None and fresh.policy.sticky is not None:
            fresh, self.stuck = await capacity.stick_shared(fresh, payload, inbound, state.principal)
        else:
            fresh, self.stuck = capacity.stick(fresh, payload, inbound, state.principal)
        return fresh
