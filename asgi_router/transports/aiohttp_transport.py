"""The aiohttp implementation of the upstream :class:`~asgi_router.transports.transport.Transport` seam.

Why a second transport: on loopback, one uvicorn worker proxying through a shared
``aiohttp.ClientSession`` serves several times the requests per second of the same proxy on
the httpx API (httpcore's pool bookkeeping dominates those profiles: assigning requests to
connections and polling every pooled socket for expiry on each request). See
``docs/performance.md`` for the side-by-side numbers that made this the default.

What is tuned, and why, all through aiohttp's public API:

* one ``ClientSession`` and one ``TCPConnector`` per router and event loop, opened on lifespan
  startup or a loop's first request, sized by :class:`~asgi_router.config.provider_settings.PoolSettings`:
  ``max_connections`` is the connector's ``limit``, ``keepalive_expiry`` its
  ``keepalive_timeout``. aiohttp keeps every released connection until it expires and has no
  public way to cap the idle ones, so the settings refuse ``max_keepalive_connections`` for
  this transport rather than ignore it;
* ``auto_decompress=False``: bytes are relayed exactly as the upstream sent them (the request
  asks for ``accept-encoding: identity`` anyway); chunked framing is still undone, as by httpx;
* ``DummyCookieJar`` and ``trust_env=False``: an upstream may not set cookies on us, and an
  environment proxy must never see provider traffic;
* body chunks come from ``response.content.readany()``: whatever bytes have arrived, as soon as
  they arrive, never re-split into lines or fixed sizes;
* parsed ``yarl.URL`` objects and ``ClientTimeout`` objects are built once per upstream URL and
  per provider, not per request (but for a call about a stored response, whose URL names it:
  parsed each time, never kept).

aiohttp's exceptions are translated into the router's own
(:mod:`asgi_router.core.upstream_errors`) here and nowhere else: in :meth:`AiohttpTransport.send`
and in each read of a response's chunks (:func:`translate`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import cast

import aiohttp
from yarl import URL

from asgi_router.config.provider_settings import PoolSettings
from asgi_router.core.upstream_errors import UpstreamBroken, UpstreamConnectError, UpstreamError, UpstreamTimeout
from asgi_router.transports.loop_clients import LoopClients
from asgi_router.transports.provider import ProviderRuntime

__all__ = ["AiohttpResponse", "AiohttpTransport", "translate"]


def translate(exc: aiohttp.ClientError) -> UpstreamError | None:
    """The router's exception for one of aiohttp's, or ``None`` for one it does not know (most
    specific first: aiohttp's timeouts are also connection errors)."""
    if isinstance(exc, aiohttp.ServerTimeoutError):  # connect and socket timeouts
        return UpstreamTimeout(_text(exc))
    if isinstance(exc, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError)):  # cut mid-way
        return UpstreamBroken(_text(exc))
    if isinstance(exc, aiohttp.ClientConnectionError):  # refused, DNS, TLS, reset
        return UpstreamConnectError(_text(exc))
    if isinstance(exc, aiohttp.ClientResponseError):  # an unparsable status line or headers
        return UpstreamBroken(_text(exc))
    return None


def _text(exc: aiohttp.ClientError) -> str:
    """What ``exc`` says, or its type's name (some of aiohttp's cannot say it without the
    request they were raised for)."""
    try:
        return str(exc) or type(exc).__name__
    except Exception:
        return type(exc).__name__


class _Chunks:
    """A response's raw body chunks as they arrive, aiohttp's exceptions translated per read."""

    __slots__ = ("_content",)

    def __init__(self, content: aiohttp.StreamReader) -> None:
        self._content = content

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._content.readany()
        except aiohttp.ClientError as exc:
            translated = translate(exc)
            if translated is None:
                raise
            raise translated from exc
        if not chunk:  # readany() answers b"" only at the end of the body
            raise StopAsyncIteration
        return chunk


class AiohttpResponse(aiohttp.ClientResponse):
    """aiohttp's response, as the router's :class:`~asgi_router.transports.transport.UpstreamResponse`.

    The session is built with ``response_class=AiohttpResponse``, so the response aiohttp
    returns is the router's own: no wrapper object per request (each held for as long as the
    stream is open, for every stream in flight). ``raw_headers`` and ``status`` are aiohttp's
    own. The transport that sent it counts it open until :meth:`close_now`.
    """

    _relay_chunks: _Chunks | None = None
    _owner: AiohttpTransport | None = None

    @property
    def chunks(self) -> AsyncIterator[bytes]:
        """Raw body chunks, as they arrive; one iterator per response."""
        chunks = self._relay_chunks
        if chunks is None:
            chunks = self._relay_chunks = _Chunks(self.content)
        return chunks

    @property
    def drained(self) -> bool:
        """Every body byte has arrived and been read (aiohttp has seen the end of the body)."""
        return self.content.at_eof()

    def close_now(self) -> None:
        """Release at once; synchronous, so no cancellation can interrupt it (no shield needed)."""
        # release() returns a fully read connection to the pool and closes one whose body was
        # not read to the end (aiohttp's own rule), which is what a cancelled relay needs.
        self.release()
        owner, self._owner = self._owner, None
        if owner is not None:
            owner.open_responses -= 1

    async def aclose(self) -> None:
        self.close_now()


class AiohttpTransport:
    """:class:`~asgi_router.transports.transport.Transport` over one shared ``aiohttp.ClientSession``
    per running event loop (:class:`~asgi_router.transports.loop_clients.LoopClients`: aiohttp
    binds a session to its loop). A session is made on lifespan startup or on a loop's first
    request, so a host app without lifespan support still works; :meth:`aclose` closes the
    running loop's session on lifespan shutdown, and a loop that ends closes its own.
    """

    def __init__(self, pool: PoolSettings) -> None:
        self._pool = pool
        self._sessions = LoopClients(self._open, aiohttp.ClientSession.close, _session_closed)
        self._urls: dict[str, URL] = {}
        self._timeouts: dict[str, aiohttp.ClientTimeout] = {}
        #: Responses sent and not closed yet (leak checks: :meth:`is_quiet`).
        self.open_responses = 0

    def _open(self) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
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

    def is_quiet(self) -> bool:
        """Every response this transport returned has been closed (its connection released)."""
        return self.open_responses == 0

    def _target(self, provider: ProviderRuntime, url: str) -> tuple[URL, aiohttp.ClientTimeout]:
        target = self._urls.get(url)
        if target is None:
            target = self._urls[url] = URL(url)
        timeout = self._timeouts.get(provider.name)
        if timeout is None:
            timeout = self._timeout(provider)
        return target, timeout

    def _timeout(self, provider: ProviderRuntime) -> aiohttp.ClientTimeout:
        # ``connect`` covers waiting for a pooled connection and opening one (httpx's pool
        # and connect timeouts); first-byte, idle and total are the attempt loop's deadlines.
        timeout = self._timeouts[provider.name] = aiohttp.ClientTimeout(
            total=None, connect=provider.timeouts.connect, sock_read=None
        )
        return timeout

    async def send(
        self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes, *, method: str | None = None
    ) -> AiohttpResponse:
        if method is None:  # a completion: its URL is one of the route targets', kept parsed
            target, timeout = self._target(provider, url)
            method = "POST"
        else:  # a stored response's URL names the response: one per id, never kept
            target, timeout = URL(url, encoded=True), self._timeouts.get(provider.name) or self._timeout(provider)
        session = self._sessions.current()
        request = session.request(method, target, headers=headers, data=body, timeout=timeout, allow_redirects=False)
        del headers  # aiohttp copies them as it sends: not held here while the upstream is awaited
        try:
            response = await request
        except aiohttp.ClientError as exc:
            translated = translate(exc)
            if translated is None:
                raise
            raise translated from exc
        sent = cast("AiohttpResponse", response)  # the session's response_class
        sent._owner = self
        self.open_responses += 1
        return sent

    async def aclose(self) -> None:
        await self._sessions.aclose()


def _session_closed(session: aiohttp.ClientSession) -> bool:
    return session.closed
