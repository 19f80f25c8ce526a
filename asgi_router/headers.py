"""Header hygiene in both directions, in two named helpers (as fastapi-proxy-lib does).

Upstream, the router sends an *allowlist*: ``content-type``, ``accept``, ``user-agent``,
``x-request-id``, plus what a provider's ``forward_headers`` names. A client's
``Authorization``, ``Cookie``, ``x-api-key`` or proxy headers must never reach a provider (the
provider gets its own key), and hop-by-hop headers belong to one connection only: that
includes every header the inbound ``Connection`` names, even an allowlisted one. The denylist
(:func:`never_forwarded`) is checked at config load *and* per request, so a forward list cannot
smuggle a credential through. Back to the client, hop-by-hop headers, ``Set-Cookie`` (an
upstream has no business setting cookies on the host app's domain), ``Alt-Svc`` (it would
advertise the upstream's endpoints as the host app's) and the headers the ASGI server or the
router itself sets are dropped. The provider's own request id (``x-request-id``, or Anthropic's
``request-id``) is what its support asks for, but ``x-request-id`` is the router's: it goes back
as ``x-upstream-request-id`` when it is a sane token (:func:`is_sane_request_id`, the test the
client's own id must pass too).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

__all__ = [
    "CLIENT_RETRY_COUNT",
    "FORWARDED_REQUEST_HEADERS",
    "HOP_BY_HOP",
    "NEVER_FORWARDED",
    "client_retries",
    "is_sane_request_id",
    "never_forwarded",
    "never_sent",
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

#: Inbound headers copied to the upstream request (everything else is dropped unless a
#: provider's ``forward_headers`` names it). ``content-type`` and ``x-request-id`` are listed
#: for completeness: the provider's own ``content-type`` and the router's sanitised request id
#: always win over the client's.
FORWARDED_REQUEST_HEADERS: Final = frozenset({b"content-type", b"accept", b"user-agent", b"x-request-id"})

# Headers that only the transport may set: framing, routing, and the connection's own.
_TRANSPORT_OWNED: Final = HOP_BY_HOP | {b"host", b"content-length"}

#: Inbound headers that never reach an upstream, whatever a config says: credentials (the
#: client's, or ones that would swap the provider's account), cookies, and what the router
#: itself decides (encoding, framing, routing).
NEVER_FORWARDED: Final = _TRANSPORT_OWNED | {
    b"authorization",
    b"cookie",
    b"x-api-key",
    b"api-key",
    b"x-goog-api-key",
    b"openai-organization",
    b"openai-project",
    b"accept-encoding",
    b"content-encoding",
}


def never_sent(name: bytes) -> bool:
    """Whether a (lowercase) header name is the transport's alone: no config may set it."""
    return name in _TRANSPORT_OWNED or name.startswith(b"proxy-")


def never_forwarded(name: bytes) -> bool:
    """Whether a (lowercase) inbound header name must never be copied upstream."""
    return name in NEVER_FORWARDED or name.startswith(b"proxy-")


# Upstream response headers never relayed: hop-by-hop, cookies, framing the ASGI server
# recomputes, identity headers the server adds itself (duplicates confuse clients), and the
# router's own headers (which it sets after this filter).
_DROPPED_RESPONSE_HEADERS: Final = HOP_BY_HOP | {
    b"set-cookie",
    b"set-cookie2",
    b"alt-svc",
    b"content-length",
    b"date",
    b"server",
    b"x-request-id",
    b"x-upstream-request-id",
}

# A request id echoed into headers and log lines: no CR/LF or other bytes that could split a
# header or forge a log line, and bounded.
_REQUEST_ID: Final = re.compile(rb"[A-Za-z0-9._:\-]{1,128}")


#: Sent by the official SDKs (OpenAI's, Anthropic's and every other Stainless-generated one) on
#: every try of a request, ``0`` on the first: a client that sends it retries on its own.
CLIENT_RETRY_COUNT: Final = b"x-stainless-retry-count"


def client_retries(inbound: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether the client says it retries failed requests itself (:data:`CLIENT_RETRY_COUNT`)."""
    for name, _ in inbound:
        if name == CLIENT_RETRY_COUNT:
            return True
    return False


def is_sane_request_id(value: bytes) -> bool:
    """Whether a request id (the client's, or a provider's) may be echoed: 1 to 128 characters
    of letters, digits and ``. _ : -``."""
    return _REQUEST_ID.fullmatch(value) is not None


_NO_TOKENS: Final[frozenset[bytes]] = frozenset()


def _connection_tokens(value: bytes) -> frozenset[bytes]:
    """Header names that a ``Connection`` header's ``value`` declares hop-by-hop for this message."""
    return frozenset(token.strip().lower() for token in value.split(b","))


def request_headers_for_upstream(
    inbound: Sequence[tuple[bytes, bytes]],
    base: Mapping[str, str],
    request_id: str,
    allowed: frozenset[bytes] = FORWARDED_REQUEST_HEADERS,
) -> dict[str, str]:
    """Headers for the upstream request: the provider's ``base`` plus the allowlisted inbound.

    ``base`` (built once per provider) carries the provider's own ``Authorization``,
    ``content-type``, ``accept-encoding: identity`` and configured extras; inbound headers never
    override it. ``allowed`` is the provider's allowlist (the fixed one plus its
    ``forward_headers``); the denylist and the inbound ``Connection`` tokens are applied on top.
    """
    headers = dict(base)
    named = _NO_TOKENS
    for name, value in inbound:
        if name in allowed:
            if not never_forwarded(name):
                key = name.decode("latin-1")
                if key not in headers:
                    headers[key] = value.decode("latin-1")
        elif name == b"connection":  # rare enough to undo what it names afterwards
            named = named | _connection_tokens(value)
    for token in named:
        key = token.decode("latin-1")
        if key not in base:
            headers.pop(key, None)
    headers["x-request-id"] = request_id
    return headers


def response_headers_for_client(
    upstream: Iterable[tuple[bytes, bytes]],
) -> list[tuple[bytes, bytes]]:
    """Upstream response headers minus everything that must not be relayed (names lowercased),
    plus the provider's request id as ``x-upstream-request-id`` when it sent a sane one."""
    relayed: list[tuple[bytes, bytes]] = []
    named = _NO_TOKENS
    upstream_id: bytes | None = None
    for name, value in upstream:
        name = name.lower()
        if name in _DROPPED_RESPONSE_HEADERS:
            if name == b"connection":
                named = named | _connection_tokens(value)
            elif name == b"x-request-id" and upstream_id is None:
                upstream_id = value
        elif not name.startswith(b"x-router-"):  # the router's own to set: never an upstream's
            relayed.append((name, value))
    if named:
        relayed = [(name, value) for name, value in relayed if name not in named]
    if upstream_id is None:  # Anthropic says ``request-id`` (relayed as it is, too)
        for name, value in relayed:
            if name == b"request-id":
                upstream_id = value
                break
    if upstream_id is not None and is_sane_request_id(upstream_id):
        relayed.append((b"x-upstream-request-id", upstream_id))
    return relayed
