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

from collections.abc import AsyncIterator
from typing import Any

import httpx2

from asgi_router.config.providers import PoolSettings
from asgi_router.transports.loop_clients import LoopClients
from asgi_router.transports.provider import ProviderRuntime

__all__ = ["HttpxResponse", "HttpxTransport"]


async def _already_read(content: bytes) -> AsyncIterator[bytes]:
    yield content


class HttpxResponse:
    """:class:`UpstreamResponse` over an ``httpx2.Response`` opened with ``stream=True``."""

    __slots__ = ("_response", "chunks", "raw_headers", "status")

    #: httpx says nothing cheap about it: a whole response reads on to the end of its chunks.
    drained = False

    def __init__(self, response: httpx2.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.raw_headers = response.headers.raw
        # A response built in memory (``httpx2.MockTransport`` with ``content=``) arrives
        # already read; ``aiter_raw()`` would refuse it, so serve its content as one chunk.
        self.chunks = _already_read(response.content) if response.is_stream_consumed else response.aiter_raw()

    async def aclose(self) -> None:
        await self._response.aclose()


class HttpxTransport:
    """:class:`Transport` over one shared ``httpx2.AsyncClient`` per running event loop.

    httpcore's pool belongs to the loop it first ran on, so each loop gets a client of its own
    (:class:`~asgi_router.transports.loop_clients.LoopClients`), made on lifespan startup or on the loop's
    first request (a host app without lifespan support still works); :meth:`aclose` closes
    the running loop's client on lifespan shutdown, and a loop that ends closes its own. A
    client passed in (tests inject one with ``httpx2.MockTransport``) belongs to the caller: it
    is used as is on every loop and never closed here.
    """

    def __init__(self, pool: PoolSettings, client: httpx2.AsyncClient | None = None) -> None:
        self._pool = pool
        self._injected = client
        self._clients = LoopClients(self._open, httpx2.AsyncClient.aclose, _client_closed)

    def _open(self) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(
            limits=httpx2.Limits(
                max_connections=self._pool.max_connections,
                max_keepalive_connections=self._pool.max_keepalive_connections,
                keepalive_expiry=self._pool.keepalive_expiry,
            ),
            follow_redirects=False,
            trust_env=False,  # never route provider traffic through an env-configured proxy
        )

    @property
    def client(self) -> httpx2.AsyncClient:
        """The injected client, else the running loop's own."""
        return self._injected if self._injected is not None else self._clients.current()

    def start(self) -> None:
        self.client  # noqa: B018 - creating the client is the point

    def _all(self) -> list[httpx2.AsyncClient]:
        if self._injected is not None:
            return [] if self._injected.is_closed else [self._injected]
        return self._clients.clients()

    @property
    def is_open(self) -> bool:
        return bool(self._all())

    @staticmethod
    def _pool_of(client: httpx2.AsyncClient) -> Any:
        """httpcore2's pool, or ``None`` (an injected client over another transport, e.g.
        ``MockTransport``, which holds no sockets). httpcore2 has no public view of it."""
        return getattr(getattr(client, "_transport", None), "_pool", None)

    def _pools(self) -> list[Any]:
        return [pool for pool in map(self._pool_of, self._all()) if pool is not None]

    def is_quiet(self) -> bool:
        return all(
            not pool._requests and all(conn.is_idle() or conn.is_closed() for conn in pool.connections)
            for pool in self._pools()
        )

    def connections(self) -> int:
        return sum(1 for pool in self._pools() for conn in pool.connections if not conn.is_closed())

    async def send(self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes) -> HttpxResponse:
        client = self.client
        request = client.build_request("POST", url, headers=headers, content=body, timeout=provider.httpx_timeout)
        return HttpxResponse(await client.send(request, stream=True))

    async def aclose(self) -> None:
        if self._injected is None:
            await self._clients.aclose()


def _client_closed(client: httpx2.AsyncClient) -> bool:
    return client.is_closed
