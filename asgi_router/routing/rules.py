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

from asgi_router.config.rules import RuleSettings
from asgi_router.routing.facts import RequestFacts

__all__ = ["RuleTable", "matches"]


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
