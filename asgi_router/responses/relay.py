"""Relay a committed upstream's stream to the client: one read loop, two ways of cutting it.

Once ``http.response.start`` has gone out there is no failover (sent bytes cannot be recalled).
:func:`relay_call` relays one call's stream, cut one of two ways:

* **byte-exact** (every plan without a candidate that may continue a broken stream: ``resume =
  "none"``, the default): unparsed, unbuffered, each chunk as it came (a UTF-8 character split
  across chunks stays split);
* **whole events** (:class:`~asgi_router.responses.whole_events.WholeEvents`, for a plan that may
  continue the stream: ``resume_relay.py``): each chunk up to its last event boundary, the tail
  held until its event completes, so a break never leaves half an event at the client.

A translated stream (a chat completion answered by an Anthropic provider) is the one exception
to "unparsed": each chunk read is fed to the committed attempt's
:class:`~asgi_router.protocols.from_anthropic.StreamTranslation` and what it gives back is sent
at once (re-encoded as it arrives, never buffered). An ``error`` event, or an upstream that ends
before ``message_stop``, is a break like a cut connection.

A break the relay cannot repair (:func:`relay_stream`: any) ends the response with one in-band
event ``data: {"error": {...}}`` (Anthropic's ``event: error`` on an Anthropic client's route:
``error_event`` says which) and *without* ``data: [DONE]``, so the ``openai`` and ``anthropic``
SDKs raise rather than return a truncated answer as if it were whole; its words come from
``relay_failures.py``.

Each chunk is awaited into ``send`` before the next one is read: a slow client slows the
upstream read (TCP backpressure end to end), and at most one chunk is held at a time. The reads
are one :func:`~asgi_router.core.deadlines.reading` block: each within ``idle``, never past the
attempt's ``total``, timed by the request's own scope; time spent waiting on a slow *client* is
not upstream idleness.

Once the stream's last event (``data: [DONE]``, ``message_stop``) has been sent the client has the
whole answer, so a client that closes its connection before the response's final empty message
leaves a ``served`` request, not an abort. Nothing per chunk looks for that end: the relay keeps
the last chunk sent on its :class:`Progress` (the request's context), and only when something asks
(the client left, a send failed, the upstream broke) is that chunk tested (:func:`ends_stream`).
The result (:class:`RelayResult`, built in one place: :meth:`Sent.result`) names the last two
chunks sent (where a stream's final ``usage`` is) and how many there were; a ``tail``
(:class:`~asgi_router.attempts.usage.LastChunks`, or a continued stream's
:class:`~asgi_router.attempts.usage.Tail`), when given, keeps references to more of the last
chunks sent (where an upstream whose writes arrive in pieces states its usage), so that token
usage can be read *after* the stream has ended.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from starlette.types import Send

from asgi_router.attempts.outcomes import Committed
from asgi_router.attempts.usage import LastChunks, Tail
from asgi_router.core.deadlines import reading
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import stream_error_event
from asgi_router.responses.relay_failures import UpstreamSaid, failure_text, late_reason
from asgi_router.responses.whole_events import WholeEvents
from asgi_router.transports.transport import close_response

__all__ = [
    "ENDINGS",
    "MAY_END",
    "Break",
    "Progress",
    "RelayResult",
    "Sent",
    "end_with_error",
    "ends_stream",
    "event_boundary",
    "relay_call",
    "relay_stream",
    "send_whole",
]

#: How a chunk that ends a stream ends (OpenAI's ``[DONE]``, Anthropic's ``message_stop``): once
#: one is sent the client has the whole answer, and a client that closes before the response's
#: last (empty) message still got it: the request is ``served``.
ENDINGS: Final = (b"data: [DONE]\n\n", b"data: [DONE]\r\n\r\n", b'"message_stop"}\n\n', b'"message_stop"}\r\n\r\n')
#: Above the fourth byte from the end of every one of :data:`ENDINGS` (``E`` of ``[DONE]``, the
#: quote of ``"message_stop"``, ``\r`` of a CRLF ending). A chunk whose fourth byte from the end
#: is not below it cannot end the stream (a chat chunk's is the ``]`` of ``}]}``), so the exact
#: test runs only on the few that may (docs/performance.md).
MAY_END: Final = b"F"


def ends_stream(chunk: bytes) -> bool:
    """Whether ``chunk``, the last one sent, ends with the stream's last event: the client has
    the whole answer."""
    return chunk[-4:-3] < MAY_END and chunk.endswith(ENDINGS)


def event_boundary(last: bytes) -> bytes:
    """What to write before the error event so that it starts a new SSE event."""
    if last.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
        return b""
    if last.endswith((b"\n", b"\r")):
        return b"\n"
    return b"\n\n"


@dataclass(frozen=True, slots=True)
class RelayResult:
    """How a relay ended: ``served``, or the late failure / disconnect that ended it; and the
    chunks it sent (how many, and the last two: where a stream's final ``usage`` is)."""

    bytes_relayed: int
    reason: Reason
    chunks: int = 0
    before_last: bytes = b""
    last: bytes = b""


class Progress(Protocol):
    """What the relay tells the request (its
    :class:`~asgi_router.responses.request_context.RequestContext`): the bytes and chunks sent
    (current even when the relay is cancelled), the last chunk sent (kept current per chunk: the
    one look at whether the stream's end went out, made only when a disconnect asks), and that
    the response is complete."""

    bytes_relayed: int
    chunks_relayed: int
    last_sent: bytes

    def complete(self) -> None: ...


class Sent:
    """What the client has been sent over a response's life (however many calls fed it): bytes,
    chunks, the last two chunks; and the one place a :class:`RelayResult` is made from it."""

    __slots__ = ("before_last", "bytes", "chunks", "last")

    def __init__(self) -> None:
        self.bytes = self.chunks = 0
        self.before_last = self.last = b""

    def result(self, reason: Reason) -> RelayResult:
        return RelayResult(self.bytes, reason, self.chunks, self.before_last, self.last)

    def told(self, progress: Progress) -> None:
        """The request learns what was sent (also when the relay is cancelled)."""
        progress.bytes_relayed, progress.chunks_relayed = self.bytes, self.chunks


@dataclass(frozen=True, slots=True)
class Break:
    """How one call's stream ended, when not at its end: what was raised (``None``: a read
    overran ``idle`` or ``total``), and whether the attempt's ``total`` had run out."""

    failure: Exception | None
    past_total: bool

    def reason(self, candidate: str) -> Reason:
        """The reason the break is recorded with."""
        return "timeout" if self.failure is None else late_reason(self.failure, candidate)


async def relay_call(
    send: Send,
    committed: Committed,
    clock: Callable[[], float],
    sent: Sent,
    tail: LastChunks | Tail | None,
    progress: Progress,
    whole: WholeEvents | None = None,
) -> Break | None:
    """Relay ``committed``'s stream, its first bytes included, until it ends (``None``) or breaks.

    Byte-exact (the chunks held for commit sent as they came), or cut into whole events by
    ``whole`` (the first bytes as one). ``sent``, ``tail`` and ``progress`` learn each chunk sent.
    """
    chunks = committed.response.chunks
    translation = committed.translation
    deadline = committed.deadline
    held_for_commit = deque(committed.parts) if committed.parts and whole is None else None
    data = held_for_commit.popleft() if held_for_commit else committed.body
    failure: Exception | None = None
    # Kept in locals while relaying, written back on the way out (docs/performance.md).
    size, count, before_last, last = sent.bytes, sent.chunks, sent.before_last, sent.last
    try:
        with reading(idle=committed.provider.timeouts.idle, deadline=deadline, clock=clock) as reads:
            while True:
                if whole is not None and data:
                    if whole.held or data[-2:] != b"\n\n":  # the unfinished event waits for its end
                        data = whole.cut(data)
                    if data and whole.splice is not None:
                        data = whole.splice.feed(data)
                    if data:
                        whole.events.append(data)
                if data:
                    await send({"type": "http.response.body", "body": data, "more_body": True})
                    size += len(data)
                    count += 1
                    before_last = last
                    last = progress.last_sent = data
                    if tail is not None:
                        tail.add(data)
                if failure is not None:
                    break
                if held_for_commit:
                    data = held_for_commit.popleft()
                    continue
                try:
                    with reads:
                        data = await chunks.__anext__()  # no anext() wrapper held while idle
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    failure = exc
                    break
                if translation is not None:
                    data = translation.feed(data)
                    if translation.failure is not None:
                        failure = UpstreamSaid(*translation.failure)
    finally:
        sent.bytes, sent.chunks, sent.before_last, sent.last = size, count, before_last, last
    if reads.expired:
        return Break(None, clock() >= deadline)
    if failure is None and translation is not None and not translation.finished:
        failure = UpstreamSaid("", "the upstream's stream ended before message_stop")
    return None if failure is None else Break(failure, clock() >= deadline)


async def end_with_error(
    send: Send, sent: Sent, reason: Reason, text: str, candidate: str, error_event: Callable[[str, Reason, str], bytes]
) -> None:
    """End the response with the in-band error (on an event boundary), and no end-of-stream."""
    body = event_boundary(sent.last) + error_event(candidate, reason, text)
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def relay_stream(
    send: Send,
    committed: Committed,
    headers: list[tuple[bytes, bytes]],
    clock: Callable[[], float],
    tail: LastChunks | Tail | None,
    progress: Progress,
    error_event: Callable[[str, Reason, str], bytes] = stream_error_event,
) -> RelayResult:
    """Send the response start and relay ``committed`` byte-exact; a break ends it in-band.

    ``progress`` learns the bytes and chunks sent (kept current even when the relay is cancelled:
    the client left, so the request's log line says how much it did receive, and an estimate
    counts what it was sent) and the last chunk sent, and is told once the response's last
    message has been sent (a disconnect after it is no abort). ``error_event`` writes the
    in-band error in the route's protocol.
    """
    sent = Sent()
    try:
        try:
            await send({"type": "http.response.start", "status": committed.response.status, "headers": headers})
            del headers  # sent: not held for the stream's life
            broke = await relay_call(send, committed, clock, sent, tail, progress)
            if broke is not None and not ends_stream(sent.last):  # after the end, nothing is lost
                reason = broke.reason(committed.candidate.key)
                text = failure_text(broke.failure, reason, broke.past_total)
                await end_with_error(send, sent, reason, text, committed.candidate.key, error_event)
                progress.complete()
                return sent.result(reason)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            progress.complete()
        except OSError:  # the ASGI server says the client is gone (ASGI spec 2.4)
            return sent.result("served" if ends_stream(sent.last) else "client_disconnected")
        return sent.result("served")
    finally:
        sent.told(progress)
        closing = close_response(committed.response)
        if closing is not None:
            await closing


async def send_whole(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """Send a complete response: one start (with its length) and one body message."""
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
