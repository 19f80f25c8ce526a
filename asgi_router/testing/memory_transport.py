"""An upstream in memory: a transport whose answers are lists of chunks, with no socket at all.

The router's relay, its attempts and its timers can be driven through this instead of a server:
each response plays its chunks one read at a time, then ends as scripted (at its end, with an
upstream failure, or stalling until the reader gives up). The project's unit tests and its
benchmark (``bench/micro.py``) both use it. Like the aiohttp transport (the default), it is
asyncio-native and closes responses without awaiting (``close_now``), so the router runs it the
way it runs a real upstream; a read that has its chunk never yields to the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Final

from asgi_router.transports.provider import ProviderRuntime

__all__ = ["STALL", "MemoryChunks", "MemoryResponse", "MemoryTransport", "Stall"]


class Stall:
    """How a stream that goes quiet ends: its next read never delivers (an idle timeout, or the
    client leaving, ends it)."""

    __slots__ = ()


#: The one :class:`Stall`.
STALL: Final = Stall()


class MemoryChunks:
    """A response body's chunks from memory, then its ending: an async iterator object, as the
    aiohttp transport's is (an unfinished async *generator* would have asyncio schedule a task
    to finalise it, a cost no real transport has)."""

    __slots__ = ("ending", "left")

    def __init__(self, parts: Sequence[bytes], ending: Exception | Stall | None = None) -> None:
        self.left = list(reversed(parts))
        #: What the read after the last chunk does: end the stream (``None``), raise, or stall.
        self.ending = ending

    def __aiter__(self) -> MemoryChunks:
        return self

    async def __anext__(self) -> bytes:
        left = self.left
        if left:
            return left.pop()
        ending = self.ending
        if ending is None:
            raise StopAsyncIteration
        if isinstance(ending, Stall):
            await asyncio.get_running_loop().create_future()  # never resolved: only cancelled
            raise AssertionError("a stalled read only ends cancelled")  # pragma: no cover
        raise ending


class MemoryResponse:
    """An upstream response from memory; ``drained`` once its last part is read, as aiohttp's;
    ``closed`` once the router let it go."""

    __slots__ = ("chunks", "closed", "raw_headers", "status")

    def __init__(
        self,
        parts: Sequence[bytes],
        content_type: bytes = b"text/event-stream",
        status: int = 200,
        ending: Exception | Stall | None = None,
    ) -> None:
        self.status = status
        self.raw_headers = [(b"content-type", content_type)]
        self.chunks = MemoryChunks(parts, ending)
        self.closed = False

    @property
    def drained(self) -> bool:
        chunks = self.chunks
        return not chunks.left and chunks.ending is None

    def close_now(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class MemoryTransport:
    """A :class:`~asgi_router.transports.transport.Transport` that answers at once, from memory:
    ``answer(url)`` makes each response (a new one per call: a response is read once); ``keep``:
    every response is kept on :attr:`sent` (tests; a benchmark keeps none)."""

    def __init__(self, answer: Callable[[str], MemoryResponse], *, keep: bool = False) -> None:
        self._answer = answer
        self._keep = keep
        #: The responses sent so far, when kept: what a test asserts on, and leak checks.
        self.sent: list[MemoryResponse] = []
        self.is_open = True

    def start(self) -> None:
        pass

    def is_quiet(self) -> bool:
        return all(response.closed for response in self.sent)

    async def send(
        self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes, *, method: str | None = None
    ) -> MemoryResponse:
        response = self._answer(url)
        if self._keep:
            self.sent.append(response)
        return response

    async def aclose(self) -> None:
        pass
