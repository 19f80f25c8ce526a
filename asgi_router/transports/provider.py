"""Everything about a provider that does not change per request, computed once at start-up.

Per inbound route, a :class:`RouteTarget`: the upstream URL (fixed query parameters included),
the header block with the key already in it, which inbound headers it receives, and whether the
request is translated; or, where the provider's protocol cannot serve the route, why not (the
attempt loop skips it there with reason ``protocol_mismatch``). An OpenAI-protocol provider
serves every OpenAI route (the route's path below its ``base_url``), never Anthropic's
Messages; an Anthropic provider serves chat completions and the Responses API translated and
Messages as they are, all at ``base_url + "/messages"``. A provider whose Responses route is
translated (``responses = "translate"``; always for Anthropic) is sent chat completions for it
(an OpenAI-protocol one at ``base_url + "/chat/completions"``). The request path only looks these
up. A chat route's target also says what the provider's prompt cache asks of the body (:class:`PromptCaching`, from its
``prompt_cache`` settings), so that a request pays for it only where it applies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal
from urllib.parse import urlencode

import httpx2

from asgi_router.config.prompt_cache_settings import sends_prompt_cache_key
from asgi_router.config.provider_settings import DEFAULT_MAX_TOKENS, ProviderSettings, Timeouts
from asgi_router.core.header_names import FORWARDED_REQUEST_HEADERS
from asgi_router.core.route_paths import route_kind
from asgi_router.transports.request_headers import UpstreamHead

__all__ = ["PromptCaching", "ProviderRuntime", "RouteTarget", "upstream_path"]

#: Headers an Anthropic client sends that an Anthropic provider must see (its API version and
#: the beta features it opted into): passed on, on the Messages route.
ANTHROPIC_CLIENT_HEADERS: Final = frozenset({b"anthropic-version", b"anthropic-beta"})


def upstream_path(route: str) -> str:
    """The path below a provider's ``base_url`` for an inbound route.

    Provider base URLs end in the API version (``https://api.openai.com/v1``), inbound routes
    start with it (``/v1/chat/completions``): the version is said once.
    """
    return route[3:] if route == "/v1" or route.startswith("/v1/") else route


@dataclass(frozen=True, slots=True)
class PromptCaching:
    """What a provider's prompt cache asks of a chat request's body (``prompt_cache = "auto"``)."""

    #: An OpenAI-protocol provider: Anthropic's ``cache_control`` marks are taken out.
    strip_marks: bool = False
    #: An Anthropic provider: a translated request's long tools and system prompt are marked.
    breakpoints: bool = False
    #: The session header whose digest is sent as ``prompt_cache_key`` (``None``: none is sent).
    cache_key_header: bytes | None = None


@dataclass(frozen=True, slots=True)
class RouteTarget:
    """Where and how one route's requests go to one provider."""

    url: str
    #: Headers every request carries (the key is in here: never log this).
    headers: dict[str, str] = field(repr=False)
    #: Inbound header names this provider receives: the fixed allowlist plus ``forward_headers``.
    forward: frozenset[bytes] = FORWARDED_REQUEST_HEADERS
    #: Headers sent unless the client sent its own (an Anthropic client's ``anthropic-version``).
    defaults: tuple[tuple[str, str], ...] = ()
    #: The request is translated (a chat completion to the Messages API, or a Responses request to
    #: chat completions: ``responses_via``), and its answer back.
    translated: bool = False
    #: A translated Responses request: sent as chat completions (``"chat"``), or further
    #: translated to the Messages API (``"messages"``); ``None``: not a Responses translation.
    responses_via: Literal["chat", "messages"] | None = None
    #: What the provider's prompt cache asks of a chat request's body (``None``: nothing).
    caching: PromptCaching | None = None
    #: ``headers``, ``forward`` and ``defaults`` as one rule, decided here once: per request
    #: only the client's headers are walked (``request_headers.py``).
    head: UpstreamHead = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "head", UpstreamHead(self.headers, self.forward, self.defaults))  # frozen: set once


@dataclass(frozen=True, slots=True)
class ProviderRuntime:
    """A provider's per-request constants, computed once from its settings."""

    name: str
    configured: bool
    timeouts: Timeouts
    #: Per inbound route: its target, or why this provider cannot serve it.
    targets: dict[str, RouteTarget | str]
    #: The key, the provider's static headers and its ``anthropic-version`` if it has one: what
    #: a health probe sends (never log this).
    headers: dict[str, str] = field(repr=False)
    httpx_timeout: httpx2.Timeout = field(repr=False)
    #: ``?`` and the provider's fixed query parameters, or ``""``.
    query: str = ""
    #: ``max_tokens`` of a translated request that set none.
    default_max_tokens: int = DEFAULT_MAX_TOKENS
    #: Why it is not configured: the unset variable its ``api_key_env`` names (a name, not a key).
    missing_key_env: str | None = None

    @classmethod
    def build(
        cls, name: str, settings: ProviderSettings, routes: list[str], session_header: str = "x-session-id"
    ) -> ProviderRuntime:
        """``session_header``: the router's, whose digest may be the provider's ``prompt_cache_key``."""
        headers = dict(settings.headers)
        key = settings.key()
        if key is not None:
            secret = key.get_secret_value()
            headers[settings.auth_header] = f"Bearer {secret}" if settings.auth_header == "authorization" else secret
        query = "?" + urlencode(settings.query) if settings.query else ""
        t = settings.timeouts
        return cls(
            name=name,
            configured=settings.is_configured,
            timeouts=t,
            targets={route: _target(settings, route, headers, query, session_header) for route in routes},
            headers={**headers, "anthropic-version": settings.anthropic_version}
            if settings.kind == "anthropic"
            else headers,
            # connect and pool waits are httpx's; first-byte, idle and total are enforced by
            # the attempt loop and the relay with anyio deadlines (httpx has no such notions).
            httpx_timeout=httpx2.Timeout(connect=t.connect, read=None, write=t.first_byte, pool=t.connect),
            query=query,
            default_max_tokens=settings.default_max_tokens,
            missing_key_env=None if settings.is_configured else settings.api_key_env,
        )


def _caching(settings: ProviderSettings, session_header: str) -> PromptCaching | None:
    """What this provider's prompt cache asks of a chat request's body (``prompt_cache``)."""
    if settings.prompt_cache == "off":
        return None
    if settings.kind == "anthropic":
        return PromptCaching(breakpoints=True)
    keyed = sends_prompt_cache_key(settings.kind, settings.prompt_cache, settings.prompt_cache_key, settings.base_url)
    return PromptCaching(strip_marks=True, cache_key_header=session_header.encode("latin-1") if keyed else None)


def _target(
    settings: ProviderSettings, route: str, static: dict[str, str], query: str, session_header: str
) -> RouteTarget | str:
    """How ``route``'s requests reach this provider, or why they cannot."""
    headers = {"content-type": "application/json", "accept-encoding": "identity", **static}
    forward = FORWARDED_REQUEST_HEADERS | {name.encode("latin-1") for name in settings.forward_headers}
    kind = route_kind(route)
    caching = _caching(settings, session_header) if kind == "chat" else None
    if kind == "responses" and settings.responses == "translate":  # stateless: see protocols/responses_to_chat.py
        if settings.kind == "openai":
            chat = settings.base_url + "/chat/completions" + query
            return RouteTarget(chat, headers, forward, translated=True, responses_via="chat")
        anthropic = {**headers, "anthropic-version": settings.anthropic_version}
        return RouteTarget(
            settings.base_url + "/messages" + query, anthropic, forward, translated=True, responses_via="messages"
        )
    if settings.kind == "openai":
        if kind == "messages":
            return "an OpenAI-protocol provider does not serve Anthropic's Messages API"
        return RouteTarget(settings.base_url + upstream_path(route) + query, headers, forward, caching=caching)
    url = settings.base_url + "/messages" + query
    version = ("anthropic-version", settings.anthropic_version)
    if kind == "chat":
        return RouteTarget(url, {**headers, version[0]: version[1]}, forward, translated=True, caching=caching)
    if kind == "messages":
        return RouteTarget(url, headers, forward | ANTHROPIC_CLIENT_HEADERS, defaults=(version,))
    return "an Anthropic provider serves chat completions, Messages and Responses (translated) only"
