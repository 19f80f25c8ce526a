"""The plan phase: a request's ``model`` resolved to a plan, its sticky member first.

Asked once per request by the middleware, after the body is read, and again by the capacity wait
for a request that waited in its group's queue (a plan made before the wait would keep an order
the strategy no longer gives): the same phase object both times, so the attempts never call back
into the middleware. The ref resolved is the one the request asked for, or the one a caller cap
downgraded it to; the rules and the strategy order the candidates (``routing/``), a ``rotate``
group's fleet-wide counter is settled, and a sticky group's request has its key's member put
first (``capacity.py``; with a fleet, its store is asked). A Responses request that names its
previous response (``previous_response_id``) is pinned to the provider that produced it, by the
affinity table of ``request_answers.py`` over what ``response_affinity.py`` remembers. What
planning made of the request (the ref, the rule, the plan's candidates, the sticky key) goes on
the request's state.
"""

from __future__ import annotations

from asgi_router.attempts.capacity import Capacity
from asgi_router.attempts.request_answers import not_found, pinned_plan
from asgi_router.attempts.response_affinity import ResponseAffinity
from asgi_router.core.router_errors import RouterError
from asgi_router.inbound.body import InboundRequest
from asgi_router.request.request_state import RequestState
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan, ResolveError, Resolver

__all__ = ["PlanPhase"]


class PlanPhase:
    """Plans requests through one router's :class:`Resolver` and its sticky groups; one per router."""

    __slots__ = ("_capacity", "_resolver", "_responses")

    def __init__(
        self, resolver: Resolver, capacity: Capacity | None = None, responses: ResponseAffinity | None = None
    ) -> None:
        self._resolver = resolver
        #: Sticky sessions and queues of the groups that configure them (``None``: no group does).
        self._capacity = capacity
        #: Which candidate produced each response id relayed (``None``: no Responses route).
        self._responses = responses

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
        if state.kind == "responses" and self._responses is not None:
            previous = request.payload.get("previous_response_id")
            if isinstance(previous, str):
                producer = await self._responses.producer(previous, state.principal)
                if producer is not None:  # an id it does not know: the normal plan
                    if not producer.same_caller:
                        return not_found(previous)
                    plan = pinned_plan(plan, producer.candidate)
                    state.plan = plan.labels
        return plan
