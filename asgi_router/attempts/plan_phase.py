"""The plan phase: a request's ``model`` resolved to a plan, its sticky member first.

Asked once per request by the middleware, after the body is read, and again by the capacity wait
for a request that waited in its group's queue (a plan made before the wait would keep an order
the strategy no longer gives): the same phase object both times, so the attempts never call back
into the middleware. The ref resolved is the one the request asked for, or the one a caller cap
downgraded it to; the rules and the strategy order the candidates (``routing/``), a ``rotate``
group's fleet-wide counter is settled, and a sticky group's request has its key's member put
first (``capacity.py``; with a fleet, its store is asked). What planning made of the request (the
ref, the rule, the plan's candidates, the sticky key) goes on the request's state.
"""

from __future__ import annotations

from asgi_router.attempts.capacity import Capacity
from asgi_router.core.router_errors import RouterError
from asgi_router.inbound.body import InboundRequest
from asgi_router.request.request_state import RequestState
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan, ResolveError, Resolver

__all__ = ["PlanPhase"]


class PlanPhase:
    """Plans requests through one router's :class:`Resolver` and its sticky groups; one per router."""

    __slots__ = ("_capacity", "_resolver")

    def __init__(self, resolver: Resolver, capacity: Capacity | None = None) -> None:
        self._resolver = resolver
        #: Sticky sessions and queues of the groups that configure them (``None``: no group does).
        self._capacity = capacity

    async def __call__(self, state: RequestState, request: InboundRequest, facts: RequestFacts) -> Plan | RouterError:
        """``request``'s plan by the rules ``facts`` are read for, or why it has none."""
        downgrade = state.downgrade_to
        plan = self._resolver.resolve_string(request.payload["model"] if downgrade is None else downgrade, facts)
        if isinstance(plan, ResolveError):
            if plan.code == "model_not_found":  # it parsed, so its characters are safe to log
                state.ref = request.payload["model"]
            return RouterError(plan.status, plan.code, plan.message)
        state.ref = request.payload["model"]  # validated by the parser: safe to log
        state.rule = plan.rule
        if plan.rotation is not None:
            plan = await plan.settle()
        state.plan = plan.labels
        capacity, group = self._capacity, plan.policy
        if capacity is not None and group is not None:  # a group's plan: sticky?
            inbound = state.scope["headers"]
            if capacity.fleet is not None and group.sticky is not None:  # the one awaited look-up
                plan, state.stuck = await capacity.stick_shared(plan, request.payload, inbound, state.principal)
            else:
                plan, state.stuck = capacity.stick(plan, request.payload, inbound, state.principal)
        return plan
