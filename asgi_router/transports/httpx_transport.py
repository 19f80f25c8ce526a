"""The httpx implementation of the upstream :class:`~asgi_router.transports.transport.Transport` seam.

Over ``httpx2`` (the maintained httpx fork the official ``openai`` SDK depends on): what a user
injects with ``ModelRouter(http_client=...)``, and the transport of ``transport = "httpx"``.
Chunks come from ``aiter_raw()``: bytes exactly as the upstream sent them, never decoded or
re-chunked. httpx's exceptions are translated into the router's own
(:mod:`asgi_router.core.upstream_errors`) here and nowhere else (:func:`translate`), in
:meth:`HttpxTransport.send` and in each read of a response's chunks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx2

from asgi_router.config.provider_settings import PoolSettings
from asgi_router.core.upstream_errors import UpstreamBroken, UpstreamConnectError, UpstreamError, UpstreamTimeout
from asgi_router.transports.loop_clients import LoopClients
from asgi_router.transports.provider import ProviderRuntime

__all__ = ["HttpxResponse", "HttpxTransport", "translate"]


def translate(exc: httpx2.HTTPError) -> UpstreamError | None:
    """The router's exception for one of httpx's, or ``None`` for one it does not know."""
    if isinstance(exc, httpx2.TimeoutException):  # connect, pool and write timeouts
        return UpstreamTimeout(str(exc))
    if isinstance(exc, (httpx2.ConnectError, httpx2.ProxyError, httpx2.UnsupportedProtocol)):
        return UpstreamConnectError(str(exc))
    if isinstance(exc, httpx2.TransportError):  # read/write errors, protocol errors, a cut body
        return UpstreamBroken(str(exc))
    return None


async def _translated(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield chunk
    except httpx2.HTTPError as exc:
        translated = translate(exc)
        if translated is None:
            raise
        raise translated from exc


async def _already_read(content: bytes) -> AsyncIterator[bytes]:
    yield content


class HttpxResponse:
    """:class:`~asgi_router.transports.transport.UpstreamResponse` over an ``httpx2.Response`` opened with
    ``stream=True``."""

    __slots__ = ("_owner", "_response", "chunks", "raw_headers", "status")

    #: httpx says nothing cheap about it: a whole response reads on to the end of its chunks.
    drained = False

    def __init__(self, response: httpx2.Response, owner: HttpxTransport) -> None:
        self._response = response
        self._owner: HttpxTransport | None = owner
        self.status = response.status_code
        self.raw_headers = response.headers.raw
        # A response built in memory (``httpx2.MockTransport`` with ``content=``) arrives
        # already read; ``aiter_raw()`` would refuse it, so serve its content as one chunk.
        self.chunks = (
            _already_read(response.content) if response.is_stream_consumed else _translated(response.aiter_raw())
        )

    async def aclose(self) -> None:
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.open_responses -= 1
        await self._response.aclose()


class HttpxTransport:
    """:class:`~asgi_router.transports.transport.Transport` over one shared ``httpx2.AsyncClient``
    per running event loop.

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
        #: Responses sent and not closed yet (leak checks: :meth:`is_quiet`).
        self.open_responses = 0

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

    def is_quiet(self) -> bool:
        """Every response this transport returned has been closed (its connection released)."""
        return self.open_responses == 0

    async def send(
        self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes, *, method: str | None = None
    ) -> HttpxResponse:
        client = self.client
        request = client.build_request(
            method or "POST", url, headers=headers, content=body, timeout=provider.httpx_timeout
        )
        try:
            response = await client.send(request, stream=True)
        except httpx2.HTTPError as exc:
            translated = translate(exc)
            if translated is None:
                raise
            raise translated from exc
        self.open_responses += 1
        return HttpxResponse(response, self)

    async def aclose(self) -> None:
        if self._injected is None:
            await self._clients.aclose()


def _client_closed(client: httpx2.AsyncClient) -> bool:
    return client.is_closed
