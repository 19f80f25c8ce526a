"""The attempt loop: drive a plan's candidates in order until one commits.

For each candidate: admit it or skip it, call it, and do what the decision point
(``decisions.py``) answers: commit, pass through, retry in place after a wait, fail over, or
stop. ``steps.py`` does and records each step, ``call.py`` the call itself; this module only
drives. Nothing has been sent to the client while this runs, which is what makes failover
safe.

Driving, in :meth:`AttemptLoop.run`: a plan whose candidates may be retried in place (the
decision point says how often: never for a client that retries on its own) runs each candidate
through :meth:`AttemptLoop._candidate`, which sleeps the answered wait (the request's retry
state, ``retry_state.py``, holds the retry-budget token until the retry has ended); other plans
run each candidate once. When the walk ends
with nothing decided, the decision point may name a candidate to try anyway (every candidate
skipped for an open or recovering breaker: the one that opened, or began its ramp, longest ago,
as its probe). Candidates marked slow are tried after the others, as the decision point orders
them. A hedged group
races instead of retrying in place (``hedging.py``: the race is its second chance); the budgets
and the all-open rule apply to it too.

A group with a ``queue`` whose walk found no capacity (or that has requests waiting already)
hands the request to the wait for capacity (``capacity_wait.py``), which plans it again at the
head of the queue through the pipeline's plan phase (``plan_phase.py``: the attempts never call
back into the middleware) and walks each new plan with this loop's pass. The sticky member is
chosen by the plan phase; the loop says how the request stuck once it is decided.

The loop owns every upstream call of a request, before and after commit: a committed stream that
can be continued leaves it with what continues it (``continuing.py``), to which the answer
phase's relay reports a break; the continuation attempts are made there, not by the answer.
"""

from __future__ import annotations

import asyncio

from asgi_router.attempts.capacity import Capacity
from asgi_router.attempts.capacity_wait import CapacityWait
from asgi_router.attempts.context import AttemptContext
from asgi_router.attempts.continuing import Continuations
from asgi_router.attempts.decisions import Retry
from asgi_router.attempts.hedging import race
from asgi_router.attempts.outcomes import Committed, Refused
from asgi_router.attempts.plan_phase import PlanPhase
from asgi_router.attempts.retry_state import RetryState
from asgi_router.attempts.steps import RequestAttempts
from asgi_router.core.candidate import Candidate
from asgi_router.core.router_errors import RouterError
from asgi_router.inbound.body import InboundRequest
from asgi_router.request.request_state import RequestState
from asgi_router.routing.facts import EMPTY_FACTS, RequestFacts
from asgi_router.routing.plan import Plan
from asgi_router.routing.resumable import ResumeTable

__all__ = ["AttemptLoop"]


class AttemptLoop:
    """Runs plans through a router's :class:`AttemptContext`; one per router, no per-request state."""

    def __init__(
        self,
        context: AttemptContext,
        plan_phase: PlanPhase,
        capacity: Capacity | None = None,
        resumes: ResumeTable | None = None,
    ) -> None:
        self.context = context
        #: Continuation attempts of a committed stream that broke (on the candidates ``resumes``
        #: allows): the loop hands each resumable stream it commits what continues it.
        self.continuations = Continuations(context, resumes)
        # Whether any candidate may continue a broken stream: a router without ``resume`` asks nothing.
        self._resumable = resumes is not None and resumes.enabled
        #: The wait for capacity of a queued group's request, which plans it again through the
        #: pipeline's plan phase.
        self.capacity_wait = CapacityWait(plan_phase, context.clock)
        #: Sticky sessions and queues of the groups that configure them (``None``: no group does).
        self.capacity = capacity

    async def run(
        self,
        plan: Plan,
        request: InboundRequest,
        state: RequestState,
        facts: RequestFacts = EMPTY_FACTS,
    ) -> tuple[Plan, Committed | Refused | RouterError]:
        """Try ``plan`` (the plan phase's, its sticky member first) until a candidate commits,
        refuses, or every candidate has failed (each call a span of the request's trace, when it
        is traced); the plan last walked (made again after a wait for capacity), and its outcome.
        """
        context = self.context
        inbound = state.scope["headers"]
        deadline = context.clock() + context.policy.deadline
        capacity, queue, group = self.capacity, None, plan.policy
        if capacity is not None and group is not None and group.queue is not None:
            queue = capacity.queues.get(group.name)
        # The request's retry state, before and after commit.
        retry = RetryState(context.decisions, plan, inbound, deadline, facts, request.stream)
        attempts = RequestAttempts(context, plan, request, state, facts, deadline, retry)
        decided: Committed | Refused | RouterError | None = None
        walked = queue is None or queue.head() is None  # with requests waiting, a newcomer waits behind them
        if walked:
            decided = await self._walk(attempts, plan)
        waits = queue is not None and (not walked or (decided is None and attempts.capacity_only()))
        if waits and queue is not None:
            decided, attempts = await self.capacity_wait(queue, attempts, walked, request, self._walk)
        if decided is None:
            oldest = attempts.oldest_open()
            if oldest is not None:
                # Every candidate was skipped for an open (or recovering) breaker: failing untried would make the
                # breakers the outage. Try the one that opened longest ago, as its probe.
                decided = await self._candidate(attempts, oldest, False, force=True)
        if decided is None:
            decided = attempts.exhausted()
        stuck = state.stuck
        if stuck is not None and capacity is not None:  # every answer of a keyed request says how it stuck
            state.sticky = (stuck.group, capacity.answered(stuck, decided))
        if isinstance(decided, Committed) and decided.refusal is not None:  # an output guardrail refused it
            await attempts.refuse(decided)
            return attempts.plan, decided.refusal
        if self._resumable and request.stream and isinstance(decided, Committed):  # a break is reported back here
            decided.continues = self.continuations.for_stream(attempts.plan, request, state, facts, retry)
        return attempts.plan, decided

    async def _walk(self, attempts: RequestAttempts, plan: Plan) -> Committed | Refused | RouterError | None:
        """One pass over ``plan``'s candidates; ``None``: none committed or refused."""
        context = self.context
        policy = plan.policy
        decided: Committed | Refused | RouterError | None = None
        if plan.hedged:
            assert policy is not None
            decided = await race(attempts, policy, context.book.stats, context.clock)
        elif not attempts.retry.retries:
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
                decided = await self._candidate(attempts, candidate, True)
                if decided is not None or attempts.stopped:
                    break
        return decided

    async def _candidate(
        self, attempts: RequestAttempts, candidate: Candidate, in_place: bool, *, force: bool = False
    ) -> Committed | Refused | RouterError | None:
        """Attempt ``candidate`` and, ``in_place``, retry it as often as the request's retry
        state answers so; ``None``: move on."""
        retry = attempts.retry
        retry.retrying(candidate)
        ready = attempts.prepare(candidate, force=force)
        try:
            while ready is not None:
                result = await attempts.attempt(ready)
                retry.retry_over()  # a retry's budget token, held until it has ended
                answer = attempts.settle(ready, result, in_place)
                if not isinstance(answer, Retry):
                    return attempts.outcome(answer, result)
                await asyncio.sleep(answer.wait)  # cancelled at once if the client disconnects
                ready = attempts.prepare(candidate, retry=True)
            return None
        finally:
            retry.retry_over()
