"""What a valid configuration may still get wrong: said at start-up, and by ``asgi-router check``.

Some settings are accepted because they are right in some deployments: a provider whose
``api_key_env`` is unset is skipped, not refused, so one file can list providers only some
deployments have keys for. Others are accepted because they were once the way to do something:
an OpenAI-kind provider sending Anthropic's ``x-api-key`` and ``anthropic-version`` headers was
how Anthropic was reached before providers had a ``kind``; such a provider now answers every
Messages-route request with ``protocol_mismatch``. Neither is an error, both deserve a warning:
the router logs each at start-up, ``check`` prints them and ``check --strict`` fails on them.
"""

from __future__ import annotations

from typing import Final

from asgi_router.config.settings import RouterSettings

__all__ = ["advisories", "kind_mismatches", "unset_keys"]

#: Headers only Anthropic's API reads: an OpenAI-kind provider sending them was meant to be Anthropic.
_ANTHROPIC_HEADERS: Final = ("x-api-key", "anthropic-version")


def unset_keys(settings: RouterSettings) -> list[str]:
    """One line per provider whose ``api_key_env`` names an unset variable (it is skipped)."""
    return [
        f"provider {name!r} is skipped (provider_not_configured): its api_key_env {provider.api_key_env} is not set"
        for name, provider in sorted(settings.providers.items())
        if not provider.is_configured
    ]


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


def advisories(settings: RouterSettings) -> list[str]:
    """Every warning a valid ``settings`` deserves, in the order ``check`` prints them."""
    return unset_keys(settings) + kind_mismatches(settings)
