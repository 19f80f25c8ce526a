"""Resolve a :class:`ModelRef` to a :class:`Plan`: the ordered candidates to try.

Resolution sits on every request's path, so it does no I/O, takes no locks and, for ``order``
groups, allocates nothing: plans are built once from the settings and handed out as they are.
``rotate`` precomputes every rotation and picks one with a counter advanced once per request;
the counter lives in the router's :class:`~asgi_router.state.RouterState` (synchronous, never
awaits), so that a shared store can later make rotation span workers.

A plan also says how often each candidate may be retried in place (``retries``): a plan of one
candidate gets ``RouterSettings.retries``, a longer one fails over instead unless its group
sets ``retries``.

A strategy only *orders* candidates; later strategies plug into :data:`_STRATEGIES`.
Resolution re-checks what config validation already refused (defence in depth): a ref that
names something unknown yields a :class:`ResolveError`, never an exception from a dict lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final

from .classify import DEFAULT_FAILOVER, Reason
from .refs import InvalidRef, ModelRef, RefKind, parse_model_ref
from .settings import GroupSettings, RouterSettings
from .state import InMemoryState, RouterState

__all__ = ["Candidate", "Plan", "ResolveError", "Resolver"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One concrete upstream to try: a configured provider and that provider's model id."""

    provider: str
    model_id: str

    def __str__(self) -> str:
        return f"{self.provider}/{self.model_id}"


@dataclass(frozen=True, slots=True)
class Plan:
    """The ordered candidates for one request, and which failures move on to the next one."""

    candidates: tuple[Candidate, ...]
    failover_on: frozenset[Reason] = DEFAULT_FAILOVER
    #: Same-candidate retries allowed per candidate (on top of its first attempt).
    retries: int = 0


@dataclass(frozen=True, slots=True)
class ResolveError:
    """A ref that cannot be resolved; ``status`` and ``code`` are what the client gets."""

    status: int
    code: str
    message: str


_PickPlan = Callable[[], Plan]
#: A group's counter in the router state: each call returns the next value.
_Counter = Callable[[], int]


def _order(plans: tuple[Plan, ...], counter: _Counter) -> _PickPlan:
    plan = plans[0]
    return lambda: plan


def _rotate(plans: tuple[Plan, ...], counter: _Counter) -> _PickPlan:
    size = len(plans)
    return lambda: plans[counter() % size]


_STRATEGIES: Final[dict[str, Callable[[tuple[Plan, ...], _Counter], _PickPlan]]] = {
    "order": _order,
    "rotate": _rotate,
}


class Resolver:
    """Turns refs into plans using tables precomputed from :class:`RouterSettings`."""

    def __init__(self, settings: RouterSettings, state: RouterState | None = None) -> None:
        state = state if state is not None else InMemoryState()
        self._providers = frozenset(settings.providers)
        self._retries = settings.retries
        self._groups: dict[str, _PickPlan] = {
            name: self._group_picker(
                group, settings.flat_members(name), partial(state.next_rotation, name), settings.retries
            )
            for name, group in settings.groups.items()
        }
        self._aliases: dict[str, ModelRef] = {}
        for name, target in settings.aliases.items():
            ref = parse_model_ref(target)
            if isinstance(ref, ModelRef):
                self._aliases[name] = ref

    @staticmethod
    def _group_picker(group: GroupSettings, members: tuple[str, ...], counter: _Counter, retries: int) -> _PickPlan:
        candidates = tuple(Candidate(*member.split("/", 1)) for member in members)
        if group.retries is not None:
            retries = group.retries
        elif len(candidates) > 1:
            retries = 0
        rotations = tuple(
            Plan(candidates[start:] + candidates[:start], group.failover_on, retries)
            for start in range(len(candidates))
        )
        return _STRATEGIES[group.strategy](rotations, counter)

    def resolve(self, ref: ModelRef) -> Plan | ResolveError:
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
            return pick()
        if ref.name not in self._providers:
            return ResolveError(404, "model_not_found", f"unknown provider {ref.name!r} in {str(ref)!r}")
        return Plan((Candidate(ref.name, ref.model_id),), retries=self._retries)

    def resolve_string(self, value: object) -> Plan | ResolveError:
        """Parse then resolve; the whole front half of the pipeline for one ``model`` value."""
        ref = parse_model_ref(value)
        if isinstance(ref, InvalidRef):
            return ResolveError(400, "invalid_model_reference", ref.message)
        return self.resolve(ref)
