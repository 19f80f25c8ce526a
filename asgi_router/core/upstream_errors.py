"""The router's own words for an upstream call that failed: what transports raise.

Each transport translates its HTTP library's exceptions into these at one boundary (its
``send`` and its response's chunks), as httpx translates httpcore's, so that classification
(:mod:`asgi_router.core.classify`) and everything above it never import an HTTP library::

    UpstreamError                 an upstream call failed before or while its answer arrived
    ├── UpstreamConnectError      no usable connection: refused, DNS, TLS, reset before a response
    ├── UpstreamTimeout           the transport's own limits: connecting, or waiting for the pool
    └── UpstreamBroken            the answer broke off: connection dropped mid-body, bad framing,
                                  an unparsable status line or headers

The original exception is kept as ``__cause__`` (``raise ... from exc``) for the log; the
message is the library's, which never holds a key (keys travel in headers, not in URLs).
An exception a transport does not translate is not one of these, and classification treats it
as the router's own failure.
"""

from __future__ import annotations

__all__ = ["UpstreamBroken", "UpstreamConnectError", "UpstreamError", "UpstreamTimeout"]


class UpstreamError(Exception):
    """An upstream call failed before or while its answer arrived."""


class UpstreamConnectError(UpstreamError):
    """No usable connection to the upstream: refused, DNS, TLS, or reset before a response."""


class UpstreamTimeout(UpstreamError):
    """The transport's own time limits ran out: connecting, or waiting for a pooled connection."""


class UpstreamBroken(UpstreamError):
    """The upstream's answer broke off or could not be parsed (a cut body, bad framing)."""
