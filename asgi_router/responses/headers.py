"""What an upstream's response headers may say to the client.

Hop-by-hop headers, ``Set-Cookie`` (an upstream has no business setting cookies on the host
app's domain), ``Alt-Svc`` (it would advertise the upstream's endpoints as the host app's) and
the headers the ASGI server or the router itself sets are dropped. The provider's own request id
(``x-request-id``, or Anthropic's ``request-id``) is what its support asks for, but
``x-request-id`` is the router's: it goes back as ``x-upstream-request-id`` when it is a sane
token (the test the client's own id must pass too). The router's own headers are added after
this filter (``request/router_headers.py``): an upstream's under the same prefix are dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from asgi_router.core.header_names import HOP_BY_HOP, NO_TOKENS, connection_tokens, is_sane_request_id

__all__ = ["response_headers_for_client"]


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


def response_headers_for_client(
    upstream: Iterable[tuple[bytes, bytes]],
) -> list[tuple[bytes, bytes]]:
    """Upstream response headers minus everything that must not be relayed (names lowercased),
    plus the provider's request id as ``x-upstream-request-id`` when it sent a sane one."""
    relayed: list[tuple[bytes, bytes]] = []
    named = NO_TOKENS
    upstream_id: bytes | None = None
    for name, value in upstream:
        name = name.lower()
        if name in _DROPPED_RESPONSE_HEADERS:
            if name == b"connection":
                named = named | connection_tokens(value)
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
