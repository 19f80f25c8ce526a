"""The checks across tables: every name a configuration uses must name something it configures.

A group member, an alias, a catalog key and a rule's route name providers and groups; a rule's
``applies_to`` names groups with rules. These checks run on the settings once they are built
and, when some fields were refused, on whatever the file and the environment *did* say (the raw
tables, models or plain dicts alike): an operator who mistyped a strategy and a provider's name
reads both in one error instead of fixing one to discover the next. Each problem carries its key
(so the error can say which file or variable to edit) and, for a name that is close to a
configured one, the likely meant name.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from asgi_router.core.refs import GROUP_NAMESPACE, InvalidRef, RefKind, is_valid_name, parse_model_ref

__all__ = ["Problem", "did_you_mean", "reference_problems", "refusal"]

Loc = tuple[int | str, ...]


@dataclass(frozen=True, slots=True)
class Problem:
    """One refusal: the key it is about (empty: the whole configuration) and what is wrong."""

    loc: Loc
    message: str
    #: The top-level keys whose values contradict each other: the error says where each came from.
    sources: tuple[str, ...] = ()
    #: The message without what it says of its own sources (an operator's rendering says them all).
    plain: str | None = None


def _detail(error: Mapping[str, Any]) -> dict[str, Any]:
    """pydantic's ``error`` as it can be raised again; a type pydantic will not rebuild (an
    ``ImportString``'s ``import_error``) as the ``value_error`` its message says."""
    detail = {"type": error["type"], "loc": error["loc"], "input": error.get("input"), "ctx": error.get("ctx") or {}}
    try:
        ValidationError.from_exception_data("probe", [detail])  # type: ignore[list-item]
    except KeyError:
        return {"type": "value_error", "loc": error["loc"], "input": None, "ctx": {"error": ValueError(error["msg"])}}
    return detail


def refusal(title: str, errors: Iterable[Mapping[str, Any]], problems: Iterable[Problem]) -> ValidationError:
    """One ``ValidationError`` carrying pydantic's own ``errors`` and then ``problems``."""
    details = [_detail(error) for error in errors]
    details += [
        {
            "type": "value_error",
            "loc": problem.loc,
            "input": None,
            "ctx": {"error": ValueError(problem.message), "sources": problem.sources, "plain": problem.plain},
        }
        for problem in problems
    ]
    return ValidationError.from_exception_data(title, details, hide_input=True)  # type: ignore[arg-type]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, [choice for choice in choices if choice != word], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _get(item: Any, name: str) -> Any:
    """A table's entry, whether the table is a built model or the raw dict it was built from."""
    if isinstance(item, Mapping):
        return item.get(name)
    return getattr(item, name, None)


def _table(value: Any) -> dict[str, Any]:
    """A table of named entries, or none when it is not one (its own check says so)."""
    return {str(name): entry for name, entry in value.items()} if isinstance(value, Mapping) else {}


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


class _Checker:
    def __init__(self, data: Any) -> None:
        self.providers = _table(_get(data, "providers"))
        self.groups = _table(_get(data, "groups"))
        self.problems: list[Problem] = []

    def refuse(self, loc: Loc, message: str) -> None:
        self.problems.append(Problem(loc, message))

    def member(self, loc: Loc, member: Any) -> None:
        """A reference to a provider's model or a group, as a member, alias or rule names one."""
        if not isinstance(member, str):
            return  # not a string: the field's own check refuses it
        ref = parse_model_ref(member)
        if isinstance(ref, InvalidRef):
            self.refuse(loc, f"{member!r} is not a valid reference ({ref.message})")
        elif ref.kind is RefKind.ALIAS:
            self.refuse(loc, f"{member!r} must be 'provider/model-id' or 'group/<id>'")
        elif ref.kind is RefKind.DIRECT and ref.name not in self.providers:
            hint = did_you_mean(ref.name, self.providers)
            self.refuse(loc, f"{member!r} names unknown provider {ref.name!r}{hint}")
        elif ref.kind is RefKind.GROUP and ref.name not in self.groups:
            hint = did_you_mean(ref.name, self.groups)
            self.refuse(loc, f"{member!r} names unknown group {ref.name!r}{hint}")

    def names(self) -> None:
        for name in self.providers:
            if name == GROUP_NAMESPACE:
                self.refuse(("providers", name), "'group' is reserved for routing groups")
            elif not is_valid_name(name):
                self.refuse(("providers", name), "names are letters, digits, '_', '.', '-'")
        for name in self.groups:
            if not is_valid_name(name):
                self.refuse(("groups", name), "names are letters, digits, '_', '.', '-'")

    def group_members(self) -> None:
        for name, group in self.groups.items():
            for index, member in enumerate(_items(_get(group, "members"))):
                loc: Loc = ("groups", name, "members", index)
                ref = member if isinstance(member, str) else _get(member, "ref")
                self.member(loc, ref)
                limited = not isinstance(member, str) and (
                    _get(member, "rpm") or _get(member, "tpm") or _get(member, "latency_target")
                )
                if isinstance(ref, str) and ref.startswith(f"{GROUP_NAMESPACE}/") and limited:
                    self.refuse(loc, "rpm/tpm/latency_target belong on 'provider/model-id' members, not on a group")
                resume = None if isinstance(member, str) else _get(member, "resume")
                if resume is not None and isinstance(ref, str):
                    self.member_resume(loc, ref, resume)

    def semantic_embed(self) -> None:
        """A group's ``cache.semantic.embed`` names an embeddings model as a member would."""
        for name, group in self.groups.items():
            embed = _get(_get(_get(group, "cache"), "semantic"), "embed")
            if embed is not None:
                self.member(("groups", name, "cache", "semantic", "embed"), embed)

    def member_resume(self, loc: Loc, ref: str, resume: Any) -> None:
        """A member's ``resume`` must suit its provider's protocol (Anthropic's takes prefill only)."""
        if ref.startswith(f"{GROUP_NAMESPACE}/"):
            self.refuse(loc, "resume belongs on 'provider/model-id' members, not on a group")
            return
        provider = self.providers.get(ref.partition("/")[0])
        kind = _get(provider, "kind") if provider is not None else None
        if kind == "anthropic" and resume in ("prefix", "continue_final_message"):
            self.refuse((*loc, "resume"), f'resume = "{resume}" is not for kind = "anthropic" (use "prefill")')

    def aliases(self, aliases: dict[str, Any]) -> None:
        for name, target in aliases.items():
            if not is_valid_name(name):
                self.refuse(("aliases", name), "an alias is a bare name (no '/')")
            self.member(("aliases", name), target)

    def catalog(self, catalog: dict[str, Any]) -> None:
        for key in catalog:
            ref = parse_model_ref(key)
            if isinstance(ref, InvalidRef) or ref.kind is not RefKind.DIRECT:
                self.refuse(("catalog", key), "keys are 'provider/model-id'")
            elif ref.name not in self.providers:
                hint = did_you_mean(ref.name, self.providers)
                self.refuse(("catalog", key), f"names unknown provider {ref.name!r}{hint}")

    def rules(self, rules: list[Any]) -> None:
        seen: set[str] = set()
        with_rules = {name for name, group in self.groups.items() if _get(group, "rules") is True}
        for index, rule in enumerate(rules):
            name, route = _get(rule, "name"), _get(rule, "route")
            if isinstance(name, str):
                if name in seen:
                    self.refuse(("rules", index, "name"), f"rule name {name!r} is used twice")
                seen.add(name)
            before = len(self.problems)
            self.member(("rules", index, "route"), route)
            target = parse_model_ref(route) if isinstance(route, str) else None
            if len(self.problems) == before and target is not None and not isinstance(target, InvalidRef):
                if target.kind is RefKind.GROUP and target.name in with_rules:
                    self.refuse(("rules", index, "route"), f"{route!r} has rules itself; rules apply once per request")
            for group in _items(_get(rule, "applies_to")):
                if group not in with_rules:
                    hint = did_you_mean(str(group), with_rules)
                    self.refuse(("rules", index, "applies_to"), f"{group!r} is not a group with rules = true{hint}")


def reference_problems(data: Any) -> list[Problem]:
    """Every name ``data`` (built settings, or the raw tables they are built from) uses that
    names nothing it configures, in the order of the configuration's tables."""
    checker = _Checker(data)
    checker.names()
    checker.group_members()
    checker.semantic_embed()
    checker.aliases(_table(_get(data, "aliases")))
    checker.catalog(_table(_get(data, "catalog")))
    checker.rules(_items(_get(data, "rules")))
    return checker.problems
