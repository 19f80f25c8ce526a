"""``[[rules]]``: pick the group for a request to a rules-enabled group from what the request is.

A group with ``rules = true`` (say ``group/auto``) first runs the rules table, in order; the
first rule whose every condition holds names the ref to resolve instead (``route``), and its
``name`` goes back to the client in the router's route header. When no rule matches, the group's own
members are the plan and the route is ``default``. A rule with no conditions always matches,
which makes a catch-all last rule possible.

Conditions are plain request facts, so every decision can be explained from the request alone:
estimated prompt tokens (``min_prompt_tokens`` is >=, ``max_prompt_tokens`` is <), images, tools,
``stream``, ``reasoning`` (``reasoning_effort`` present), header values and ``metadata`` tags.
Cheap checks run before the token estimate so most misses never estimate anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from asgi_router.config.rules_settings import RuleSettings
from asgi_router.routing.facts import RequestFacts

__all__ = ["Condition", "RuleTable", "conditions", "matches"]


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
            if matches(rule, facts):
                return rule
        return None


def matches(rule: RuleSettings, facts: RequestFacts) -> bool:
    """Whether every condition holds for ``facts`` (cheap checks first)."""
    if rule.stream is not None and facts.stream is not rule.stream:
        return False
    if rule.tools is not None and facts.tools is not rule.tools:
        return False
    if rule.reasoning is not None and facts.reasoning is not rule.reasoning:
        return False
    for name, expected in rule.headers.items():
        if facts.header(name.encode("latin-1")) != expected:
            return False
    for key, expected in rule.metadata.items():
        if facts.metadata(key) != expected:
            return False
    if rule.images is not None and facts.images is not rule.images:
        return False
    if rule.min_prompt_tokens is not None and facts.prompt_tokens < rule.min_prompt_tokens:
        return False
    return rule.max_prompt_tokens is None or facts.prompt_tokens < rule.max_prompt_tokens


@dataclass(frozen=True, slots=True)
class Condition:
    """One condition of a rule, checked against a request: what it asks and what it found."""

    #: The setting, as written (``min_prompt_tokens = 8000``, ``headers.x-tier = "gold"``).
    wants: str
    #: What the request has (``prompt_tokens = 1234``, ``x-tier absent``).
    found: str
    held: bool


def _yes(value: bool) -> str:
    return "true" if value else "false"


def conditions(rule: RuleSettings, facts: RequestFacts) -> list[Condition]:
    """Every condition ``rule`` sets, with whether it holds for ``facts``: why a rule matched or
    not (``asgi-router explain``). A rule matches exactly when every one holds, as
    :func:`matches` decides (which stops at the first that does not)."""
    found: list[Condition] = []
    for name, wanted in (("stream", rule.stream), ("tools", rule.tools), ("reasoning", rule.reasoning)):
        if wanted is not None:
            have = bool(getattr(facts, name))
            found.append(Condition(f"{name} = {_yes(wanted)}", f"{name} = {_yes(have)}", have is wanted))
    for header, expected in rule.headers.items():
        value = facts.header(header.encode("latin-1"))
        seen = f"{header} = {value!r}" if value is not None else f"{header} absent"
        found.append(Condition(f"headers.{header} = {expected!r}", seen, value == expected))
    for key, expected in rule.metadata.items():
        value = facts.metadata(key)
        seen = f"metadata.{key} = {value!r}" if value is not None else f"metadata.{key} absent"
        found.append(Condition(f"metadata.{key} = {expected!r}", seen, value == expected))
    if rule.images is not None:
        found.append(
            Condition(f"images = {_yes(rule.images)}", f"images = {_yes(facts.images)}", facts.images is rule.images)
        )
    tokens = f"prompt_tokens = {facts.prompt_tokens} (estimated)"
    if rule.min_prompt_tokens is not None:
        held = facts.prompt_tokens >= rule.min_prompt_tokens
        found.append(Condition(f"min_prompt_tokens = {rule.min_prompt_tokens}", tokens, held))
    if rule.max_prompt_tokens is not None:
        held = facts.prompt_tokens < rule.max_prompt_tokens
        found.append(Condition(f"max_prompt_tokens = {rule.max_prompt_tokens}", tokens, held))
    return found
