"""The one seam upstream HTTP goes through: what a transport does, and what it gives back.

The rest of the router sees only :class:`UpstreamResponse` (status, raw headers, an async
iterator of raw body chunks, ``aclose``) and :class:`Transport` (``send``, ``start``,
``aclose``). Two implementations sit behind it, chosen by ``RouterSettings.transport``
(``transport_factory.py``): ``aiohttp_transport.py``, the default (``docs/performance.md``
compares the two), and ``httpx_transport.py`` over ``httpx2`` (the maintained fork the
official ``openai`` SDK depends on, and what a user injects with ``http_client=``). Either way:
one client per router and running event loop (``loop_clients.py``), shared by every request on
that loop. A test or a user may bring a transport of their own (``ModelRouter(transport=...)``).

A transport raises only the router's own exceptions (:mod:`asgi_router.core.upstream_errors`)
for what went wrong upstream, from ``send`` and from its chunks: each translates its library's
at one boundary, so nothing above it imports an HTTP library.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Protocol

from asgi_router.transports.provider import ProviderRuntime

__all__ = ["Transport", "UpstreamResponse", "close_response", "read_bounded"]


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
    and nothing a cancellation could interrupt (so no shielded cancel scope is needed). Any
    other is closed by the returned awaitable, under a shield.
    """
    close_now = getattr(response, "close_now", None)
    if close_now is not None:
        close_now()
        return None
    return _close_shielded(response)


async def read_bounded(response: UpstreamResponse, limit: int) -> bytes | None:
    """``response``'s whole body, for a caller that reads an answer whole outside the attempts
    (an embedding, a stored response's call); ``None`` past ``limit`` bytes, the rest unread
    (closing the response drops it)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in response.chunks:
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)


async def _close_shielded(response: UpstreamResponse) -> None:
    # A task of its own, shielded: a second cancellation of the caller (the client leaving while a
    # lost hedge closes) stops the wait, never the close itself.
    await asyncio.shield(asyncio.ensure_future(response.aclose()))


class Transport(Protocol):
    """Sends one upstream request and returns as soon as the status and headers are in."""

    def send(
        self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes, *, method: str | None = None
    ) -> Awaitable[UpstreamResponse]:
        """The request, to await (an ``async def`` will do). ``method`` ``None`` is a
        completion's ``POST`` to one of the provider's route targets (a transport may keep its
        URL parsed); any other is a call about a stored response (``GET``, ``DELETE``, a cancel's
        ``POST``: ``endpoints/stored_responses.py``), whose URL names the response and carries the
        client's query, already percent-encoded: one per id, never to be kept."""

    def start(self) -> None:
        """Open the running loop's pool (called on lifespan startup; sending also opens lazily)."""

    async def aclose(self) -> None:
        """Close the running loop's pool (called after the host app's shutdown)."""

    @property
    def is_open(self) -> bool:
        """Whether a pool is open, on any loop (introspection for tests and health checks)."""

    def is_quiet(self) -> bool:
        """Every response :meth:`send` returned has been closed (leak checks)."""
