"""A group's per-request policies beyond the candidate order, carried on its :class:`Plan`.

The attempt loop and the middleware need to know, for the plan they run: may it hedge and
when, what canned reply it has when everything fails, which members have rpm/tpm budgets, and
whether it sticks sessions to members or lets requests wait for capacity, and whether it
serves repeated requests from its response cache.
These are properties of the *group*, fixed at load, so one :class:`GroupPolicy` is built per group
and every plan of that group points at it (nothing is allocated per request).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from asgi_router.config.cache_settings import CacheSettings
from asgi_router.config.capacity_settings import QueueSettings, StickySettings
from asgi_router.config.degraded_settings import DegradedSettings
from asgi_router.config.provider_settings import ResumeMode
from asgi_router.resilience.stats import Limits

__all__ = ["GroupPolicy"]


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """What a group's plans carry besides their candidates."""

    #: The group id (hedge credit is kept per group).
    name: str
    #: Seconds before racing a second candidate against an uncommitted first one.
    hedge_after: float | None = None
    #: Largest share of the group's requests that may be hedged.
    hedge_budget: float = 0.1
    #: The canned reply for when every candidate fails.
    degraded: DegradedSettings | None = None
    #: rpm/tpm budgets of the members that have one, by ``provider/model-id``.
    limits: Mapping[str, Limits] = field(default_factory=dict)
    #: The members whose table sets ``resume`` (overriding their provider's), by ``provider/model-id``.
    resume: Mapping[str, ResumeMode] = field(default_factory=dict)
    #: Continuations of a broken stream per request (``None``: the router's ``max_resumes``).
    max_resumes: int | None = None
    #: Sticky sessions: what a request's affinity is keyed on (``None``: off).
    sticky: StickySettings | None = None
    #: Waiting for capacity (``None``: answer at once).
    queue: QueueSettings | None = None
    #: How many members the group configures (how often one is retried in place depends on it).
    size: int = 1
    #: The group's response cache (``None``: off).
    cache: CacheSettings | None = None
