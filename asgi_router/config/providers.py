"""Upstream providers: where requests go, with which key, within which time limits, over which pool.

A provider is an OpenAI-compatible base URL and, usually, an API key. Everything about it that
can be refused without I/O is refused here, at load: a URL that could never be sent, an empty
key, a static header that would change the request's framing, a client header that must never
be forwarded. The connection pool is shared by every provider of a router.
"""

from __future__ import annotations

import os

import httpx2
from pydantic import Field, PositiveFloat, PositiveInt, SecretStr, field_validator

from asgi_router.config.base import StrictSettings
from asgi_router.config.resilience import HealthSettings
from asgi_router.core.header_names import never_forwarded, never_sent

__all__ = ["PoolSettings", "ProviderSettings", "Timeouts"]


class Timeouts(StrictSettings):
    """Per-provider time limits, in seconds.

    ``first_byte`` runs from sending the request to the first body byte: a 200 that then stays
    silent is a timeout and fails over. For a non-streaming request the first byte only comes
    once the whole completion is generated, so it bounds generation time there. ``idle`` is the
    largest gap allowed between chunks after commit; ``total`` bounds one attempt end to end
    (connect, wait and relay).
    """

    connect: PositiveFloat = Field(default=5.0, description="Opening a connection, and waiting for a pooled one.")
    first_byte: PositiveFloat = Field(
        default=60.0,
        description="From sending the request to the first response-body byte; for a non-streaming request "
        "that is when the whole answer has been generated.",
    )
    idle: PositiveFloat = Field(default=60.0, description="The longest gap allowed between two body chunks.")
    total: PositiveFloat = Field(default=600.0, description="One attempt end to end, relay included.")


class ProviderSettings(StrictSettings):
    """An OpenAI-compatible upstream: a base URL and, usually, an API key.

    ``api_key`` wins over ``api_key_env``. A provider with neither sends no ``Authorization``
    (fine for a local server). A provider whose ``api_key_env`` names an unset variable is
    *skipped* (reason ``provider_not_configured``), not failed, so a group can list providers
    that only some deployments have keys for; the router names the variable in one warning at
    start-up and in the candidate's line of an error. The upstream URL is ``base_url`` plus the
    route without its leading ``/v1``: ``https://api.openai.com/v1`` and
    ``/v1/chat/completions`` make ``https://api.openai.com/v1/chat/completions``.
    """

    base_url: str = Field(
        description="OpenAI-compatible base URL, e.g. `https://api.openai.com/v1`: `http` or `https`, with a "
        "host, no query or fragment; a trailing `/` is dropped."
    )
    api_key: SecretStr | None = Field(
        default=None, description="The key itself (a secret: never printed, never logged); must not be empty."
    )
    api_key_env: str | None = Field(
        default=None, description="Or the name of the environment variable that holds the key, read at start-up."
    )
    timeouts: Timeouts = Field(default=Timeouts(), description="Time limits for this provider's attempts.")
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Extra headers sent with every request to this provider (e.g. OpenRouter's `X-Title`); names "
        "are lower-cased; no hop-by-hop, framing or `proxy-*` names. Values of credential-like names "
        "(containing `key`, `token`, `secret`, `auth`, `password`, `credential` or `signature`, e.g. "
        "Azure's `api-key`) are redacted from logs like API keys.",
    )
    max_concurrent: PositiveInt | None = Field(
        default=None,
        description="Attempts in flight to this provider at once (unset: no cap); over it, candidates are "
        "skipped with reason `saturated`.",
    )
    health: HealthSettings | None = Field(
        default=None, description='Opt-in active health probes, e.g. `{interval = 5, path = "/models"}` (unset: off).'
    )
    forward_headers: list[str] = Field(
        default_factory=list,
        description="Client headers copied to this provider on top of the fixed allowlist (`accept`, "
        '`user-agent`), e.g. `["traceparent"]`. Credentials, cookies, `proxy-*` and hop-by-hop names are '
        "refused.",
    )

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        value = value.strip()
        if not value.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        if any(ch in value for ch in "\r\n\t ?#") or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise ValueError("base_url must not contain whitespace, control characters, a query or a fragment")
        # Parse it the way the transport will, so that a URL that can never be sent (no host,
        # a bad port, broken brackets) fails the config load rather than every request.
        try:
            url = httpx2.URL(value)
            url.port  # noqa: B018 - validates the port
        except Exception as exc:
            raise ValueError(f"base_url is not a usable URL ({type(exc).__name__})") from None
        if not url.host:
            raise ValueError("base_url has no host")
        return value.rstrip("/")

    @field_validator("api_key")
    @classmethod
    def _check_api_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("api_key is empty; leave it out for a provider that needs no key")
        return value

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, header_value in value.items():
            if not name or any(not (33 <= ord(ch) < 127) or ch == ":" for ch in name):
                raise ValueError(f"header name {name!r} is not a valid HTTP token")
            if any(ord(ch) < 32 or ord(ch) == 127 for ch in header_value):
                raise ValueError(f"header {name!r} has a control character in its value")
            if never_sent(name.lower().encode()):
                # A configured Transfer-Encoding or Connection would change the request's framing.
                raise ValueError(f"header {name!r} is hop-by-hop or framing; the transport sets it")
        return {name.lower(): header_value for name, header_value in value.items()}

    @field_validator("forward_headers")
    @classmethod
    def _check_forward_headers(cls, value: list[str]) -> list[str]:
        names: list[str] = []
        for name in value:
            if not name or any(not (33 <= ord(ch) < 127) or ch == ":" for ch in name):
                raise ValueError(f"forward_headers: {name!r} is not a valid HTTP token")
            lowered = name.lower()
            if never_forwarded(lowered.encode()):
                raise ValueError(
                    f"forward_headers: {lowered!r} is never forwarded "
                    "(credentials, cookies, proxy-* and hop-by-hop headers stay with the router)"
                )
            names.append(lowered)
        return names

    def key(self) -> SecretStr | None:
        """The configured key: ``api_key`` if set, else the named environment variable."""
        if self.api_key is not None:
            return self.api_key
        if self.api_key_env:
            found = os.environ.get(self.api_key_env)
            return SecretStr(found) if found else None
        return None

    @property
    def is_configured(self) -> bool:
        """False when an ``api_key_env`` is named but unset: such a provider is skipped."""
        return self.api_key is not None or not self.api_key_env or bool(os.environ.get(self.api_key_env))


class PoolSettings(StrictSettings):
    """The upstream connection pool, one per router and running event loop, shared by every provider.

    ``max_keepalive_connections`` is a separate cap on *idle* connections. httpx's pool has one;
    aiohttp's public API does not (its connector keeps every released connection until
    ``keepalive_expiry``), so settings that set it with the ``aiohttp`` transport are refused at
    load rather than silently ignored. Unset, idle connections are bounded by
    ``max_connections`` and closed after ``keepalive_expiry`` on either transport.
    """

    max_connections: PositiveInt = Field(
        default=512,
        description="Upstream connections open at once, in total (both transports; a request waits up to the "
        "provider's `connect` timeout for one).",
    )
    max_keepalive_connections: PositiveInt | None = Field(
        default=None,
        description='Idle connections kept for reuse; `transport = "httpx"` only (aiohttp cannot honour it: '
        "settings that set it with aiohttp are refused). Unset: no cap of its own, idle connections are "
        "bounded by `max_connections` and closed after `keepalive_expiry`.",
    )
    keepalive_expiry: PositiveFloat = Field(
        default=30.0, description="Seconds an idle connection is kept before it is closed (both transports)."
    )
