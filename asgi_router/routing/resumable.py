"""Which candidates of a plan may continue a stream that broke after its first byte.

A candidate's ``resume`` is its member table's, else its provider's (``"none"`` by default);
``max_resumes`` is its group's, else the router's. Both are fixed at load: :class:`ResumeTable`
is built once per router, and a router where no provider and no member sets ``resume`` answers
"none" without looking at the plan, so a plan without a resumable candidate costs nothing more
than it did before continuations existed.
"""

from __future__ import annotations

from collections.abc import Mapping

from asgi_router.config.provider_settings import ResumeMode
from asgi_router.config.settings import RouterSettings
from asgi_router.core.candidate import Candidate
from asgi_router.routing.plan import Plan

__all__ = ["ResumeTable"]


class ResumeTable:
    """Each plan's continuation modes, read from a router's settings; one per router."""

    __slots__ = ("_default_max", "_groups", "_providers", "enabled")

    def __init__(self, settings: RouterSettings) -> None:
        self._providers: Mapping[str, ResumeMode] = {
            name: provider.resume for name, provider in settings.providers.items() if provider.resume != "none"
        }
        self._default_max = settings.max_resumes
        #: The groups with a member that can continue a stream (its table's ``resume``, else its
        #: provider's): a plan of any other group is answered "none" without a look at it.
        self._groups = frozenset(
            name
            for name in settings.groups
            if any(
                (member.resume or self._providers.get(member.ref.split("/", 1)[0], "none")) != "none"
                for member in settings.flat_member_settings(name)
            )
        )
        #: Whether any candidate of any plan can be resumable at all.
        self.enabled = bool(self._providers) or bool(self._groups)

    def mode(self, plan: Plan, candidate: Candidate) -> ResumeMode:
        """How ``candidate`` of ``plan`` continues a stream (``"none"``: it does not)."""
        policy = plan.policy
        if policy is not None:
            chosen = policy.resume.get(candidate.key)
            if chosen is not None:
                return chosen
        return self._providers.get(candidate.provider, "none")

    def modes(self, plan: Plan) -> tuple[ResumeMode, ...] | None:
        """Every candidate's mode in plan order, or ``None`` when none of them can continue (or
        the plan allows no continuation: ``max_resumes`` 0)."""
        if not self.enabled or (plan.policy is not None and plan.policy.name not in self._groups):
            return None
        if self.max_resumes(plan) == 0:
            return None
        modes = tuple(self.mode(plan, candidate) for candidate in plan.candidates)
        return modes if any(mode != "none" for mode in modes) else None

    def max_resumes(self, plan: Plan) -> int:
        """Continuations allowed per request on ``plan``."""
        policy = plan.policy
        if policy is not None and policy.max_resumes is not None:
            return policy.max_resumes
        return self._default_max
