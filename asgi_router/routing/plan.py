"""Resolve a :class:`ModelRef` to a :class:`Plan`: the ordered candidates to try.

Resolution sits on every request's path, so it does no I/O, takes no locks and, for ``order``
groups, allocates nothing: plans are built once from the settings and handed out as they are.
``rotate`` precomputes every rotation and picks one with a counter advanced once per request;
the counter lives in the router's :class:`~asgi_router.resilience.router_state.RouterState` (synchronous, never
awaits). A fleet's shared state offers a counter to await instead
(:meth:`~asgi_router.resilience.router_state.RouterState.fleet_rotation`): then a rotate group resolves to
a plan whose :attr:`Plan.rotation` is still to be settled, and the router awaits
:meth:`Plan.settle` once, before the attempts. Resolution itself stays synchronous, and every
other strategy never waits.

A plan carries its group's own ``retries``, when the group sets it; how often a candidate is
retried in place is the decision point's to say (``attempts/decisions.py``).

A strategy only *orders* candidates; every strategy plugs into :data:`_STRATEGIES` as a factory
from a group's table to a picker. ``weighted``, ``least_busy``, ``latency``, ``cost`` and
``usage`` live in ``strategies.py`` and read :class:`~asgi_router.resilience.stats.RoutingStats`; a group with
``rules = true`` first runs ``[[rules]]`` (``rules.py``), and the plan records which rule chose it.
Resolution re-checks what config validation already refused (defence in depth): a ref that
names something unknown yields a :class:`ResolveError`, never an exception from a dict lookup.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Final

from asgi_router.config.group_settings import GroupSettings
from asgi_router.config.rules_settings import DEFAULT_ROUTE
from asgi_router.config.settings import RouterSettings
from asgi_router.core.candidate import Candidate
from asgi_router.core.classify import DEFAULT_FAILOVER
from asgi_router.core.reasons import Reason
from asgi_router.core.refs import InvalidRef, ModelRef, RefKind, parse_model_ref
from asgi_router.resilience.router_state import InMemoryState, RouterState
from asgi_router.resilience.stats import Limits, RoutingStats
from asgi_router.routing.catalog import Catalog
from asgi_router.routing.facts import EMPTY_FACTS, RequestFacts
from asgi_router.routing.policy import GroupPolicy
from asgi_router.routing.rules import RuleTable
from asgi_router.routing.strategies import STRATEGIES, Member, Orderer, StrategyContext

__all__ = ["Plan", "ResolveError", "Resolver", "Rotation"]


@dataclass(frozen=True, slots=True)
class Plan:
    """The ordered candidates for one request, and which failures move on to the next one."""

    candidates: tuple[Candidate, ...]
    failover_on: frozenset[Reason] = DEFAULT_FAILOVER
    #: The ``[[rules]]`` entry that chose this plan, or ``default`` (sent in the router's route header).
    rule: str = DEFAULT_ROUTE
    #: The group's hedging, degraded-answer and budget policies (``None`` for a direct ref).
    policy: GroupPolicy | None = None
    #: The group's own same-candidate retries per candidate (``None``: it sets none, and the
    #: decision point's default applies).
    retries: int | None = None
    #: The candidates' ``provider/model-id`` names, in order (the request record's ``plan``).
    labels: tuple[str, ...] = field(init=False, repr=False, compare=False)
    #: A rotate group's shared counter, still to be asked (:meth:`settle`); ``None``: settled.
    rotation: Rotation | None = None
    #: Whether the attempt loop races this plan's candidates (``hedging.py``).
    hedged: bool = field(init=False, repr=False, compare=False)
    #: A follow-up's plan pinned to the candidate that produced its previous response (the
    #: Responses API's ``previous_response_id``): its failure is answered as such.
    pinned: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", tuple(candidate.key for candidate in self.candidates))
        policy = self.policy
        hedged = policy is not None and policy.hedge_after is not None and len(self.candidates) > 1
        object.__setattr__(self, "hedged", hedged)

    async def settle(self) -> Plan:
        """This plan with its rotation fetched from the shared counter (itself if it has none)."""
        rotation = self.rotation
        if rotation is None:
            return self
        orders = rotation.orders
        return replace(self, candidates=orders[await rotation.counter() % len(orders)], rotation=None)


@dataclass(frozen=True, slots=True)
class Rotation:
    """A rotate group's possible orders and the fleet's counter that picks one per request."""

    orders: tuple[tuple[Candidate, ...], ...]
    counter: Callable[[], Awaitable[int]]


@dataclass(frozen=True, slots=True)
class ResolveError:
    """A ref that cannot be resolved; ``status`` and ``code`` are what the client gets."""

    status: int
    code: str
    message: str


_PickPlan = Callable[[RequestFacts], Plan]
#: A group's counter in the router state: each call returns the next value.
_Counter = Callable[[], int]


@dataclass(frozen=True, slots=True)
class _GroupTable:
    """What a strategy is built from: a group's flattened members, its base plan, shared stats."""

    members: tuple[Member, ...]
    #: The members in configured order, with the group's failover, policies and retries.
    base: Plan
    context: StrategyContext
    #: The group's rotation counter (``state.next_rotation(group)``).
    counter: _Counter
    #: The fleet's counter of the group, to await (``state.fleet_rotation(group)``), if shared.
    shared: Callable[[], Awaitable[int]] | None = None


def _order(group: _GroupTable) -> _PickPlan:
    plan = group.base
    return lambda facts: plan


def _rotate(group: _GroupTable) -> _PickPlan:
    candidates = group.base.candidates
    plans = tuple(
        replace(group.base, candidates=candidates[start:] + candidates[:start]) for start in range(len(candidates))
    )
    if group.shared is not None:
        pending = replace(group.base, rotation=Rotation(tuple(plan.candidates for plan in plans), group.shared))
        return lambda facts: pending
    counter = group.counter
    size = len(plans)
    return lambda facts: plans[counter() % size]


def _ordering(strategy: Callable[[tuple[Member, ...], StrategyContext], Orderer]) -> Callable[[_GroupTable], _PickPlan]:
    """Adapt a ``strategies.py`` orderer (facts -> candidates) into a plan picker."""

    def factory(group: _GroupTable) -> _PickPlan:
        order = strategy(group.members, group.context)
        base = group.base
        failover_on, policy, retries = base.failover_on, base.policy, base.retries
        return lambda facts: Plan(order(facts), failover_on, DEFAULT_ROUTE, policy, retries)

    return factory


_STRATEGIES: Final[dict[str, Callable[[_GroupTable], _PickPlan]]] = {
    "order": _order,
    "rotate": _rotate,
    **{name: _ordering(strategy) for name, strategy in STRATEGIES.items()},
}


class Resolver:
    """Turns refs into plans using tables precomputed from :class:`RouterSettings`.

    ``state`` holds the rotation counters (:meth:`RouterState.next_rotation`); ``stats`` and
    ``rng`` are what the stateful strategies read (injected in tests). By default one fresh
    :class:`~asgi_router.resilience.router_state.InMemoryState` serves as both, and ``rng`` is an unseeded
    ``random.Random``.
    """

    def __init__(
        self,
        settings: RouterSettings,
        state: RouterState | None = None,
        *,
        stats: RoutingStats | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if state is None:
            state = InMemoryState(half_life=settings.latency_half_life)
        self.stats: RoutingStats = stats if stats is not None else state
        rng = rng if rng is not None else random.Random()
        catalog = Catalog(settings.catalog)
        self._providers = frozenset(settings.providers)
        self.policies: dict[str, GroupPolicy] = {}
        self._groups: dict[str, _PickPlan] = {}
        for name, group in settings.groups.items():
            members = tuple(
                Member(Candidate(*member.ref.split("/", 1)), member.ref, member.weight, Limits(member.rpm, member.tpm))
                for member in settings.flat_member_settings(name)
            )
            policy = GroupPolicy(
                name,
                group.hedge_after,
                group.hedge_budget,
                group.degraded,
                {member.key: member.limits for member in members if member.limits != Limits()},
                {member.ref: member.resume for member in settings.flat_member_settings(name) if member.resume},
                group.max_resumes,
                group.sticky,
                group.queue,
                size=len(members),
                cache=group.cache,
            )
            self.policies[name] = policy
            context = StrategyContext(self.stats, catalog, rng, group.explore)
            table = _GroupTable(
                members,
                self._base_plan(group, members, policy),
                context,
                partial(state.next_rotation, name),
                state.fleet_rotation(name) if group.strategy == "rotate" else None,
            )
            self._groups[name] = _STRATEGIES[group.strategy](table)
        self._aliases: dict[str, ModelRef] = {}
        # ``model`` strings already parsed into a configured group or alias: a bounded set (the
        # configuration's names), unlike direct refs, whose model ids are the client's to choose.
        self._known_refs: dict[str, ModelRef] = {}
        for name, target in settings.aliases.items():
            ref = parse_model_ref(target)
            if isinstance(ref, ModelRef):
                self._aliases[name] = ref
        self._rules_groups = frozenset(name for name, group in settings.groups.items() if group.rules)
        self._rules = RuleTable(settings.rules, sorted(self._rules_groups))
        self._rule_targets: dict[str, ModelRef] = {}
        for rule in settings.rules:
            ref = parse_model_ref(rule.route)
            if isinstance(ref, ModelRef):
                self._rule_targets[rule.name] = ref

    @staticmethod
    def _base_plan(group: GroupSettings, members: tuple[Member, ...], policy: GroupPolicy) -> Plan:
        """The group's members in configured order, with its failover, policies and retries."""
        candidates = tuple(member.candidate for member in members)
        return Plan(candidates, group.failover_on, DEFAULT_ROUTE, policy, group.retries)

    def _by_rule(self, group: str, facts: RequestFacts) -> Plan | ResolveError | None:
        """The plan a matching ``[[rules]]`` entry routes ``group/<group>`` to, if one matches."""
        rule = self._rules.pick(group, facts)
        if rule is None:
            return None
        target = self._rule_targets.get(rule.name)
        if target is None or (target.kind is RefKind.GROUP and target.name in self._rules_groups):
            return ResolveError(404, "model_not_found", f"rule {rule.name!r} routes to nothing usable")
        plan = self.resolve(target, facts)
        if isinstance(plan, ResolveError):
            return plan
        # The target's policies apply; a target without a canned reply borrows the rules group's.
        policy = plan.policy or self.policies[group]
        if policy.degraded is None and self.policies[group].degraded is not None:
            policy = replace(policy, degraded=self.policies[group].degraded)
        return replace(plan, rule=rule.name, policy=policy)

    def resolve(self, ref: ModelRef, facts: RequestFacts = EMPTY_FACTS) -> Plan | ResolveError:
        """The plan for ``ref``; a group's strategy advances at most once per call."""
        if ref.kind is RefKind.ALIAS:
            target = self._aliases.get(ref.name)
            if target is None:
                return ResolveError(
                    400,
                    "invalid_model_reference",
                    f"model {ref.name!r} is not a configured alias; use 'provider/model-id' "
                    "(e.g. 'openai/gpt-4o-mini') or 'group/<id>'",
                )
            ref = target
        if ref.kind is RefKind.GROUP:
            pick = self._groups.get(ref.name)
            if pick is None:
                return ResolveError(404, "model_not_found", f"unknown group {str(ref)!r}")
            if ref.name in self._rules_groups:
                routed = self._by_rule(ref.name, facts)
                if routed is not None:
                    return routed
            return pick(facts)
        if ref.name not in self._providers:
            return ResolveError(404, "model_not_found", f"unknown provider {ref.name!r} in {str(ref)!r}")
        return Plan((Candidate(ref.name, ref.model_id),))

    def resolve_string(self, value: object, facts: RequestFacts = EMPTY_FACTS) -> Plan | ResolveError:
        """Parse then resolve; the whole front half of the pipeline for one ``model`` value."""
        ref = self._known_refs.get(value) if type(value) is str else None
        if ref is None:
            parsed = parse_model_ref(value)
            if isinstance(parsed, InvalidRef):
                return ResolveError(400, "invalid_model_reference", parsed.message)
            ref = parsed
            if ref.kind is not RefKind.DIRECT and (ref.name in self._groups or ref.name in self._aliases):
                self._known_refs[str(ref)] = ref
        return self.resolve(ref, facts)
