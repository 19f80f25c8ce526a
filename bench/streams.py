"""Memory per open stream: hold N slow streams open through a server and watch its RSS.

An LLM gateway's steady state is many long, mostly idle streams, so what one open stream costs
in memory bounds how many a worker can hold. The client here (aiohttp, in the bench's own
process) opens ``n`` streaming requests at once, reads each one's first event (so every stream
is committed and relaying), samples the server's RSS, then lets them all go.

The server is warmed first with a smaller batch so that one-off allocations (pools, caches,
the allocator's first arenas) are in the baseline, not charged to the streams.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

__all__ = ["StreamsResult", "hold_streams"]


@dataclass(frozen=True, slots=True)
class StreamsResult:
    """What ``n`` open streams cost one server process."""

    opened: int
    failed: int
    baseline_kib: int
    loaded_kib: int
    open_seconds: float

    @property
    def per_stream_kib(self) -> float:
        return (self.loaded_kib - self.baseline_kib) / self.opened if self.opened else 0.0


async def _open_batch(session: aiohttp.ClientSession, url: str, body: bytes, n: int) -> list[aiohttp.ClientResponse]:
    async def open_one() -> aiohttp.ClientResponse:
        response = await session.post(url, data=body, headers={"content-type": "application/json"})
        if response.status != 200:
            response.release()
            raise RuntimeError(f"status {response.status}")
        await response.content.readany()  # the first event: the stream is committed
        return response

    results = await asyncio.gather(*(open_one() for _ in range(n)), return_exceptions=True)
    return [result for result in results if isinstance(result, aiohttp.ClientResponse)]


def _close(responses: list[aiohttp.ClientResponse]) -> None:
    for response in responses:
        response.close()


async def _hold(url: str, body: bytes, n: int, warm: int, rss: Callable[[], int], settle: float) -> StreamsResult:
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        _close(await _open_batch(session, url, body, warm))
        await asyncio.sleep(settle)  # let the server notice the closes and free what it will
        baseline = rss()
        started = time.perf_counter()
        opened = await _open_batch(session, url, body, n)
        open_seconds = time.perf_counter() - started
        await asyncio.sleep(settle / 2)
        loaded = rss()
        _close(opened)
    return StreamsResult(len(opened), n - len(opened), baseline, loaded, open_seconds)


def hold_streams(
    url: str, body: bytes, n: int, rss: Callable[[], int], warm: int = 100, settle: float = 1.0
) -> StreamsResult:
    """Open ``n`` streams to ``url`` at once, sample ``rss()`` (KiB) before and while open."""
    return asyncio.run(_hold(url, body, n, warm, rss, settle))
