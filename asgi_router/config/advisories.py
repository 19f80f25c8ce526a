"""What a valid configuration may still get wrong: said at start-up, and by ``asgi-router check``.

Some settings are accepted because they are right in some deployments: a provider whose
``api_key_env`` is unset is skipped, not refused, so one file can list providers only some
deployments have keys for. Others are accepted because they were once the way to do something:
an OpenAI-kind provider sending Anthropic's ``x-api-key`` and ``anthropic-version`` headers was
how Anthropic was reached before providers had a ``kind``; such a provider now answers every
Messages-route request with ``protocol_mismatch``. Caps without a ledger count in memory and
reset on restart. None is an error, each deserves a warning: the router logs each at start-up,
``check`` prints them and ``check --strict`` fails on them.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Collection, Mapping
from typing import Any, Final

from asgi_router.config.config_error import ENV_DELIMITER, ENV_PREFIX
from asgi_router.config.ledger_settings import CAPS_WITHOUT_LEDGER, DEFAULT_LEDGER_VARIABLE, effective_ledger_url
from asgi_router.config.settings import RouterSettings
from asgi_router.core.refs import InvalidRef, RefKind, parse_model_ref
from asgi_router.core.route_paths import RouteKind, route_kind

__all__ = [
    "advisories",
    "caps_without_ledger",
    "downgrade_mismatches",
    "kind_mismatches",
    "stray_environment",
    "unset_key_lines",
    "unset_keys",
]

#: Headers only Anthropic's API reads: an OpenAI-kind provider sending them was meant to be Anthropic.
_ANTHROPIC_HEADERS: Final = ("x-api-key", "anthropic-version")


def unset_keys(settings: RouterSettings) -> list[str]:
    """One line per provider whose ``api_key_env`` names an unset variable (it is skipped)."""
    return [
        _unset(name, provider.api_key_env)
        for name, provider in sorted(settings.providers.items())
        if not provider.is_configured
    ]


def unset_key_lines(providers: object, environ: Mapping[str, str] | None = None) -> list[str]:
    """:func:`unset_keys` for a configuration that did not load: its ``providers`` table as the file
    has it (whatever it holds), so that ``check`` says these beside the errors."""
    environ = os.environ if environ is None else environ
    if not isinstance(providers, Mapping):
        return []
    found = []
    for name, provider in sorted(providers.items(), key=lambda item: str(item[0])):
        table: Mapping[str, Any] = provider if isinstance(provider, Mapping) else {}
        variable = table.get("api_key_env")
        if table.get("api_key") is None and isinstance(variable, str) and variable and not environ.get(variable):
            found.append(_unset(str(name), variable))
    return found


def _unset(name: str, variable: str | None) -> str:
    return f"provider {name!r} is skipped (provider_not_configured): its api_key_env {variable} is not set"


def stray_environment(environ: Mapping[str, str] | None = None, also: Collection[str] = ()) -> list[str]:
    """One line per ``ASGI_ROUTER_...`` variable that sets nothing (no setting has its name, and it
    is not one of ``also``, read by a command, nor the default ledger's variable, read where a
    router with ``admin_keys`` chooses its ledger): the settings ignore it, so a misspelt
    ``ASGI_ROUTER_API_KEY`` would leave the router without the keys it was meant to give."""
    environ = os.environ if environ is None else environ
    fields = list(RouterSettings.model_fields)
    found = []
    for variable in sorted(environ):
        upper = variable.upper()
        if not upper.startswith(ENV_PREFIX) or upper in also or upper == DEFAULT_LEDGER_VARIABLE:
            continue
        field = upper[len(ENV_PREFIX) :].split(ENV_DELIMITER, 1)[0].lower()
        if field not in fields:
            close = difflib.get_close_matches(field, fields, n=1, cutoff=0.6)
            hint = f" (did you mean {ENV_PREFIX}{close[0].upper()}?)" if close else ""
            found.append(f"environment variable {variable} names no router setting and is ignored{hint}")
    return found


def kind_mismatches(settings: RouterSettings) -> list[str]:
    """One line per OpenAI-kind provider configured with Anthropic's headers (the pre-``kind`` way)."""
    found = []
    for name, provider in sorted(settings.providers.items()):
        if provider.kind != "openai":
            continue
        sent = [header for header in _ANTHROPIC_HEADERS if header in provider.headers or provider.auth_header == header]
        if sent:
            found.append(
                f"provider {name!r} sends Anthropic's {' and '.join(sent)} but speaks OpenAI's protocol "
                '(kind = "openai", the default): set kind = "anthropic" (its key goes in x-api-key by itself, '
                "and anthropic_version replaces the header); until then every /v1/messages request to it is "
                "refused with protocol_mismatch"
            )
    return found


#: The provider kinds that can serve each kind of route (an Anthropic provider serves the chat
#: and Responses routes through translation; a Messages route needs an Anthropic provider; any
#: other route is passed through to OpenAI providers only).
_SERVED_BY: Final[dict[RouteKind, frozenset[str]]] = {
    "chat": frozenset({"openai", "anthropic"}),
    "messages": frozenset({"anthropic"}),
    "responses": frozenset({"openai", "anthropic"}),
    "openai": frozenset({"openai"}),
}


def _providers_of(settings: RouterSettings, ref: str) -> set[str] | None:
    """The providers a ``downgrade_to`` ref can reach (a group's members, nested ones expanded;
    an alias's target), or ``None`` when it names none (refused elsewhere)."""
    for _ in range(2):  # an alias names a group or a model, never another alias
        parsed = parse_model_ref(ref)
        if isinstance(parsed, InvalidRef):
            return None
        if parsed.kind is RefKind.ALIAS:
            target = settings.aliases.get(parsed.name)
            if target is None:
                return None
            ref = target
            continue
        if parsed.kind is RefKind.GROUP:
            if parsed.name not in settings.groups:
                return None
            return {member.split("/", 1)[0] for member in settings.flat_members(parsed.name)}
        return {parsed.name}
    return None


def downgrade_mismatches(settings: RouterSettings) -> list[str]:
    """One line per caps table whose ``downgrade_to`` cannot serve one of the router's routes: a
    client of that route past the cap would be refused with ``protocol_mismatch``."""
    tables: list[tuple[str, str]] = [
        (f"callers.{name}", caps.downgrade_to)
        for name, caps in sorted(settings.callers.items())
        if caps.downgrade_to is not None
    ]
    if settings.sessions is not None and settings.sessions.downgrade_to is not None:
        tables.append(("sessions", settings.sessions.downgrade_to))
    found = []
    for table, ref in tables:
        providers = _providers_of(settings, ref)
        if not providers:
            continue
        kinds = {settings.providers[name].kind for name in providers if name in settings.providers}
        for route in settings.routes:
            if not kinds & _SERVED_BY[route_kind(route)]:
                found.append(
                    f"{table}.downgrade_to {ref} has no member that serves {route}: its clients past the cap "
                    "would be refused with protocol_mismatch"
                )
    return found


def advisories(settings: RouterSettings, also: Collection[str] = ()) -> list[str]:
    """Every warning a valid ``settings`` deserves, in the order ``check`` prints them (``also``:
    ``ASGI_ROUTER_...`` variables a command reads besides the settings)."""
    return (
        unset_keys(settings)
        + kind_mismatches(settings)
        + downgrade_mismatches(settings)
        + caps_without_ledger(settings)
        + stray_environment(also=also)
    )


def caps_without_ledger(settings: RouterSettings) -> list[str]:
    """Caps whose tallies no ledger keeps: they reset when the router restarts."""
    capped = bool(settings.callers) or settings.sessions is not None
    if capped and effective_ledger_url(settings.ledger_url, settings.admin_keys) is None:
        return [CAPS_WITHOUT_LEDGER]
    return []
