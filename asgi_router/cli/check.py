"""``asgi-router check``: a configuration validated, and what the router will do with it.

Loading is the whole validation (every refusal names its key and the file); what is printed
after is the configuration as the router sees it once nested groups are expanded: each group's
members in their order (with weights and budgets), how its strategy orders them per request,
what fails over, its hedging and canned reply, and for a group with rules the rules in the
order they are tried. Each provider shows the protocol it speaks (its ``kind``) and each route
the protocol its clients speak. No key is printed: a provider shows where its key comes from.
Last come the warnings a valid configuration may still deserve (``config/advisories.py``): a
provider that will be skipped for want of its key, one configured the pre-``kind`` way;
``check --strict`` exits 1 on any of them.
"""

from __future__ import annotations

from collections.abc import Collection, Set
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from asgi_router.config.advisories import advisories
from asgi_router.config.caller_settings import CallerCaps, SessionCaps
from asgi_router.config.group_settings import GroupSettings, MemberSettings
from asgi_router.config.ledger_settings import effective_ledger_url, ledger_target
from asgi_router.config.provider_settings import ProviderSettings
from asgi_router.config.rules_settings import RuleSettings
from asgi_router.config.settings import RouterSettings
from asgi_router.config.state_settings import shared_store_url
from asgi_router.core.classify import DEFAULT_FAILOVER
from asgi_router.core.reasons import Reason
from asgi_router.core.route_paths import RouteKind, route_kind
from asgi_router.core.store_url import mask_store_url

__all__ = ["STRATEGY_NOTES", "describe", "describe_group", "describe_reasons", "describe_rule", "warnings"]

#: How each strategy orders a group's members, per request.
STRATEGY_NOTES: Final = {
    "order": "tried in the order listed",
    "rotate": "the same order, each request starting one member further",
    "weighted": "first pick drawn by weight, the rest heaviest first",
    "least_busy": "fewest attempts in flight first",
    "latency": "lowest time-to-first-byte average first, now and then another to keep measuring",
    "cost": "cheapest for the request first, by catalog prices",
    "usage": "least used share of its rpm/tpm budget first",
}

#: What each kind of route speaks, as ``check`` lists the routes.
_PROTOCOLS: Final[dict[RouteKind, str]] = {
    "chat": "OpenAI chat completions",
    "messages": "Anthropic Messages",
    "responses": "OpenAI Responses",
    "openai": "OpenAI, passed through to OpenAI-kind providers",
}


def describe_reasons(reasons: Set[Reason]) -> str:
    """A set of failure reasons, said briefly."""
    if reasons == DEFAULT_FAILOVER:
        return "every failure but client_error (the default)"
    return ", ".join(sorted(reasons)) or "nothing"


def _url(base_url: str) -> str:
    """``base_url`` without any user or password it may carry."""
    parts = urlsplit(base_url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _key_source(provider: ProviderSettings) -> str:
    if provider.api_key is not None:
        return "key in the configuration"
    if provider.api_key_env:
        state = "set" if provider.is_configured else "NOT SET: its models are skipped"
        return f"key from ${provider.api_key_env} ({state})"
    return "no key"


def _member(index: int, member: MemberSettings, strategy: str) -> str:
    notes = []
    if strategy == "weighted" or member.weight != 1.0:
        notes.append(f"weight {member.weight:g}")
    if member.rpm is not None:
        notes.append(f"rpm {member.rpm}")
    if member.tpm is not None:
        notes.append(f"tpm {member.tpm}")
    return f"    {index}. {member.ref}" + (f"  ({', '.join(notes)})" if notes else "")


def describe_rule(rule: RuleSettings) -> str:
    """``name: condition, condition -> route`` (``always`` for a rule without conditions)."""
    wants = []
    for name in ("stream", "tools", "reasoning", "images"):
        value = getattr(rule, name)
        if value is not None:
            wants.append(f"{name} = {'true' if value else 'false'}")
    wants += [f"headers.{header} = {value!r}" for header, value in rule.headers.items()]
    wants += [f"metadata.{key} = {value!r}" for key, value in rule.metadata.items()]
    if rule.min_prompt_tokens is not None:
        wants.append(f"prompt tokens >= {rule.min_prompt_tokens}")
    if rule.max_prompt_tokens is not None:
        wants.append(f"prompt tokens < {rule.max_prompt_tokens}")
    return f"{rule.name}: {', '.join(wants) or 'always'} -> {rule.route}"


def describe_group(settings: RouterSettings, name: str, group: GroupSettings) -> list[str]:
    """The lines that describe ``group/<name>``: its plan, how it is ordered, its rules."""
    members = settings.flat_member_settings(name)
    retries = group.retries if group.retries is not None else (settings.retries if len(members) == 1 else 0)
    lines = [f"  group/{name}  ({group.strategy}: {STRATEGY_NOTES[group.strategy]})"]
    lines += [_member(index, member, group.strategy) for index, member in enumerate(members, 1)]
    lines.append(f"    fails over on: {describe_reasons(group.failover_on)}; retries in place: {retries}")
    if group.hedge_after is not None:
        lines.append(f"    hedges after {group.hedge_after:g} s (at most {group.hedge_budget:.0%} of its requests)")
    if group.degraded is not None:
        lines.append("    when every member fails with a 429 or 5xx: its canned reply")
    if group.sticky is not None:
        sticky = group.sticky
        lines.append(
            f"    sticky: a {sticky.key} keeps the member that served it for {sticky.ttl:g} s "
            f"(at most {sticky.max_keys:,} kept)"
        )
    if group.queue is not None:
        queue = group.queue
        lines.append(
            f"    queue: waits up to {queue.max_wait:g} s for capacity, at most {queue.max_size:,} waiting "
            f"(priority from {queue.priority_header})"
        )
    if group.rules:
        rules = [rule for rule in settings.rules if rule.applies_to is None or name in rule.applies_to]
        lines.append("    rules, the first that matches wins (else the members above):")
        lines += [f"      - {describe_rule(rule)}" for rule in rules] or ["      (none apply to this group)"]
    return lines


def _auth(settings: RouterSettings) -> str:
    if settings.authorize is not None:
        return "the authorize= callable"
    if settings.api_keys is not None:
        count = len(settings.api_keys)
        return f"api_keys ({count} key{'s' if count != 1 else ''})"
    return "none: allow_unauthenticated = true (development only)"


def _caps(caps: CallerCaps | SessionCaps) -> str:
    """A caps table said briefly: its caps, then what happens past them."""
    if isinstance(caps, CallerCaps):
        said = [
            f"${caps.usd_per_day:g}/day" if caps.usd_per_day is not None else "",
            f"{caps.tokens_per_day:,} tokens/day" if caps.tokens_per_day is not None else "",
            f"{caps.rpm:,} rpm" if caps.rpm is not None else "",
        ]
    else:
        said = [
            f"${caps.usd_per_session:g}/session" if caps.usd_per_session is not None else "",
            f"{caps.tokens_per_session:,} tokens/session" if caps.tokens_per_session is not None else "",
            f"kept {caps.ttl:g} s after the last request",
        ]
    past = "refused (429)"
    if caps.downgrade_to is not None:
        past = f"served by {caps.downgrade_to}" + (
            f", refused past {caps.hard_limit:g}x" if caps.hard_limit is not None else ""
        )
    return f"{', '.join(part for part in said if part)}; past a cap: {past}"


def _callers(settings: RouterSettings) -> list[str]:
    """One line per caller's caps table and one for the sessions', or none when nothing is capped."""
    lines = [f"  {name}: {_caps(caps)}" for name, caps in sorted(settings.callers.items())]
    if settings.sessions is not None:
        lines.append(f"  sessions (header {settings.session_header}): {_caps(settings.sessions)}")
    return ["", "caller caps:", *lines] if lines else []


def _state(settings: RouterSettings) -> str:
    url = shared_store_url(settings.state_url)
    if url is None:
        return "this process only (no state_url)"
    return f"shared through {mask_store_url(url)} (key prefix {settings.state_key_prefix!r})"


def _ledger(settings: RouterSettings) -> str:
    url = effective_ledger_url(settings.ledger_url, settings.admin_keys)
    if url is None:
        return "none (no ledger_url): spend is not kept, caps count in memory"
    default = " (the default with admin_keys)" if settings.ledger_url is None else ""
    return f"{ledger_target(url).kind} {mask_store_url(url)}{default}"


def describe(settings: RouterSettings, path: Path, also: Collection[str] = ()) -> str:
    """The report ``check`` prints for valid ``settings`` loaded from ``path`` (``also``: the
    ``ASGI_ROUTER_...`` variables the command line reads itself, not stray ones)."""
    lines = [f"{path}: valid", "", "providers:"]
    for name, provider in sorted(settings.providers.items()):
        lines.append(f"  {name}  {provider.kind}  {_url(provider.base_url)}  {_key_source(provider)}")
    lines += ["", "groups (nested groups expanded):"]
    for name, group in sorted(settings.groups.items()):
        lines += describe_group(settings, name, group)
    if not settings.groups:
        lines.append("  (none: clients name provider/model-id directly)")
    if settings.aliases:
        lines += ["", "aliases:"]
        lines += [f"  {name} -> {target}" for name, target in sorted(settings.aliases.items())]
    lines += ["", "routes:"]
    lines += [f"  POST {route}  ({_PROTOCOLS[route_kind(route)]})" for route in settings.routes]
    if settings.models_route is not None:
        lines.append(f"  GET  {settings.models_route}  (models)")
    if settings.metrics_route is not None:
        public = "public" if settings.metrics_public else "behind inbound auth"
        lines.append(f"  GET  {settings.metrics_route}  (Prometheus metrics, {public})")
    if settings.status_route is not None:
        lines.append(f"  GET  {settings.status_route}  (status page; .json: its data)")
    if settings.usage_route is not None:
        lines.append(f"  GET  {settings.usage_route}  (each caller's own spend and caps, JSON)")
    lines += _callers(settings)
    lines += ["", f"inbound auth: {_auth(settings)}"]
    lines.append(f"state: {_state(settings)}")
    lines.append(f"ledger: {_ledger(settings)}")
    lines += warnings(advisories(settings, also))
    return "\n".join(lines)


def warnings(warned: list[str]) -> list[str]:
    """The warnings' section of the report (none: no lines)."""
    if not warned:
        return []
    return ["", "warnings (check --strict fails on them):", *(f"  {advice}" for advice in warned)]
