"""Routing groups: the members a ``group/<id>`` may be served by, and how to order them.

Members are written as plain ``"provider/model-id"`` (or ``"group/<id>"``) strings, or as tables
carrying a ``weight`` (``weighted``) and ``rpm``/``tpm`` limits (``usage``, and budget checks
under every strategy). Nested groups flatten at load (:func:`flatten_groups`), first occurrence
kept; a nested group's weights are multiplied by the weight of the member that names it, so the
proportions inside the inner group survive. Nesting deeper than :data:`MAX_GROUP_DEPTH` and
cycles are refused, the cycle spelled out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, Self

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from asgi_router.config.cache_settings import CacheSettings
from asgi_router.config.capacity_settings import QueueSettings, StickySettings
from asgi_router.config.degraded_settings import DegradedSettings
from asgi_router.config.provider_settings import ResumeMode
from asgi_router.config.strict_settings import StrictSettings
from asgi_router.core.classify import DEFAULT_FAILOVER
from asgi_router.core.reasons import Reason
from asgi_router.core.refs import GROUP_NAMESPACE, InvalidRef, RefKind, parse_model_ref

__all__ = ["MAX_GROUP_DEPTH", "GroupSettings", "MemberSettings", "Strategy", "flatten_groups"]

#: How deep ``group/a -> group/b -> ...`` may nest before config is refused.
MAX_GROUP_DEPTH: Final = 8

Strategy = Literal["order", "rotate", "weighted", "least_busy", "latency", "cost", "usage"]


class MemberSettings(StrictSettings):
    """A group member in table form: ``{ref = "openai/gpt-4o", weight = 3, rpm = 500}``.

    ``resume`` overrides the provider's for this member only (a model of a provider may take
    prefill where another does not).
    """

    ref: str = Field(description="`provider/model-id`, or `group/<id>` for a nested group.")
    weight: PositiveFloat = Field(
        default=1.0,
        description="Share of first picks under `weighted`, relative to the other members' weights; on a "
        "nested group, multiplies the weights inside it.",
    )
    rpm: PositiveInt | None = Field(
        default=None, description="Requests per rolling minute this member may take (`provider/model-id` members only)."
    )
    tpm: PositiveInt | None = Field(
        default=None, description="Tokens per rolling minute this member may take (`provider/model-id` members only)."
    )
    resume: ResumeMode | None = Field(
        default=None,
        description="How this member may continue a broken stream (`provider/model-id` members only); unset: its "
        "provider's `resume`.",
    )
    latency_target: PositiveFloat | None = Field(
        default=None,
        description="Seconds to the first byte of a streamed answer this member should meet; overrides its "
        "provider's and `breaker.latency_target` (`provider/model-id` members only; the tightest wins where "
        "several groups set one).",
    )


class GroupSettings(StrictSettings):
    """A routing group, asked for as ``group/<id>``: its members and how to order them per request.

    Loading refuses an empty group, a member that names an unknown provider or group, a nesting
    cycle and nesting deeper than 8 levels.
    """

    strategy: Strategy = Field(
        default="order",
        description="How the members are ordered per request: `order`, `rotate`, `weighted`, `least_busy`, "
        "`latency`, `cost` or `usage`.",
    )
    members: list[str | MemberSettings] = Field(
        min_length=1,
        description="At least one `provider/model-id`, `group/<id>` or member table; nested groups are "
        "expanded in place, first occurrence kept.",
    )
    failover_on: frozenset[Reason] = Field(
        default=DEFAULT_FAILOVER,
        description="The failure reasons that move on to the next member (default: every failure reason but "
        "`client_error`); the rest stop the loop.",
    )
    retries: NonNegativeInt | None = Field(
        default=None,
        description="Same-candidate retries per member; unset: the router's `retries` for a group of one member, "
        "else 0. Refused above 0 on a group with `hedge_after` (the race is its second chance).",
    )
    max_resumes: NonNegativeInt | None = Field(
        default=None,
        description="Continuations of one broken stream per request (unset: the router's `max_resumes`).",
    )
    rules: bool = Field(
        default=False, description="Run `[[rules]]` first; the members are the plan when no rule matches."
    )
    explore: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="`latency` strategy: the share of requests (0 to 1) that try a random other member first.",
    )
    hedge_after: PositiveFloat | None = Field(
        default=None,
        description="Seconds after which a second candidate is raced against an uncommitted first one "
        "(unset: no hedging).",
    )
    hedge_budget: float = Field(
        default=0.1,
        ge=0.0,
        le=1.0,
        description="The largest share (0 to 1) of this group's requests that may add a hedged request.",
    )
    degraded: DegradedSettings | None = Field(
        default=None,
        description='A canned reply, `{content = "..."}`, sent (marked as degraded in the router\'s headers) '
        "when every candidate fails with a 429 or 5xx (unset: off).",
    )
    sticky: StickySettings | None = Field(
        default=None,
        description="Send a session's (or caller's, or prompt prefix's) requests to the member that served it "
        "last, to keep its prompt cache warm (unset: off).",
    )
    queue: QueueSettings | None = Field(
        default=None,
        description="Let a request wait for a member with capacity when every member is at its budget, "
        "concurrency cap or provider rate limit (unset: answer at once).",
    )
    cache: CacheSettings | None = Field(
        default=None,
        description="Serve repeated requests from stored answers (see [Caching](caching.md); unset: off).",
    )

    guardrails: list[str] = Field(
        default_factory=list,
        description="Guardrails this group's requests run besides `guardrails_default`, by name.",
    )
    output_stream: Literal["off", "buffer"] = Field(
        default="off",
        description="Output guardrails on streamed answers: `off` (streams are not checked) or `buffer` (the "
        "whole stream is held, within `max_response_bytes`, and checked before its first byte is sent).",
    )

    @model_validator(mode="after")
    def _check_hedging_retries(self) -> Self:
        # A hedged group's second chance is the race, not a retry in place: a retries value
        # there would be silently ignored, so it is refused instead.
        if self.hedge_after is not None and self.retries:
            raise ValueError("retries does not apply to a group with hedge_after (the race is its second chance)")
        return self

    def member_settings(self) -> tuple[MemberSettings, ...]:
        """Every member in table form (a plain string is a member with weight 1, no limits)."""
        return tuple(MemberSettings(ref=m) if isinstance(m, str) else m for m in self.members)


def flatten_groups(groups: Mapping[str, GroupSettings]) -> dict[str, tuple[MemberSettings, ...]]:
    """Each group's concrete members, nested groups expanded in place, first occurrence kept.

    Members must already name configured providers and groups; a cycle or nesting deeper than
    :data:`MAX_GROUP_DEPTH` raises ``ValueError`` naming the group and the chain.
    """
    return {name: _flatten(groups, name, (name,)) for name in groups}


def _flatten(groups: Mapping[str, GroupSettings], name: str, path: tuple[str, ...]) -> tuple[MemberSettings, ...]:
    if len(path) > MAX_GROUP_DEPTH:
        chain = " -> ".join(f"{GROUP_NAMESPACE}/{step}" for step in path)
        raise ValueError(f"groups.{path[0]}: nesting deeper than {MAX_GROUP_DEPTH} ({chain})")
    flat: dict[str, MemberSettings] = {}
    for member in groups[name].member_settings():
        ref = parse_model_ref(member.ref)
        if isinstance(ref, InvalidRef):  # pragma: no cover - refused by the reference checks first
            raise ValueError(f"groups.{name}: {member.ref!r}: {ref.message}")
        if ref.kind is RefKind.GROUP:
            if ref.name in path:
                chain = " -> ".join(f"{GROUP_NAMESPACE}/{step}" for step in (*path, ref.name))
                raise ValueError(f"groups.{path[0]}: nesting cycle {chain}")
            nested: tuple[MemberSettings, ...] = tuple(
                inner.model_copy(update={"weight": inner.weight * member.weight})
                for inner in _flatten(groups, ref.name, (*path, ref.name))
            )
        else:
            nested = (member,)
        for item in nested:
            flat.setdefault(item.ref, item)
    return tuple(flat.values())
