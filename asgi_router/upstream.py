"""The one place that talks HTTP to upstreams: a seam the transport can be swapped behind.

The rest of the router sees only :class:`UpstreamResponse` (status, raw headers, an async
iterator of raw body chunks, ``aclose``) and :class:`Transport` (``send``, ``aclose``). Two
implementations sit behind it, chosen by ``RouterSettings.transport`` (:func:`make_transport`):
:class:`HttpxTransport` here, over the httpx API through ``httpx2`` (the maintained fork the
official ``openai`` SDK depends on, and what a user injects with ``http_client=``), and
:class:`~asgi_router.upstream_aiohttp.AiohttpTransport`, the default because it is the faster
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

from collections.abc import AsyncIterator, Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import anyio
import httpx2

from .headers import FORWARDED_REQUEST_HEADERS
from .loop_clients import LoopClients
from .settings import PoolSettings, ProviderSettings, Timeouts

__all__ = [
    "HttpxResponse",
    "HttpxTransport",
    "ProviderRuntime",
    "Transport",
    "UpstreamResponse",
    "close_response",
    "make_transport",
    "upstream_path",
]


class UpstreamResponse(Protocol):
    """An upstream response whose body has not been read yet."""

    status: int

    @property
    def raw_headers(self) -> Sequence[tuple[bytes, bytes]]:
        """Raw header pairs as received (names in any case)."""

    @property
    def chunks(self) -> AsyncIterator[bytes]:
        """Raw body chunks; one iterator for the response's whole life."""

    @property
    def drained(self) -> bool:
        """Whether :attr:`chunks` is known to have nothing more to give (``False`` when in
        doubt): a whole response then needs no further read to learn that it has ended."""

    async def aclose(self) -> None:
        """Release the connection (closing it if the body was not read to the end)."""


def close_response(response: UpstreamResponse) -> Awaitable[None] | None:
    """Close ``response``, even when the calling task is being cancelled: never leak it.

    Returns what is left to await, if anything: a response with a synchronous ``close_now``
    (aiohttp's: ``release()`` does not await) is closed by it at once, with no coroutine made
    and nothing a cancellation could interrupt (so no shielded cancel scope, ~3.5 µs). Any
    other is closed by the returned awaitable, under a shield.
    """
    close_now = getattr(response, "close_now", None)
    if close_now is not None:
        close_now()
        return None
    return _close_shielded(response)


async def _close_shielded(response: UpstreamResponse) -> None:
    with anyio.CancelScope(shield=True):
        await response.aclose()


class Transport(Protocol):
    """Sends one upstream request and returns as soon as the status and headers are in."""

    def send(
        self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes
    ) -> Awaitable[UpstreamResponse]:
        """The request, to await (an ``async def`` will do)."""

    def start(self) -> None:
        """Open the running loop's pool (called on lifespan startup; sending also opens lazily)."""

    async def aclose(self) -> None:
        """Close the running loop's pool (called after the host app's shutdown)."""

    @property
    def is_open(self) -> bool:
        """Whether a pool is open, on any loop (introspection for tests and health checks)."""

    def is_quiet(self) -> bool:
        """No request holds an upstream connection and none is mid-response (leak checks)."""

    def connections(self) -> int:
        """Upstream connections the pool holds, idle or in use (leak checks, health pages)."""


def make_transport(
    kind: Literal["aiohttp", "httpx"], pool: PoolSettings, http_client: httpx2.AsyncClient | None = None
) -> Transport:
    """The transport for ``kind``; an injected ``http_client`` always means the httpx one."""
    if http_client is not None or kind == "httpx":
        return HttpxTransport(pool, http_client)
    from .upstream_aiohttp import AiohttpTransport  # imports this module: import it late

    return AiohttpTransport(pool)


def upstream_path(route: str) -> str:
    """The path below a provider's ``base_url`` for an inbound route.

    Provider base URLs end in the API version (``https://api.openai.com/v1``), inbound routes
    start with it (``/v1/chat/completions``): the version is said once.
    """
    return route[3:] if route == "/v1" or route.startswith("/v1/") else route


@dataclass(frozen=True, slots=True)
class ProviderRuntime:
    """A provider's per-request constants, computed once from its settings."""

    name: str
    configured: bool
    timeouts: Timeouts
    #: Upstream URL per inbound route.
    urls: dict[str, str]
    #: Headers every request to this provider carries (the key is in here: never log this).
    headers: dict[str, str] = field(repr=False)
    httpx_timeout: httpx2.Timeout = field(repr=False)
    #: Inbound header names this provider receives: the fixed allowlist plus ``forward_headers``.
    forward: frozenset[bytes] = FORWARDED_REQUEST_HEADERS
    #: Why it is not configured: the unset variable its ``api_key_env`` names (a name, not a key).
    missing_key_env: str | None = None

    @classmethod
    def build(cls, name: str, settings: ProviderSettings, routes: list[str]) -> ProviderRuntime:
        headers = {
            "content-type": "application/json",
            "accept-encoding": "identity",
            **settings.headers,
        }
        key = settings.key()
        if key is not None:
            headers["authorization"] = f"Bearer {key.get_secret_value()}"
        t = settings.timeouts
        return cls(
            name=name,
            configured=settings.is_configured,
            timeouts=t,
            urls={route: settings.base_url + upstream_path(route) for route in routes},
            headers=headers,
            # connect and pool waits are httpx's; first-byte, idle and total are enforced by
            # the attempt loop and the relay with anyio deadlines (httpx has no such notions).
            httpx_timeout=httpx2.Timeout(connect=t.connect, read=None, write=t.first_byte, pool=t.connect),
            forward=FORWARDED_REQUEST_HEADERS | {name.encode("latin-1") for name in settings.forward_headers},
            missing_key_env=None if settings.is_configured else settings.api_key_env,
        )


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
    (:class:`~asgi_router.loop_clients.LoopClients`), made on lifespan startup or on the loop's
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
