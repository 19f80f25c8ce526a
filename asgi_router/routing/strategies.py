"""Strategies beyond ``order``/``rotate``: each turns a group's members into a per-request order.

A strategy only *orders* candidates (``docs/routing.md``): it reads numbers from
:class:`~asgi_router.resilience.stats.RoutingStats`, the catalog and the request's facts, and returns a
tuple. It does no I/O and never awaits: it runs on every request of its group. Which candidates are then *skipped*
(provider not configured, context too small, budget spent) is the attempt loop's business, so
each strategy stays a pure function of its inputs and is tested as one.

========== ============================================================================
weighted   first pick weighted-random (injected RNG); the rest by weight, heaviest first
least_busy fewest in-flight attempts first; ties keep the configured order
latency    lowest decayed mean time to first byte first; members without data first (so
           they get some); with probability ``explore`` a random other member goes first
cost       cheapest estimated cost of *this* request first (catalog prices, the request's
           estimated prompt tokens and its ``max_tokens``); unpriced members last
usage      members within their rpm/tpm budget first, least used share first; members over
           budget last (the loop then skips them with ``over_budget``)
========== ============================================================================

Ties always keep the configured order (stable sorts), so a plan is predictable from config.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from asgi_router.resilience.stats import Limits, RoutingStats, over_budget, utilisation
from asgi_router.routing.catalog import DEFAULT_EXPECTED_OUTPUT_TOKENS, Catalog
from asgi_router.routing.facts import RequestFacts

if TYPE_CHECKING:
    from asgi_router.core.candidate import Candidate

__all__ = ["Member", "Orderer", "STRATEGIES", "StrategyContext", "cost", "latency", "least_busy", "usage", "weighted"]


@dataclass(frozen=True, slots=True)
class Member:
    """One flattened group member as strategies see it."""

    candidate: Candidate
    #: ``provider/model-id``: the key of its statistics and catalog entry.
    key: str
    weight: float = 1.0
    limits: Limits = field(default_factory=Limits)


@dataclass(frozen=True, slots=True)
class StrategyContext:
    """What a strategy may read besides its members."""

    stats: RoutingStats
    catalog: Catalog
    rng: random.Random
    #: ``latency``: probability of trying a random other member first.
    explore: float = 0.05


Orderer = Callable[[RequestFacts], "tuple[Candidate, ...]"]


def weighted(members: tuple[Member, ...], context: StrategyContext) -> Orderer:
    """First pick weighted-random; the others follow heaviest first (ties: configured order)."""
    by_weight = sorted(range(len(members)), key=lambda index: -members[index].weight)
    # one precomputed order per possible first pick: nothing is allocated per request
    orders = tuple(
        (members[first].candidate, *(members[i].candidate for i in by_weight if i != first))
        for first in range(len(members))
    )
    cumulative = list(itertools.accumulate(member.weight for member in members))
    total = cumulative[-1]
    last = len(members) - 1
    rng = context.rng

    def order(facts: RequestFacts) -> tuple[Candidate, ...]:
        return orders[min(bisect.bisect_right(cumulative, rng.random() * total), last)]

    return order


def least_busy(members: tuple[Member, ...], context: StrategyContext) -> Orderer:
    """Fewest in-flight attempts first."""
    stats = context.stats

    def order(facts: RequestFacts) -> tuple[Candidate, ...]:
        ranked = sorted(members, key=lambda member: stats.in_flight(member.key))
        return tuple(member.candidate for member in ranked)

    return order


def latency(members: tuple[Member, ...], context: StrategyContext) -> Orderer:
    """Lowest TTFB average first; unmeasured members first of all; ``explore`` share shuffled."""
    stats, rng, explore = context.stats, context.rng, context.explore

    def order(facts: RequestFacts) -> tuple[Candidate, ...]:
        unmeasured: list[Candidate] = []
        measured: list[tuple[float, int, Candidate]] = []
        for index, member in enumerate(members):
            mean = stats.latency(member.key)
            if mean is None:
                unmeasured.append(member.candidate)
            else:
                measured.append((mean, index, member.candidate))
        measured.sort()
        ranked = unmeasured + [candidate for _, _, candidate in measured]
        if len(ranked) > 1 and rng.random() < explore:
            ranked.insert(0, ranked.pop(rng.randrange(1, len(ranked))))
        return tuple(ranked)

    return order


def cost(members: tuple[Member, ...], context: StrategyContext) -> Orderer:
    """Cheapest estimated cost of this request first; members without prices last."""
    catalog = context.catalog
    priced = tuple(member for member in members if catalog.is_priced(member.key))
    unpriced = tuple(member.candidate for member in members if not catalog.is_priced(member.key))

    def order(facts: RequestFacts) -> tuple[Candidate, ...]:
        prompt = facts.prompt_tokens
        completion = facts.max_tokens or DEFAULT_EXPECTED_OUTPUT_TOKENS
        ranked = sorted(priced, key=lambda member: catalog.cost(member.key, prompt, completion) or 0.0)
        return (*(member.candidate for member in ranked), *unpriced)

    return order


def usage(members: tuple[Member, ...], context: StrategyContext) -> Orderer:
    """Within budget first (least used share first), over budget last."""
    stats = context.stats
    unlimited = Limits()
    needs_tokens = any(member.limits.tpm is not None for member in members)

    def order(facts: RequestFacts) -> tuple[Candidate, ...]:
        tokens = facts.prompt_tokens if needs_tokens else 0
        within: list[tuple[float, int, Candidate]] = []
        over: list[Candidate] = []
        for index, member in enumerate(members):
            if member.limits == unlimited:
                within.append((0.0, index, member.candidate))
                continue
            used = stats.usage(member.key)
            if over_budget(member.limits, used, tokens):
                over.append(member.candidate)
            else:
                within.append((utilisation(member.limits, used), index, member.candidate))
        within.sort()
        return (*(candidate for _, _, candidate in within), *over)

    return order


#: Strategy name → factory; ``plan.py`` plugs these into its ``_STRATEGIES`` seam.
STRATEGIES: Final[Mapping[str, Callable[[tuple[Member, ...], StrategyContext], Orderer]]] = {
    "weighted": weighted,
    "least_busy": least_busy,
    "latency": latency,
    "cost": cost,
    "usage": usage,
}
