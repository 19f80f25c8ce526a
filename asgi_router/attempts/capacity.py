"""A router's capacity-aware routing: sticky sessions and the groups' queues, built once.

:class:`Capacity` holds, per group that configures them, the affinities of ``sticky``
(:class:`~asgi_router.resilience.affinity.Affinities`) and the queue of ``queue``
(``capacity_queue.py``). The attempt loop asks it twice per request of such a group: before the
walk (:meth:`Capacity.stick`: the key's member first, when it has one) and after it
(:meth:`Capacity.answered`: a winner that served becomes the key's member; the outcome ``hit``,
``miss`` or ``moved``, for every answer, served, passed through or the router's own error,
goes on the request's state, hence the router's sticky header, the record and the metric). A
group with neither costs a request one ``None`` check.

The sticky member is only put *first*: whether it may be called is admission's to say, as for
any candidate (open, recovering, over budget, saturated, protocol mismatch). When it is not,
the plan goes on as usual and the winner becomes the key's member (``moved``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from asgi_router.attempts.capacity_queue import CapacityQueue
from asgi_router.attempts.outcomes import Committed, Refused
from asgi_router.config.settings import RouterSettings
from asgi_router.core.router_errors import RouterError
from asgi_router.request.request_state import Stuck
from asgi_router.resilience.affinity import Affinities
from asgi_router.routing.plan import Plan
from asgi_router.routing.sticky_keys import sticky_key

if TYPE_CHECKING:  # only a fleet's router has one (redis is optional)
    from asgi_router.fleet.shared_affinity import FleetAffinities

__all__ = ["Capacity", "header_value"]


def header_value(inbound: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The first inbound header called ``name`` (lowercase), decoded as latin-1."""
    for key, value in inbound:
        if key == name:
            return value.decode("latin-1")
    return None


class Capacity:
    """Affinities and queues per group; one per router, one event loop."""

    def __init__(
        self, settings: RouterSettings, clock: Callable[[], float], fleet: FleetAffinities | None = None
    ) -> None:
        self._session_header = settings.session_header.lower().encode("latin-1")
        #: The fleet's store of affinities, with ``state_url`` (``None``: this process's only).
        self.fleet = fleet
        self._reordered: dict[tuple[int, str], tuple[Plan, Plan]] = {}
        self._ttls = {name: group.sticky.ttl for name, group in settings.groups.items() if group.sticky is not None}
        self.affinities: dict[str, Affinities] = {
            name: Affinities(group.sticky.ttl, group.sticky.max_keys, clock)
            for name, group in settings.groups.items()
            if group.sticky is not None
        }
        #: ``(group, outcome)``: sticky requests answered since the router started (the status page).
        self.outcomes: dict[tuple[str, str], int] = {}
        self.queues: dict[str, CapacityQueue] = {
            name: CapacityQueue(group.queue, clock)
            for name, group in settings.groups.items()
            if group.queue is not None
        }

    @classmethod
    def for_settings(cls, settings: RouterSettings, clock: Callable[[], float], state: object) -> Capacity | None:
        """The router's, or ``None`` when no group is sticky or queued (nothing on the request path).

        With a fleet's shared ``state``, sticky groups keep their affinities in its store too.
        """
        groups = settings.groups.values()
        if not any(group.sticky is not None or group.queue is not None for group in groups):
            return None
        fleet = None
        if getattr(state, "shared", False) and any(group.sticky is not None for group in groups):
            from asgi_router.fleet.shared_affinity import FleetAffinities  # redis is optional: only when shared
            from asgi_router.fleet.shared_state import SharedState

            if isinstance(state, SharedState):
                fleet = FleetAffinities(state.link, settings.state_key_prefix)
        return cls(settings, clock, fleet)

    def depths(self) -> list[tuple[str, int]]:
        """Each queue's waiting requests, by group (the ``asgi_router_queue_depth`` gauge)."""
        return [(name, len(queue)) for name, queue in self.queues.items()]

    def _key(
        self, plan: Plan, payload: Mapping[str, Any], inbound: Sequence[tuple[bytes, bytes]], principal: object
    ) -> tuple[str, str] | None:
        """``(group, key)`` of a sticky group's request that has a key."""
        policy = plan.policy
        if policy is None or policy.sticky is None or policy.name not in self.affinities:
            return None  # not sticky (a rule may route to another group's plan: its own table)
        session = header_value(inbound, self._session_header) if policy.sticky.key == "session" else None
        key = sticky_key(policy.sticky.key, payload, session, principal)
        return (policy.name, key) if key is not None else None

    def stick(
        self, plan: Plan, payload: Mapping[str, Any], inbound: Sequence[tuple[bytes, bytes]], principal: object
    ) -> tuple[Plan, Stuck | None]:
        """``plan`` with the request's sticky member first (when its key has one), and its key."""
        keyed = self._key(plan, payload, inbound, principal)
        if keyed is None:
            return plan, None
        group, key = keyed
        return _first(plan, Stuck(group, key, self.affinities[group].member(key)), self._reordered)

    async def stick_shared(
        self, plan: Plan, payload: Mapping[str, Any], inbound: Sequence[tuple[bytes, bytes]], principal: object
    ) -> tuple[Plan, Stuck | None]:
        """:meth:`stick`, asking the fleet's store for the key's member (one round trip); the
        process's own table answers when the store cannot."""
        keyed = self._key(plan, payload, inbound, principal)
        if keyed is None:
            return plan, None
        group, key = keyed
        member = None
        if self.fleet is not None and self.fleet.up:
            member = await self.fleet.member(group, key)
        if member is None:
            member = self.affinities[group].member(key)
        return _first(plan, Stuck(group, key, member), self._reordered)

    def answered(self, stuck: Stuck, answer: Committed | Refused | RouterError) -> str:
        """The outcome of ``stuck``'s request, whatever its answer: ``miss`` when its key had no
        member, ``hit`` when the key's member gave the answer, ``moved`` when another member or
        the router itself did. Only a served answer makes its member the key's member."""
        if isinstance(answer, Committed):
            outcome = self.served(stuck, answer.candidate.key)
        elif stuck.member is None:
            outcome = "miss"
        else:
            outcome = "hit" if isinstance(answer, Refused) and answer.candidate.key == stuck.member else "moved"
        counted = (stuck.group, outcome)
        self.outcomes[counted] = self.outcomes.get(counted, 0) + 1
        return outcome

    def served(self, stuck: Stuck, winner: str) -> str:
        """``winner`` committed for ``stuck``'s key: it is the key's member now; the outcome."""
        self.affinities[stuck.group].remember(stuck.key, winner)
        if self.fleet is not None:
            self.fleet.remember(stuck.group, stuck.key, winner, self._ttls[stuck.group])
        if stuck.member is None:
            return "miss"
        return "hit" if stuck.member == winner else "moved"


#: Reordered plans kept per router (precomputed plans, such as a rotate group's, recur).
_MAX_REORDERED: Final = 1024


def _first(plan: Plan, stuck: Stuck, reordered: dict[tuple[int, str], tuple[Plan, Plan]]) -> tuple[Plan, Stuck]:
    """``plan`` with ``stuck``'s member first; a member no longer in the plan is none.

    ``reordered`` caches the answer by the plan's identity; each entry holds the plan it was
    made from, so that identity cannot be reused by another plan while the entry lives.
    """
    member, candidates = stuck.member, plan.candidates
    if member is None or (candidates and candidates[0].key == member):  # none, or already first
        return plan, stuck
    cached = reordered.get((id(plan), member))
    if cached is not None and cached[0] is plan:
        return cached[1], stuck
    for index, candidate in enumerate(candidates):
        if candidate.key == member:
            if not index:
                return plan, stuck
            moved = replace(plan, candidates=(candidate, *candidates[:index], *candidates[index + 1 :]))
            if len(reordered) >= _MAX_REORDERED:
                reordered.clear()
            reordered[(id(plan), member)] = (plan, moved)
            return moved, stuck
    stuck.member = None
    return plan, stuck
