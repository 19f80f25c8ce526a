"""What an upstream's response headers may say to the client.

Hop-by-hop headers, ``Set-Cookie`` (an upstream has no business setting cookies on the host
app's domain), ``Alt-Svc`` (it would advertise the upstream's endpoints as the host app's) and
the headers the ASGI server or the router itself sets are dropped. The provider's own request id
(``x-request-id``, or Anthropic's ``request-id``) is what its support asks for, but
``x-request-id`` is the router's: it goes back as ``x-upstream-request-id`` when it is a sane
token (the test the client's own id must pass too). The router's own headers are added after
this filter (``request/router_headers.py``): an upstream's under the same prefix are dropped.

A value holding a control byte (below 0x20 but TAB, or DEL) is dropped too, and counted (the
attempt's event says how many): an ASGI server refuses to send it, and the client would get no
response at all. Clean headers, the usual case, cost one pass over their values in C.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import itemgetter
from typing import Final

from asgi_router.core.header_names import HOP_BY_HOP, NO_TOKENS, connection_tokens, is_sane_request_id

__all__ = ["relayed_headers", "response_headers_for_client"]

#: The bytes no header value may hold on the wire (RFC 9110 field-value: TAB is allowed).
_CONTROL: Final = bytes(range(0x09)) + bytes(range(0x0A, 0x20)) + b"\x7f"
_VALUE: Final = itemgetter(1)


def _holds_control(value: bytes) -> bool:
    """Whether ``value`` holds a control byte: deleting them shortens it (one pass in C, with
    no per-byte matching as a regular expression's character class does)."""
    return len(value.translate(None, _CONTROL)) != len(value)


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


def response_headers_for_client(upstream: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """Upstream response headers minus everything that must not be relayed (names lowercased),
    plus the provider's request id as ``x-upstream-request-id`` when it sent a sane one."""
    return relayed_headers(upstream)[0]


def relayed_headers(upstream: Iterable[tuple[bytes, bytes]]) -> tuple[list[tuple[bytes, bytes]], int]:
    """:func:`response_headers_for_client`, and how many were dropped for a control byte."""
    relayed = _filtered(upstream)
    if not _holds_control(b"".join(map(_VALUE, relayed))):
        return relayed, 0  # the usual answer: one scan, nothing dropped
    clean = [(name, value) for name, value in relayed if not _holds_control(value)]
    return clean, len(relayed) - len(clean)


def _filtered(upstream: Iterable[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
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
