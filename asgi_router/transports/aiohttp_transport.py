"""The aiohttp implementation of the upstream :class:`~asgi_router.transports.base.Transport` seam.

Why a second transport: on loopback, one uvicorn worker proxying through a shared
``aiohttp.ClientSession`` serves several times the requests per second of the same proxy on
the httpx API (httpcore's pool bookkeeping dominates those profiles: assigning requests to
connections and polling every pooled socket for expiry on each request). See
``docs/performance.rst`` for the side-by-side numbers that made this the default.

What is tuned, and why:

* one ``ClientSession`` and one ``TCPConnector`` per router and event loop, opened on lifespan
  startup or a loop's first request, sized by :class:`~asgi_router.config.providers.PoolSettings` as
  httpx's pool is: ``max_connections`` is the connector's ``limit``, ``keepalive_expiry`` its
  ``keepalive_timeout``, and
  ``max_keepalive_connections`` caps the idle connections kept (:class:`_PoolConnector`: aiohttp
  itself keeps every released connection until it expires);
* ``auto_decompress=False``: bytes are relayed exactly as the upstream sent them (the request
  asks for ``accept-encoding: identity`` anyway); chunked framing is still undone, as by httpx;
* ``DummyCookieJar`` and ``trust_env=False``: an upstream may not set cookies on us, and an
  environment proxy must never see provider traffic;
* body chunks come from ``response.content.iter_any()``: whatever bytes have arrived, as soon
  as they arrive, never re-split into lines or fixed sizes;
* parsed ``yarl.URL`` objects and ``ClientTimeout`` objects are built once per upstream URL and
  per provider, not per request.

aiohttp's exceptions are classified in :mod:`asgi_router.core.classify` next to httpx's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Any, cast

import aiohttp
from aiohttp.client_proto import ResponseHandler
from yarl import URL

from asgi_router.config.providers import PoolSettings
from asgi_router.transports.loop_clients import LoopClients
from asgi_router.transports.provider import ProviderRuntime

__all__ = ["AiohttpResponse", "AiohttpTransport"]


class _PoolConnector(aiohttp.TCPConnector):
    """A ``TCPConnector`` that keeps at most ``max_idle`` idle connections (httpx's
    ``max_keepalive_connections``): one released beyond that is closed rather than pooled."""

    def __init__(self, max_idle: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._max_idle = max_idle

    def idle(self) -> int:
        return sum(len(conns) for conns in self._conns.values())

    def in_use(self) -> int:
        return len(self._acquired)

    def _release(
        self, key: aiohttp.client_reqrep.ConnectionKey, protocol: ResponseHandler, *, should_close: bool = False
    ) -> None:
        super()._release(key, protocol, should_close=should_close or self.idle() >= self._max_idle)


class AiohttpResponse(aiohttp.ClientResponse):
    """aiohttp's response, as the router's :class:`~asgi_router.transports.base.UpstreamResponse`.

    The session is built with ``response_class=AiohttpResponse``, so the response aiohttp
    returns is the router's own: no wrapper object and no wrapper coroutine per request (each
    held for as long as the upstream takes to answer, for every request in flight).
    ``raw_headers`` and ``status`` are aiohttp's own.
    """

    _relay_chunks: AsyncIterator[bytes] | None = None

    @property
    def chunks(self) -> AsyncIterator[bytes]:
        """Raw body chunks, as they arrive (``content.iter_any()``); one iterator per response."""
        chunks = self._relay_chunks
        if chunks is None:
            chunks = self._relay_chunks = self.content.iter_any()
        return chunks

    @property
    def drained(self) -> bool:
        """Every body byte has arrived and been read (aiohttp has seen the end of the body)."""
        return self.content.at_eof()

    def close_now(self) -> None:
        """Release at once; synchronous, so no cancellation can interrupt it (no shield needed)."""
        # release() returns a fully read connection to the pool and closes one whose body was
        # not read to the end (aiohttp's ``should_close``), which is what a cancelled relay needs.
        self.release()

    async def aclose(self) -> None:
        self.close_now()


class AiohttpTransport:
    """:class:`~asgi_router.transports.base.Transport` over one shared ``aiohttp.ClientSession`` per
    running event loop (:class:`~asgi_router.transports.loop_clients.LoopClients`: aiohttp binds a session
    to its loop). A session is made on lifespan startup or on a loop's first request, so a host
    app without lifespan support still works; :meth:`aclose` closes the running loop's session
    on lifespan shutdown, and a loop that ends closes its own.
    """

    #: aiohttp is asyncio-native and its responses close without awaiting, so the router may
    #: cancel its requests with a bare ``Task.cancel()`` (:class:`~asgi_router.core.deadlines.TaskScope`).
    native_cancel = True

    def __init__(self, pool: PoolSettings) -> None:
        self._pool = pool
        self._sessions = LoopClients(self._open, aiohttp.ClientSession.close, _session_closed)
        self._urls: dict[str, URL] = {}
        self._timeouts: dict[str, aiohttp.ClientTimeout] = {}

    def _open(self) -> aiohttp.ClientSession:
        connector = _PoolConnector(
            self._pool.max_keepalive_connections or self._pool.max_connections,
            limit=self._pool.max_connections,
            limit_per_host=0,
            keepalive_timeout=self._pool.keepalive_expiry,
            ttl_dns_cache=300,
        )
        return aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None),
            raise_for_status=False,
            response_class=AiohttpResponse,
        )

    @property
    def is_open(self) -> bool:
        return bool(self._sessions.clients())

    def start(self) -> None:
        self._sessions.current()

    def _connectors(self) -> list[_PoolConnector]:
        return [cast("_PoolConnector", session.connector) for session in self._sessions.clients()]

    def is_quiet(self) -> bool:
        """No upstream connection is checked out of any pool (every response was released)."""
        return all(connector.in_use() == 0 for connector in self._connectors())

    def connections(self) -> int:
        return sum(connector.idle() + connector.in_use() for connector in self._connectors())

    def _target(self, provider: ProviderRuntime, url: str) -> tuple[URL, aiohttp.ClientTimeout]:
        target = self._urls.get(url)
        if target is None:
            target = self._urls[url] = URL(url)
        timeout = self._timeouts.get(provider.name)
        if timeout is None:
            # ``connect`` covers waiting for a pooled connection and opening one (httpx's pool
            # and connect timeouts); first-byte, idle and total are the attempt loop's deadlines.
            timeout = self._timeouts[provider.name] = aiohttp.ClientTimeout(
                total=None, connect=provider.timeouts.connect, sock_read=None
            )
        return target, timeout

    def send(
        self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes
    ) -> Awaitable[AiohttpResponse]:
        """The request, to await: aiohttp's own awaitable, with no coroutine of ours around it."""
        target, timeout = self._target(provider, url)
        request = self._sessions.current().request(
            "POST", target, headers=headers, data=body, timeout=timeout, allow_redirects=False
        )
        return cast("Awaitable[AiohttpResponse]", request)  # the session's response_class

    async def aclose(self) -> None:
        await self._sessions.aclose()


def _session_closed(session: aiohttp.ClientSession) -> bool:
    return session.closed
