"""``[[rules]]``: pick the group for a request to a rules-enabled group from what the request is.

A group with ``rules = true`` (say ``group/auto``) first runs the rules table, in order; the
first rule whose every condition holds names the ref to resolve instead (``route``), and its
``name`` goes back to the client as ``x-router-route``. When no rule matches, the group's own
members are the plan and the route is ``default``. A rule with no conditions always matches,
which makes a catch-all last rule possible.

Conditions are plain request facts, so every decision can be explained from the request alone:
estimated prompt tokens (``min_prompt_tokens`` is >=, ``max_prompt_tokens`` is <), images, tools,
``stream``, ``reasoning`` (``reasoning_effort`` present), header values and ``metadata`` tags.
Cheap checks run before the token estimate so most misses never estimate anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, field_validator

from .facts import RequestFacts
from .refs import is_valid_name

__all__ = ["DEFAULT_ROUTE", "RuleSettings", "RuleTable"]

#: The ``x-router-route`` value when no rule chose the plan.
DEFAULT_ROUTE: Final = "default"


class RuleSettings(BaseModel):
    """One ``[[rules]]`` entry: conditions (all must hold) and the ref they route to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Shown to the client as ``x-router-route`` and recorded with the request.
    name: str
    #: What to resolve when the rule matches: ``group/<id>`` or ``provider/model-id``.
    route: str
    #: Rules-enabled groups this rule applies to (all of them when unset).
    applies_to: list[str] | None = None
    min_prompt_tokens: NonNegativeInt | None = None
    max_prompt_tokens: PositiveInt | None = None
    images: bool | None = None
    tools: bool | None = None
    stream: bool | None = None
    reasoning: bool | None = None
    #: Inbound header values that must all be equal (names are case-insensitive).
    headers: dict[str, str] = Field(default_factory=dict)
    #: ``metadata`` entries of the request body that must all be equal.
    metadata: dict[str, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not is_valid_name(value) or value == DEFAULT_ROUTE:
            raise ValueError(f"rule name {value!r} must be letters, digits, '_', '.', '-' and not 'default'")
        return value

    @field_validator("headers")
    @classmethod
    def _lower_header_names(cls, value: dict[str, str]) -> dict[str, str]:
        return {name.lower(): expected for name, expected in value.items()}

    def matches(self, facts: RequestFacts) -> bool:
        """Whether every condition holds for ``facts`` (cheap checks first)."""
        if self.stream is not None and facts.stream is not self.stream:
            return False
        if self.tools is not None and facts.tools is not self.tools:
            return False
        if self.reasoning is not None and facts.reasoning is not self.reasoning:
            return False
        for name, expected in self.headers.items():
            if facts.header(name.encode("latin-1")) != expected:
                return False
        for key, expected in self.metadata.items():
            if facts.metadata(key) != expected:
                return False
        if self.images is not None and facts.images is not self.images:
            return False
        if self.min_prompt_tokens is not None and facts.prompt_tokens < self.min_prompt_tokens:
            return False
        return self.max_prompt_tokens is None or facts.prompt_tokens < self.max_prompt_tokens


class RuleTable:
    """The rules each rules-enabled group runs, in configured order."""

    __slots__ = ("_by_group",)

    def __init__(self, rules: Sequence[RuleSettings], groups: Sequence[str]) -> None:
        self._by_group: dict[str, tuple[RuleSettings, ...]] = {
            group: tuple(rule for rule in rules if rule.applies_to is None or group in rule.applies_to)
            for group in groups
        }

    def pick(self, group: str, facts: RequestFacts) -> RuleSettings | None:
        """The first rule for ``group`` that matches, or ``None`` (the default route)."""
        for rule in self._by_group.get(group, ()):
            if rule.matches(facts):
                return rule
        return None
