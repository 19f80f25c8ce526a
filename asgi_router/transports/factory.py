"""The one place that talks HTTP to upstreams: a seam the transport can be swapped behind.

The rest of the router sees only :class:`UpstreamResponse` (status, raw headers, an async
iterator of raw body chunks, ``aclose``) and :class:`Transport` (``send``, ``aclose``). Two
implementations sit behind it, chosen by ``RouterSettings.transport`` (:func:`make_transport`):
:class:`HttpxTransport` here, over the httpx API through ``httpx2`` (the maintained fork the
official ``openai`` SDK depends on, and what a user injects with ``http_client=``), and
:class:`~asgi_router.transports.aiohttp_transport.AiohttpTransport`, the default because it is the faster
(``docs/performance.rst``). Either way: one client per router and running event loop
(``loop_clients.py``), shared by every request on that loop.

Chunks come from ``aiter_raw()``: bytes exactly as the upstream sent them, never decoded or
re-chunked. ``accept-encoding: identity`` is asked for so that what is relayed is what the
client can read without the router decompressing anything.

:class:`ProviderRuntime` is everything about a provider that does not change per request (its
URLs, its header block with the key already in it, its timeouts), built once at start-up so the
request path only looks things up.
"""

from __future__ import annotations

from typing import Literal

import httpx2

from asgi_router.config.providers import PoolSettings
from asgi_router.transports.aiohttp_transport import AiohttpTransport
from asgi_router.transports.base import Transport
from asgi_router.transports.httpx_transport import HttpxTransport

__all__ = ["make_transport"]


def make_transport(
    kind: Literal["aiohttp", "httpx"], pool: PoolSettings, http_client: httpx2.AsyncClient | None = None
) -> Transport:
    """The transport for ``kind``; an injected ``http_client`` always means the httpx one."""
    if http_client is not None or kind == "httpx":
        return HttpxTransport(pool, http_client)

    return AiohttpTransport(pool)
