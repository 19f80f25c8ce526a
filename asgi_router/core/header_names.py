"""Header names the router treats specially, in both directions: one table each, checked everywhere.

Hop-by-hop headers belong to one connection only (RFC 9110 §7.6.1), and that includes every
header a ``Connection`` header names. Credentials, cookies and what the router itself decides
(encoding, framing, routing) never reach a provider, whatever a configuration says: the
denylist (:func:`never_forwarded`) is checked at config load *and* per request, so a provider's
``forward_headers`` cannot smuggle a credential through. Request ids echoed into headers and log
lines must be sane tokens (:func:`is_sane_request_id`). The official SDKs say they retry on their
own with ``x-stainless-retry-count`` (:func:`client_retries`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

__all__ = [
    "CLIENT_RETRY_COUNT",
    "FORWARDED_REQUEST_HEADERS",
    "HOP_BY_HOP",
    "NEVER_FORWARDED",
    "NO_TOKENS",
    "client_retries",
    "connection_tokens",
    "is_sane_request_id",
    "never_forwarded",
    "never_sent",
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


NO_TOKENS: Final[frozenset[bytes]] = frozenset()


def connection_tokens(value: bytes) -> frozenset[bytes]:
    """Header names that a ``Connection`` header's ``value`` declares hop-by-hop for this message."""
    return frozenset(token.strip().lower() for token in value.split(b","))


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
