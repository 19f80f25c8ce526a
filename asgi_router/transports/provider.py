"""Everything about a provider that does not change per request, computed once at start-up.

Its upstream URL per inbound route, its header block with the key already in it, its timeouts
and which inbound headers it receives: the request path only looks these up.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx2

from asgi_router.config.providers import ProviderSettings, Timeouts
from asgi_router.core.header_names import FORWARDED_REQUEST_HEADERS

__all__ = ["ProviderRuntime", "upstream_path"]


def upstream_path(route: str) -> str:
    """The path below a provider's ``base_url`` for an inbound route.

    Provider base URLs end in the API version (``https://api.openai.com/v1``), inbound routes
    start with it (``/v1/chat/completions``): the version is said once.
    """
    return route[3:] if route == "/v1" or route.startswith("/v1/") else route


@dataclass(frozen=True, slots=True)
class ProviderRuntime:
    """A provider's per-request constants, computed once from its settings."""

    name: str
    configured: bool
    timeouts: Timeouts
    #: Upstream URL per inbound route.
    urls: dict[str, str]
    #: Headers every request to this provider carries (the key is in here: never log this).
    headers: dict[str, str] = field(repr=False)
    httpx_timeout: httpx2.Timeout = field(repr=False)
    #: Inbound header names this provider receives: the fixed allowlist plus ``forward_headers``.
    forward: frozenset[bytes] = FORWARDED_REQUEST_HEADERS
    #: Why it is not configured: the unset variable its ``api_key_env`` names (a name, not a key).
    missing_key_env: str | None = None

    @classmethod
    def build(cls, name: str, settings: ProviderSettings, routes: list[str]) -> ProviderRuntime:
        headers = {
            "content-type": "application/json",
            "accept-encoding": "identity",
            **settings.headers,
        }
        key = settings.key()
        if key is not None:
            headers["authorization"] = f"Bearer {key.get_secret_value()}"
        t = settings.timeouts
        return cls(
            name=name,
            configured=settings.is_configured,
            timeouts=t,
            urls={route: settings.base_url + upstream_path(route) for route in routes},
            headers=headers,
            # connect and pool waits are httpx's; first-byte, idle and total are enforced by
            # the attempt loop and the relay with anyio deadlines (httpx has no such notions).
            httpx_timeout=httpx2.Timeout(connect=t.connect, read=None, write=t.first_byte, pool=t.connect),
            forward=FORWARDED_REQUEST_HEADERS | {name.encode("latin-1") for name in settings.forward_headers},
            missing_key_env=None if settings.is_configured else settings.api_key_env,
        )
