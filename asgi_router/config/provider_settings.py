"""Upstream providers: where requests go, with which key, within which time limits, over which pool.

A provider is a base URL, the protocol it speaks (``kind``: OpenAI's, which most servers speak,
or Anthropic's Messages API, which the router translates to and from) and, usually, an API key
sent in the header its API expects (``auth_header``), with fixed query parameters where an API
wants them on every request (``query``: Azure's ``api-version``). Everything about it that can be
refused without I/O is refused here, at load: a URL that could never be sent, an empty key, a
static header that would change the request's framing or take the key's place, a client header
that must never be forwarded, a setting of one kind on a provider of the other. The connection
pool is shared by every provider of a router.
"""

from __future__ import annotations

import os
from typing import Any, Final, Literal, Self

import httpx2
from pydantic import Field, PositiveFloat, PositiveInt, SecretStr, field_validator, model_validator

from asgi_router.config.prompt_cache_settings import PromptCacheMode, check_prompt_cache
from asgi_router.config.resilience_settings import HealthSettings
from asgi_router.config.strict_settings import StrictSettings
from asgi_router.core.header_names import never_forwarded, never_sent

__all__ = [
    "ANTHROPIC_VERSION",
    "DEFAULT_MAX_TOKENS",
    "PoolSettings",
    "ProviderKind",
    "ProviderSettings",
    "ResponsesMode",
    "ResumeMode",
    "Timeouts",
    "check_resume",
]

#: The protocols a provider can speak.
ProviderKind = Literal["openai", "anthropic"]
#: How an upstream can be asked to continue an assistant message after a stream broke: not at
#: all (the default), a trailing assistant message (``prefill``, the one Anthropic's Messages API
#: takes), the same flagged ``"prefix": true`` (Mistral, DeepSeek), or with vLLM's
#: ``continue_final_message``.
ResumeMode = Literal["none", "prefill", "prefix", "continue_final_message"]
#: How a provider serves the Responses API route: as it is (``native``: OpenAI's own API) or
#: translated to chat completions (``translate``: any chat-completions server; an Anthropic
#: provider further to its Messages API), stateless.
ResponsesMode = Literal["native", "translate"]
#: The ``anthropic-version`` header an Anthropic provider sends unless its settings say otherwise
#: (the Messages API's current version; an Anthropic client's own header wins on its route).
ANTHROPIC_VERSION: Final = "2023-06-01"
#: ``max_tokens`` of a translated request that did not set one: the Messages API requires it.
DEFAULT_MAX_TOKENS: Final = 4096
# The header each kind's API reads its key from, when ``auth_header`` is not set.
_AUTH_HEADERS: Final[dict[str, str]] = {"openai": "authorization", "anthropic": "x-api-key"}
# Settings that only an Anthropic provider reads.
_ANTHROPIC_ONLY: Final = ("anthropic_version", "default_max_tokens")


def _check_token(name: str, what: str) -> str:
    """``name`` lower-cased, or a ValueError when it is not an HTTP token."""
    if not name or any(not (33 <= ord(ch) < 127) or ch in ':"(),/;<=>?@[\\]{}' for ch in name):
        raise ValueError(f"{what} {name!r} is not a valid HTTP token")
    return name.lower()


def check_resume(resume: ResumeMode | None, kind: ProviderKind, what: str) -> None:
    """Refuse a ``resume`` value the provider's protocol cannot carry: Anthropic's Messages API
    continues an assistant message by prefill only (it has no ``prefix`` flag nor vLLM's)."""
    if kind == "anthropic" and resume in ("prefix", "continue_final_message"):
        raise ValueError(f'{what} = "{resume}" is not for kind = "anthropic" (use "prefill")')


def _check_value(value: str, what: str) -> str:
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
        raise ValueError(f"{what} has a control character in its value")
    return value


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
    """An upstream: a base URL, the protocol it speaks and, usually, an API key.

    ``api_key`` wins over ``api_key_env``. A provider with neither sends no key (fine for a
    local server). A provider whose ``api_key_env`` names an unset variable is *skipped* (reason
    ``provider_not_configured``), not failed, so a group can list providers that only some
    deployments have keys for; the router names the variable in one warning at start-up and in
    the candidate's line of an error; ``required = true`` refuses the settings instead. The
    upstream URL of an ``openai`` provider is ``base_url`` plus the route without its leading
    ``/v1``: ``https://api.openai.com/v1`` and ``/v1/chat/completions`` make
    ``https://api.openai.com/v1/chat/completions``. An
    ``anthropic`` provider is always sent ``base_url + "/messages"``: chat completions translated
    to the Messages API, and Anthropic clients' own requests as they are.

    ``responses`` says how the Responses API route reaches it. ``"native"`` is an OpenAI-protocol
    provider's default because OpenAI's own API serves that route with what no translation can
    give (stored responses that ``previous_response_id`` continues, built-in tools); a
    chat-completions server without it says ``"translate"`` and is then served statelessly. An
    Anthropic provider has no Responses API: always translated, and ``"native"`` is refused.
    """

    base_url: str = Field(
        description="The API's base URL, e.g. `https://api.openai.com/v1` or `https://api.anthropic.com/v1`: "
        "`http` or `https`, with a host, no query (see `query`) or fragment; a trailing `/` is dropped."
    )
    kind: ProviderKind = Field(
        default="openai",
        description='The protocol it speaks: `"openai"` (chat completions: OpenAI and every compatible API) or '
        '`"anthropic"` (Anthropic\'s Messages API: chat-completion requests are translated to it and its '
        "answers back; see [Protocols](protocols.md)).",
    )
    api_key: SecretStr | None = Field(
        default=None, description="The key itself (a secret: never printed, never logged); must not be empty."
    )
    api_key_env: str | None = Field(
        default=None, description="Or the name of the environment variable that holds the key, read at start-up."
    )
    required: bool = Field(
        default=False,
        description="Refuse to start without this provider's key (`api_key`, or `api_key_env` set and not "
        "empty) instead of skipping its models; for the provider a deployment cannot serve without.",
    )
    auth_header: str = Field(
        default="authorization",
        description="The header the key is sent in: `authorization` (the default) sends `Bearer <key>`, any other "
        "name the bare key (Azure's `api-key`). An `anthropic` provider defaults to `x-api-key`. Not a "
        "hop-by-hop, framing or `proxy-*` name, and not one of `headers`.",
    )
    query: dict[str, str] = Field(
        default_factory=dict,
        description="Query parameters added to every request's URL, e.g. Azure's "
        '`{"api-version" = "2024-10-21"}` (names not empty, no control characters; encoded by the router).',
    )
    anthropic_version: str = Field(
        default=ANTHROPIC_VERSION,
        description='`kind = "anthropic"` only: the `anthropic-version` header sent upstream (an Anthropic '
        "client's own header wins on a Messages route).",
    )
    default_max_tokens: PositiveInt = Field(
        default=DEFAULT_MAX_TOKENS,
        description='`kind = "anthropic"` only: `max_tokens` of a translated chat request that set neither '
        "`max_tokens` nor `max_completion_tokens` (the Messages API requires one).",
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
    honour_rate_limit_headers: bool = Field(
        default=True,
        description="Read the provider's rate-limit headers (OpenAI's `x-ratelimit-remaining-*`/`-reset-*`, "
        "Anthropic's `anthropic-ratelimit-*`) and a 429's `Retry-After`: a member whose requests ran out, or "
        "whose tokens cannot cover the request, is skipped as `over_budget` until the stated reset.",
    )
    latency_target: PositiveFloat | None = Field(
        default=None,
        description="Seconds to the first byte of a streamed answer this provider's models should meet; "
        "overrides `breaker.latency_target` (unset: that one).",
    )
    health: HealthSettings | None = Field(
        default=None, description='Opt-in active health probes, e.g. `{interval = 5, path = "/models"}` (unset: off).'
    )
    resume: ResumeMode = Field(
        default="none",
        description='How a stream that broke after its first byte may be continued by this provider: `"none"` '
        '(the default: the client gets an in-band error), `"prefill"` (a trailing assistant message: Anthropic, '
        'many OpenAI-compatible servers), `"prefix"` (the same with `"prefix": true`: Mistral, DeepSeek) or '
        '`"continue_final_message"` (vLLM). `kind = "anthropic"` takes `"none"` or `"prefill"` only. See '
        "[Resilience](resilience.md#after-the-first-byte).",
    )
    # ``native`` by default for an OpenAI-protocol provider: OpenAI's own API serves the Responses
    # API with what translation cannot give (stored responses, ``previous_response_id``, built-in
    # tools); a compatible server that has only chat completions says ``translate``. An Anthropic
    # provider has no Responses API: always translated (filled in before validation).
    responses: ResponsesMode = Field(
        default="native",
        description='How this provider serves the Responses API route (`/v1/responses`): `"native"` (the default '
        'for `kind = "openai"`: the request as it is, to its own Responses API) or `"translate"` (to chat '
        "completions and the answer back as a Responses object or event stream; stateless: nothing is stored, "
        "a request with `previous_response_id` skips it). An Anthropic provider is always translated (through "
        'its Messages API); `"native"` is refused there. See '
        "[Protocols](protocols.md#the-responses-api-on-any-member).",
    )
    forward_headers: list[str] = Field(
        default_factory=list,
        description="Client headers copied to this provider on top of the fixed allowlist (`accept`, "
        '`user-agent`), e.g. `["traceparent"]`. Credentials, cookies, `proxy-*` and hop-by-hop names are '
        "refused.",
    )

    # Provider prompt caches (``config/prompt_cache_settings.py``; see the Caching page).
    prompt_cache: PromptCacheMode = Field(
        default="auto",
        description='`"auto"`: keep the provider\'s prompt cache warm (Anthropic-style `cache_control` marks '
        "stripped for an OpenAI-protocol provider, kept and long prefixes marked for an Anthropic one; "
        '`prompt_cache_key` where on); `"off"`: the request as the client sent it. See '
        "[Caching](caching.md#provider-prompt-caches).",
    )
    prompt_cache_key: bool | None = Field(
        default=None,
        description="Send `prompt_cache_key` (the session's digest) on chat requests that carry the "
        "`session_header` and set none (unset: only when `base_url`'s host is api.openai.com; strict "
        "OpenAI-compatible servers refuse unknown fields).",
    )

    @model_validator(mode="before")
    @classmethod
    def _kind_defaults(cls, data: Any) -> Any:
        # The key's header follows the kind unless one is named: ``x-api-key`` for Anthropic.
        # An Anthropic provider's Responses route is always translated.
        if isinstance(data, dict):
            kind = data.get("kind", "openai")
            if kind == "anthropic" and "responses" not in data:
                data = {**data, "responses": "translate"}
            if "auth_header" not in data and isinstance(kind, str) and kind in _AUTH_HEADERS and kind != "openai":
                return {**data, "auth_header": _AUTH_HEADERS[kind]}
        return data

    @model_validator(mode="after")
    def _check_kind(self) -> Self:
        if self.kind != "anthropic":
            for name in _ANTHROPIC_ONLY:
                if name in self.model_fields_set:
                    raise ValueError(f'{name} applies to kind = "anthropic" only')
        elif "anthropic-version" in self.headers:
            raise ValueError("headers: set anthropic-version with anthropic_version")
        check_resume(self.resume, self.kind, "resume")
        if self.kind == "anthropic" and self.responses == "native":
            raise ValueError(
                'responses = "native" is not for kind = "anthropic" (it has no Responses API: "translate")'
            )
        check_prompt_cache(self.kind, self.prompt_cache, self.prompt_cache_key)
        if self.auth_header in self.headers and (self.api_key is not None or self.api_key_env):
            raise ValueError(f"headers: {self.auth_header!r} is the key's header (auth_header); it carries the key")
        if self.required and self.api_key is None:
            if not self.api_key_env:
                raise ValueError("required = true needs api_key or api_key_env")
            if not self.is_configured:
                raise ValueError(f"required = true, but its api_key_env {self.api_key_env} is not set")
        return self

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

    @field_validator("auth_header")
    @classmethod
    def _check_auth_header(cls, value: str) -> str:
        name = _check_token(value, "auth_header")
        if never_sent(name.encode()) or name in ("content-type", "accept-encoding", "x-request-id"):
            raise ValueError(f"auth_header {name!r} is a header the router or the transport sets")
        return name

    @field_validator("query")
    @classmethod
    def _check_query(cls, value: dict[str, str]) -> dict[str, str]:
        for name, parameter in value.items():
            if not name.strip():
                raise ValueError("query: a parameter name is empty")
            _check_value(name, f"query parameter {name!r}")
            _check_value(parameter, f"query parameter {name!r}")
        return value

    @field_validator("anthropic_version")
    @classmethod
    def _check_anthropic_version(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("anthropic_version is empty")
        return _check_value(value, "anthropic_version")

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
