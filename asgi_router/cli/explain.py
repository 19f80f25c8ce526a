"""``asgi-router explain``: which rule and plan one request would get, and why.

The request is described by its ``model`` and, optionally, its headers and body: the same
:class:`~asgi_router.routing.facts.RequestFacts` the router reads are computed from them, the
rules of a rules group are checked one condition at a time (``routing/rules.py``), and the
configuration's own :class:`~asgi_router.routing.plan.Resolver` gives the plan. Then, for each
candidate, what would skip it before any call that can be known without live traffic: a provider
whose key is not set, a catalog context window the prompt does not fit. Strategies that read
live statistics (``latency``, ``least_busy``, ``usage``, ``weighted``'s draw) are shown as they
order a group with none recorded; the output says so. Each candidate shows the protocol its
provider speaks (``openai`` or ``anthropic``); a rules group none of whose rules applies to it
gets no rules section. Nothing is sent anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from asgi_router.attempts.decisions import retries_for
from asgi_router.cli.check import STRATEGY_NOTES, describe_reasons
from asgi_router.config.config_error import ConfigError
from asgi_router.config.rules_settings import DEFAULT_ROUTE
from asgi_router.config.settings import RouterSettings
from asgi_router.core.refs import InvalidRef, RefKind, parse_model_ref
from asgi_router.inbound.safejson import JsonRefused, loads
from asgi_router.routing.catalog import Catalog
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan, ResolveError, Resolver
from asgi_router.routing.rules import conditions

__all__ = ["explain", "plan_group", "read_body", "read_headers"]

#: Strategies whose order is the configuration's alone (the rest read live numbers or chance).
_FIXED = frozenset({"order", "rotate"})


def read_headers(pairs: Sequence[str]) -> list[tuple[bytes, bytes]]:
    """``NAME=VALUE`` arguments as inbound headers (names lower-cased, as a server gives them)."""
    headers = []
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name.strip():
            raise ConfigError(f"--header {pair!r}: expected NAME=VALUE")
        headers.append((name.strip().lower().encode("latin-1"), value.encode("latin-1")))
    return headers


def read_body(path: Path | None) -> dict[str, Any]:
    """The chat request body in ``path`` (a JSON object), or an empty one."""
    if path is None:
        return {}
    try:
        payload = loads(path.read_bytes())  # the router's own parse: its depth and size bounds
    except OSError as exc:
        raise ConfigError(f"--body {path}: not a readable JSON file ({exc})") from None
    if isinstance(payload, JsonRefused):
        raise ConfigError(f"--body {path}: not a readable JSON file ({payload.message})")
    if not isinstance(payload, dict):
        raise ConfigError(f"--body {path}: a chat request body is a JSON object")
    return payload


def _facts_line(facts: RequestFacts, headers: list[tuple[bytes, bytes]], payload: dict[str, Any]) -> str:
    said = [
        f"prompt ~{facts.prompt_tokens} tokens (estimated)",
        f"images {'yes' if facts.images else 'no'}",
        f"tools {'yes' if facts.tools else 'no'}",
        f"stream {'yes' if facts.stream else 'no'}",
        f"reasoning {'yes' if facts.reasoning else 'no'}",
    ]
    if facts.max_tokens is not None:
        said.append(f"max_tokens {facts.max_tokens}")
    said += [f"{name.decode('latin-1')}: {value.decode('latin-1')}" for name, value in headers]
    metadata = payload.get("metadata")
    if isinstance(metadata, dict) and metadata:
        said.append("metadata " + ", ".join(f"{key}={value!r}" for key, value in metadata.items()))
    return "; ".join(said)


def _rules(settings: RouterSettings, group: str, facts: RequestFacts) -> list[str]:
    """The rules of a rules group, tried one by one; nothing when no rule applies to it."""
    rules = [rule for rule in settings.rules if rule.applies_to is None or group in rule.applies_to]
    if not rules:
        return []
    lines = [f"rules of group/{group}, tried in order (the first whose every condition holds wins):"]
    chosen = False
    for rule in rules:
        if chosen:
            lines.append(f"  {rule.name}: not tried (a rule above matched)")
            continue
        found = conditions(rule, facts)
        chosen = all(condition.held for condition in found)
        lines.append(f"  {rule.name}: {'MATCHES -> ' + rule.route if chosen else 'no'}")
        for condition in found:
            lines.append(f"      {condition.wants}: {condition.found}  -> {'holds' if condition.held else 'fails'}")
        if not found:
            lines.append("      (no conditions: always matches)")
    if not chosen:
        lines.append(f"  none matched: the members of group/{group} are the plan (route 'default')")
    return lines


def plan_group(settings: RouterSettings, plan: Plan) -> str | None:
    """The group whose members ``plan`` is made of (``None``: a direct model), the rule's target
    when a rule chose it (a direct target keeps the rules group's policies, not its members)."""
    if plan.rule != DEFAULT_ROUTE:
        target = parse_model_ref(next(rule.route for rule in settings.rules if rule.name == plan.rule))
        return target.name if not isinstance(target, InvalidRef) and target.kind is RefKind.GROUP else None
    return plan.policy.name if plan.policy is not None else None


def _plan(settings: RouterSettings, plan: Plan, facts: RequestFacts) -> list[str]:
    catalog = Catalog(settings.catalog)
    group = plan_group(settings, plan)
    strategy = settings.groups[group].strategy if group is not None else None
    head = f"plan (route {plan.rule!r}"
    head += f", group/{group}, {strategy}: {STRATEGY_NOTES[strategy]})" if strategy else ", a direct model)"
    lines = [head + ":"]
    for index, candidate in enumerate(plan.candidates, 1):
        notes = []
        provider = settings.providers[candidate.provider]
        if not provider.is_configured:
            notes.append(f"skipped: provider_not_configured (${provider.api_key_env} is not set)")
        elif not catalog.fits(candidate.key, facts.prompt_tokens, facts.max_tokens):
            notes.append("skipped: context_window (the catalog says the prompt does not fit)")
        line = f"  {index}. {candidate.key}  ({provider.kind})"
        lines.append(line + (f"  [{'; '.join(notes)}]" if notes else ""))
    if strategy is not None and strategy not in _FIXED:
        lines.append(f"  (the order of a {strategy} group depends on live statistics; shown with none recorded)")
    retries = retries_for(plan, settings.retries)
    lines.append(f"  fails over on: {describe_reasons(plan.failover_on)}; retries in place: {retries}")
    if plan.hedged and plan.policy is not None:
        lines.append(f"  hedges: a second candidate races one silent for {plan.policy.hedge_after:g} s")
    return lines


def explain(settings: RouterSettings, model: str, header_args: Sequence[str], body: Path | None, out: TextIO) -> int:
    """Print the explanation; 0 if the request would be routed, 1 if the router would refuse it."""
    headers = read_headers(header_args)
    payload = read_body(body)
    payload["model"] = model
    facts = RequestFacts(payload, headers)
    lines = [f"request: model {model!r}", f"facts: {_facts_line(facts, headers, payload)}", ""]
    ref = parse_model_ref(model)
    if isinstance(ref, InvalidRef):
        lines.append(f"refused: 400 invalid_model_reference: {ref.message}")
        print("\n".join(lines), file=out)
        return 1
    if ref.kind is RefKind.ALIAS and ref.name in settings.aliases:
        lines.append(f"{model!r} is an alias of {settings.aliases[ref.name]}")
        target = parse_model_ref(settings.aliases[ref.name])
        ref = target if not isinstance(target, InvalidRef) else ref
    if ref.kind is RefKind.GROUP and ref.name in settings.groups and settings.groups[ref.name].rules:
        lines += _rules(settings, ref.name, facts)
    plan = Resolver(settings).resolve_string(model, facts)
    if isinstance(plan, ResolveError):
        lines.append(f"refused: {plan.status} {plan.code}: {plan.message}")
        print("\n".join(lines), file=out)
        return 1
    if lines[-1]:  # the rules' section said something: a blank line between it and the plan
        lines.append("")
    lines += _plan(settings, plan, facts)
    print("\n".join(lines), file=out)
    return 0
