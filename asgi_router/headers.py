"""Header hygiene in both directions, in two named helpers (as fastapi-proxy-lib does).

Upstream, the router sends an *allowlist*: a client's ``Authorization``, ``Cookie``,
``x-api-key`` or proxy headers must never reach a provider (the provider gets its own key),
and hop-by-hop headers belong to one connection only. Back to the client, hop-by-hop headers,
``Set-Cookie`` (an upstream has no business setting cookies on the host app's domain) and the
headers the ASGI server or the router itself sets are dropped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "FORWARDED_REQUEST_HEADERS",
    "HOP_BY_HOP",
    "request_headers_for_upstream",
    "response_headers_for_client",
]

#: RFC 9110 §7.6.1 connection-specific headers, plus the legacy ones proxies still see.
HOP_BY_HOP: Final = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
    }
)

#: Inbound headers copied to the upstream request (everything else is dropped).
FORWARDED_REQUEST_HEADERS: Final = frozenset({b"accept", b"user-agent"})

# Upstream response headers never relayed: hop-by-hop, cookies, framing the ASGI server
# recomputes, identity headers the server adds itself (duplicates confuse clients), and the
# router's own headers (which it sets after this filter).
_DROPPED_RESPONSE_HEADERS: Final = HOP_BY_HOP | {
    b"set-cookie",
    b"content-length",
    b"date",
    b"server",
    b"x-request-id",
    b"x-router-model",
    b"x-router-attempts",
}


def _connection_tokens(headers: Iterable[tuple[bytes, bytes]]) -> frozenset[bytes]:
    """Header names that a ``Connection`` header declares hop-by-hop for this message."""
    tokens: set[bytes] = set()
    for name, value in headers:
        if name.lower() == b"connection":
            tokens.update(token.strip().lower() for token in value.split(b","))
    return frozenset(tokens)


def request_headers_for_upstream(
    inbound: Iterable[tuple[bytes, bytes]],
    base: Mapping[str, str],
    request_id: str,
) -> dict[str, str]:
    """Headers for the upstream request: the provider's ``base`` plus the allowlisted inbound.

    ``base`` (built once per provider) carries the provider's own ``Authorization``,
    ``content-type``, ``accept-encoding: identity`` and configured extras; inbound headers never
    override it.
    """
    headers = dict(base)
    for name, value in inbound:
        if name in FORWARDED_REQUEST_HEADERS:
            key = name.decode("latin-1")
            if key not in headers:
                headers[key] = value.decode("latin-1")
    headers["x-request-id"] = request_id
    return headers


def response_headers_for_client(
    upstream: Iterable[tuple[bytes, bytes]],
) -> list[tuple[bytes, bytes]]:
    """Upstream response headers minus everything that must not be relayed (names lowercased)."""
    pairs = [(name.lower(), value) for name, value in upstream]
    dropped = _DROPPED_RESPONSE_HEADERS | _connection_tokens(pairs)
    return [(name, value) for name, value in pairs if name not in dropped]
