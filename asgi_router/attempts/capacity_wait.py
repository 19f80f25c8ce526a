"""The wait for capacity: a queued group's request waits its turn, then is planned again.

A group with a ``queue`` (``capacity_queue.py``) holds requests that found no capacity (every
candidate over its budget or its provider saturated) or that arrived while others waited. The
attempt loop hands such a request to :class:`CapacityWait`, with its pass so far: it joins the
queue by priority, pauses until capacity may be back, and at the head of the queue it is planned
again through the pipeline's plan phase (``plan_phase.py``, the object this wait is given: a plan
made before the wait would keep an order the strategy no longer gives, and the attempts never
call back into the middleware), its sticky member first again, and walked as a fresh pass. The
request's state says how the wait ended (``served``, ``timed_out``, ``full`` or ``left``) and how
long it took: until a candidate was admitted, or until it gave up (never the upstream call that
followed; every answer to a request that joined the queue says it in a header).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial

from asgi_router.attempts.capacity import header_value
from asgi_router.attempts.capacity_queue import CapacityQueue, Ticket
from asgi_router.attempts.outcomes import Committed, Refused
from asgi_router.attempts.plan_phase import PlanPhase
from asgi_router.attempts.steps import RequestAttempts
from asgi_router.core.router_errors import RouterError
from asgi_router.inbound.body import InboundRequest
from asgi_router.routing.plan import Plan

__all__ = ["CapacityWait"]


class CapacityWait:
    """Waits queued requests for capacity and plans them again; one per router."""

    __slots__ = ("_clock", "_plan_phase")

    def __init__(self, plan_phase: PlanPhase, clock: Callable[[], float]) -> None:
        self._plan_phase = plan_phase
        self._clock = clock

    async def __call__(
        self,
        queue: CapacityQueue,
        first: RequestAttempts,
        walked: bool,
        request: InboundRequest,
        walk: Callable[[RequestAttempts, Plan], Awaitable[Committed | Refused | RouterError | None]],
    ) -> tuple[Committed | Refused | RouterError | None, RequestAttempts]:
        """Wait in ``queue`` for capacity; at the head, plan ``request`` again (the plan phase,
        its sticky member first again) and ``walk`` the new plan (the loop's pass over it). What
        came of the last walk, and its pass (``first``, the request's own, when the queue was
        full); ``walked``: the request has walked its plan once already."""
        clock = self._clock
        plan, state, inbound = first.plan, first.state, first.inbound
        settings = queue.settings
        group = plan.policy.name if plan.policy is not None else ""
        priority = queue.priority(header_value(inbound, settings.priority_header.encode("latin-1")), state.principal)
        joined = clock()
        ticket = queue.join(priority)
        if ticket is None:
            state.queued = (group, "full", 0.0)
            queue.recent.append(("full", 0.0))
            decided = None if walked else await walk(first, plan)  # today's answer, and why
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
                fresh = await self._plan_phase(state, request, first.facts)
                if isinstance(fresh, RouterError):  # its ref no longer resolves: that is its answer
                    decided, outcome = fresh, "served"
                    break
                plan = fresh
                attempts = first.again(plan, quiet=walked)
                attempts.admitted = partial(self._admitted, queue, ticket)
                decided = await walk(attempts, plan)
                if decided is not None or not attempts.capacity_only():
                    outcome = "served"
                    break
                walked = True  # the skips of the walks after the first are not evented again
                pause = attempts.recheck()
        finally:
            queue.leave(ticket)
            # The wait ended when a candidate was admitted (the ticket's ``left``), not when the
            # call it was admitted to ended: the upstream's time is not the queue's.
            waited = (ticket.left if ticket.left is not None else clock()) - joined
            state.queued = (group, outcome, waited)
            queue.recent.append((outcome, waited))
        if outcome == "timed_out" and not walked:
            # Its wait ran out before its first turn (others kept the head): it gets the answer
            # it would have had without a queue, as a full queue's request does, not an empty one.
            decided = await walk(first, first.plan)
        return decided, attempts

    def _admitted(self, queue: CapacityQueue, ticket: Ticket) -> None:
        """A candidate of the request holding ``ticket`` was admitted: its wait is over."""
        if ticket.left is None:
            ticket.left = self._clock()
        queue.leave(ticket)
