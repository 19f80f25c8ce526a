"""A committed stream held whole before its first byte, for its group's output guardrails.

Under a group's ``output_stream = "buffer"`` the stream an attempt committed is read to its end
before anything is sent, so the output guardrails can check (and mask) the whole answer: time to
first token becomes time to the last. The read is bounded as the relay's would be: each chunk
within the provider's ``idle``, the whole within the attempt's ``total``, at most
``max_response_bytes``; a translated stream is translated as it is read. What was read is handed
to the relay as the committed answer's first bytes, on a response with nothing left to read.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence

from asgi_router.attempts.outcomes import Committed
from asgi_router.core.classify import UnrecognisedFailure, classify_exception
from asgi_router.core.deadlines import reading
from asgi_router.core.reasons import Reason
from asgi_router.transports.transport import UpstreamResponse, close_response

__all__ = ["HeldResponse", "hold"]


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # pragma: no cover - makes this an async generator


class HeldResponse:
    """An upstream response whose body was read whole: its chunks are over, its close is its own."""

    __slots__ = ("_chunks", "_response", "status")

    def __init__(self, response: UpstreamResponse) -> None:
        self._response = response
        self.status = response.status
        self._chunks = _nothing()

    @property
    def raw_headers(self) -> Sequence[tuple[bytes, bytes]]:
        return self._response.raw_headers

    @property
    def chunks(self) -> AsyncIterator[bytes]:
        return self._chunks

    @property
    def drained(self) -> bool:
        return True

    async def aclose(self) -> None:
        closing = close_response(self._response)
        if closing is not None:
            await closing


async def hold(committed: Committed, limit: int, clock: Callable[[], float]) -> bytes | Reason:
    """The whole stream ``committed`` began (translated, if it is), or why it could not be held:
    ``timeout``, ``upstream_5xx`` (over ``limit`` bytes, or an error event), a connection failure's
    reason, or ``stream_interrupted`` (a translated stream that ended before its end)."""
    parts = list(committed.parts) if committed.parts else [committed.body]
    size = sum(len(part) for part in parts)
    translation = committed.translation
    chunks = committed.response.chunks
    try:
        with reading(math.inf, committed.provider.timeouts.idle, committed.deadline, clock) as reads:
            while True:
                try:
                    chunk = await reads.next(chunks)
                except StopAsyncIteration:
                    break
                if translation is not None:
                    chunk = translation.feed(chunk)
                    if translation.failure is not None:
                        return "upstream_5xx"
                size += len(chunk)
                if size > limit:
                    return "upstream_5xx"
                parts.append(chunk)
        if reads.expired:
            return "timeout"
    except Exception as exc:
        try:
            return classify_exception(exc)
        except UnrecognisedFailure:
            raise exc from None
    if translation is not None and not translation.finished:
        return "stream_interrupted"
    return b"".join(parts)
