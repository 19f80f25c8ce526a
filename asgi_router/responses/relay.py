"""Relay a committed upstream's stream to the client: one read loop, two ways of cutting it.

Once ``http.response.start`` has gone out there is no failover (sent bytes cannot be recalled).
:func:`relay_stream` relays the stream, cut one of two ways:

* **byte-exact** (every plan without a candidate that may continue a broken stream: ``resume =
  "none"``, the default): unparsed, unbuffered, each chunk as it came (a UTF-8 character split
  across chunks stays split);
* **whole events** (:class:`~asgi_router.responses.whole_events.WholeEvents`, for a plan that may
  continue the stream): each chunk up to its last event boundary, the tail held until its event
  completes, so a break never leaves half an event at the client. A :class:`Continuer`
  (``resume_relay.py``) is told of each break and may hand the relay another call to relay on,
  in the same stream; the relay decides nothing about it.

A translated stream (a chat completion answered by an Anthropic provider) is the one exception
to "unparsed": each chunk read is fed to the committed attempt's
:class:`~asgi_router.protocols.from_anthropic.StreamTranslation` and what it gives back is sent
at once (re-encoded as it arrives, never buffered). An ``error`` event, or an upstream that ends
before ``message_stop``, is a break like a cut connection.

A stream is whole only once its *finish* went out (a chat chunk's ``finish_reason``, a
``message_delta``'s ``stop_reason``): a body that ends before it, however cleanly, is a break
(unless it is no event stream at all: a server that ignored ``stream`` is relayed as it came). One
that ends or breaks after it lacks only its usage and terminator: the relay writes the terminator
(``data: [DONE]``, ``message_stop``) and the answer is ``served``. Both are asked only at the
stream's end, of its last two chunks, or of the short chunks it ended in, joined as they came
(``protocols/stream_end.py``; per chunk, one length test). A byte-exact stream whose end follows
an upstream's error event there (``data: {"error": ...}``, then ``data: [DONE]``) reaches the
client as sent, and is recorded as the break it is: the event's start is looked for in its last
three chunks and the short ones joined, so an upstream may cut it (or its end from it) anywhere
but into four or more long pieces. On a
stream that may be continued, an upstream's error event, or an event whose data opens no JSON
object, is a break where it stands (``whole_events.breaks_at``), and an unfinished event held past
``max_event_bytes`` ends the stream (``upstream_5xx``: no client reads an event that size). What
was sent is kept to be read back at a break within a bound; past it the break is not continued.

A break nothing continues ends the response with one in-band
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
the last chunk sent on the request's state, and only when something asks (the client left, a
send failed, the upstream broke) is that chunk tested
(:func:`~asgi_router.protocols.stream_end.ended`).
The result (:class:`RelayResult`, made in one place) names the last two
chunks sent (where a stream's final ``usage`` is) and how many there were; a ``tail``
(:class:`~asgi_router.attempts.usage.LastChunks`, or a continued stream's
:class:`~asgi_router.attempts.usage.Tail`), when given, keeps references to more of the last
chunks sent (where an upstream whose writes arrive in pieces states its usage), so that token
usage can be read *after* the stream has ended.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import NamedTuple, Protocol

from starlette.types import Send

from asgi_router.attempts.outcomes import Committed
from asgi_router.attempts.usage import LastChunks, Tail
from asgi_router.core.deadlines import reading
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import stream_error_event
from asgi_router.core.upstream_errors import UpstreamError
from asgi_router.protocols.openai_responses_events import ResponsesEnd
from asgi_router.protocols.stream_end import (
    PIECE,
    PIECES_KEPT,
    end_window,
    ended,
    ends_stream,
    terminator,
    upstream_error_in,
    went_out_finished,
)
from asgi_router.request.request_state import RequestState
from asgi_router.responses.relay_failures import EVENT_TOO_LONG, UpstreamSaid, failure_text, late_reason
from asgi_router.responses.whole_events import Spliced, WholeEvents, breaks_at
from asgi_router.transports.transport import close_response

__all__ = [
    "Continuer",
    "RelayResult",
    "event_boundary",
    "relay_stream",
    "send_whole",
]


def event_boundary(last: bytes) -> bytes:
    """What to write before the error event so that it starts a new SSE event."""
    if last.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
        return b""
    if last.endswith((b"\n", b"\r")):
        return b"\n"
    return b"\n\n"


class RelayResult(NamedTuple):
    """How a relay ended: ``served``, or the late failure / disconnect that ended it; and the
    chunks it sent (how many, and the last two: where a stream's final ``usage`` is)."""

    bytes_relayed: int
    reason: Reason
    chunks: int = 0
    before_last: bytes = b""
    last: bytes = b""


class Continuer(Protocol):
    """What may continue a stream after a break (``resume_relay.py``), asked by the relay at each
    break it cannot leave be: the relay reports, the continuer decides."""

    #: The largest unfinished event held, and the most bytes of events kept to read back what
    #: was said (:class:`~asgi_router.responses.whole_events.WholeEvents`).
    bounds: tuple[int, int]

    async def after_break(
        self, broken: Committed, reason: Reason, stalled_past_total: bool, said: bytes, silence: float = 0.0
    ) -> tuple[Committed, Spliced] | None:
        """The call that continues ``broken``'s stream and how to rewrite its events, or
        ``None``; ``said``: every complete event the client has; ``silence``: seconds the
        upstream had sent nothing when it broke."""

    def ended(self, served: bool) -> None:
        """The stream ended: finished (``served``), or with the in-band error."""


def _result(reason: Reason, size: int, count: int, before_last: bytes, last: bytes) -> RelayResult:
    """The one place a relay's result is made."""
    return RelayResult(size, reason, count, before_last, last)


def _joined(pieces: bytes, before_last: bytes, last: bytes) -> bytes:
    """The bytes just before a short chunk, contiguous, at most about ``PIECES_KEPT``: ``pieces``
    already ends with any short chunk sent (``last`` or ``before_last``), so it goes on from
    there; after two long chunks, those two."""
    if len(last) < PIECE:
        return pieces[-PIECES_KEPT:]
    if len(before_last) < PIECE:
        return pieces[-PIECES_KEPT:] + last
    return before_last[-PIECES_KEPT:] + last


def _ends_whole(committed: Committed, before_last: bytes, last: bytes, pieces: bytes) -> bool:
    """Whether a stream whose body ended cleanly after ``before_last``, ``last`` (and ``pieces``,
    :func:`~asgi_router.protocols.stream_end.end_window`) ended whole:
    with its terminator, or it is no event stream at all (a server that ignored ``stream``: not
    ours to judge). One that ended before its finish is cut short, however cleanly it closed."""
    return ends_stream(last) or ended(end_window(before_last, last, pieces)) or not _event_stream(committed)


def _event_stream(committed: Committed) -> bool:
    """Whether ``committed``'s answer says it is an event stream (one that is not, from a server
    that ignored ``stream``, is not ours to judge)."""
    for name, value in committed.response.raw_headers:
        if name.lower() == b"content-type":
            return b"event-stream" in value
    return True


async def relay_stream(
    send: Send,
    committed: Committed,
    headers: list[tuple[bytes, bytes]],
    clock: Callable[[], float],
    tail: LastChunks | Tail | None,
    progress: RequestState,
    error_event: Callable[[str, Reason, str], bytes] = stream_error_event,
    continuer: Continuer | None = None,
    ends: ResponsesEnd | None = None,
) -> RelayResult:
    """Send the response start, then relay ``committed``'s stream until it ends or breaks.

    Byte-exact (the chunks held for commit sent as they came), or, with a ``continuer``, cut
    into whole events (the first bytes as one) and continued after a break when it says so.
    ``progress`` learns the bytes and chunks sent (kept current even when the relay is cancelled:
    the client left, so the request's log line says how much it did receive, and an estimate
    counts what it was sent) and the last chunk sent, and is told once the response's last
    message has been sent (a disconnect after it is no abort). ``error_event`` writes the
    in-band error in the route's protocol. ``ends`` (a Responses stream's) is fed every chunk
    sent: such a stream is whole once its last event went out, and has no terminator to write.
    """
    whole = None if continuer is None else WholeEvents(*continuer.bounds)
    current = committed
    # Kept in locals while relaying, given to ``progress`` on the way out (docs/performance.md).
    size = count = 0
    third = before_last = last = pieces = b""
    began = 0.0
    try:
        try:
            await send({"type": "http.response.start", "status": committed.response.status, "headers": headers})
            del headers  # sent: not held for the stream's life
            while True:  # a pass per call feeding the stream: the committed one, then any continuation
                chunks = current.response.chunks
                translation = current.translation
                deadline = current.deadline
                held_for_commit = deque(current.parts) if current.parts and whole is None else None
                data = held_for_commit.popleft() if held_for_commit else current.body
                failure: Exception | None = None
                with reading(math.inf, current.provider.timeouts.idle, deadline, clock) as reads:  # per read only
                    while True:
                        if whole is not None and data:
                            if whole.holding or data[-2:] != b"\n\n":  # the unfinished event waits for its end
                                data = whole.cut(data)
                                if whole.overflowed:  # no client reads an event that size
                                    failure = UpstreamSaid("", EVENT_TOO_LONG, "upstream_5xx")
                            if data and whole.splice is not None:
                                data = whole.splice.feed(data)
                            at, why = breaks_at(data)
                            if at >= 0:  # an error event, or one no client reads: a break
                                data = data[:at]
                                failure = UpstreamSaid("", why)
                            if data:
                                whole.sent(data)
                        if data:
                            await send({"type": "http.response.body", "body": data, "more_body": True})
                            size += len(data)
                            count += 1
                            if len(data) < PIECE and not ends_stream(data):  # a piece of its end, maybe
                                pieces = _joined(pieces, before_last, last) + data
                            third, before_last = before_last, last
                            last = progress.last_sent = data
                            if tail is not None:
                                tail.add(data)
                            if ends is not None:
                                ends.feed(data)
                        if failure is not None:
                            break
                        if held_for_commit:
                            data = held_for_commit.popleft()
                            continue
                        if whole is not None:  # when the read began: how long a cut came after a silence
                            began = clock()
                        reads.start()
                        try:
                            data = await chunks.__anext__()  # no anext() wrapper held while idle
                        except StopAsyncIteration:
                            break
                        except Exception as exc:
                            failure = exc
                            break
                        reads.done()  # a slow client is backpressure, not upstream idleness
                        if translation is not None:
                            data = translation.feed(data)
                            if translation.failure is not None:
                                failure = UpstreamSaid(*translation.failure)
                if failure is None and not reads.expired:
                    if translation is not None and not translation.finished:
                        failure = UpstreamSaid("", "the upstream's stream ended before message_stop")
                    elif whole is not None and whole.held.strip():
                        failure = UpstreamSaid("", "the upstream's stream ended inside an event")
                    elif ends is not None:
                        if ends.said or not _event_stream(current):
                            break  # its end
                        failure = UpstreamSaid("", "the upstream's stream ended before response.completed")
                    elif translation is not None or _ends_whole(current, before_last, last, pieces):
                        break  # its end
                    else:
                        failure = UpstreamSaid("", "the upstream's stream ended before its finish")
                if ends is not None:  # a Responses stream: whole only with its last event
                    if ends.said:
                        break
                elif ends_stream(last):  # the client has the whole answer: nothing is lost
                    break
                window = end_window(before_last, last, pieces)
                if ends is None and ended(window):
                    break
                if ends is None and went_out_finished(window):  # all but the terminator: the router writes it
                    end = event_boundary(last) + terminator(progress.anthropic)
                    await send({"type": "http.response.body", "body": end, "more_body": True})
                    size += len(end)
                    last = end
                    if whole is not None:
                        whole.drop_held()
                    break
                reason: Reason = "timeout" if failure is None else late_reason(failure, current.candidate.key)
                past_total = clock() >= deadline
                if whole is not None and continuer is not None:
                    stalled_past_total = past_total and failure is None
                    said = whole.said()  # None: too long to continue
                    silence = clock() - began if isinstance(failure, UpstreamError) else 0.0  # a read's
                    continued = (
                        None
                        if said is None
                        else await continuer.after_break(current, reason, stalled_past_total, said, silence)
                    )
                    if continued is not None:
                        closing = close_response(current.response)
                        if closing is not None:
                            await closing
                        current, splice = continued
                        whole.continued(splice)
                        continue
                    continuer.ended(served=False)
                text = failure_text(failure, reason, past_total)
                body = event_boundary(last) + error_event(current.candidate.key, reason, text)
                await send({"type": "http.response.body", "body": body, "more_body": False})
                progress.complete()
                return _result(reason, size, count, before_last, last)
            if whole is not None and whole.holding:  # ended without a final blank line: its last event as it is
                held = whole.held
                await send({"type": "http.response.body", "body": held, "more_body": True})
                size += len(held)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            progress.complete()
            if continuer is not None:
                continuer.ended(served=True)
        except OSError:  # the ASGI server says the client is gone (ASGI spec 2.4)
            whole_answer = (
                ends.said if ends is not None else ends_stream(last) or ended(end_window(before_last, last, pieces))
            )
            if whole_answer and continuer is not None:
                continuer.ended(served=True)
            if not whole_answer:
                return _result("client_disconnected", size, count, before_last, last)
        # A byte-exact stream's error event followed by its end went out as sent (nothing is
        # recalled, nothing added after the end): a break all the same, whether the end came in
        # its own chunk or the client left after reading it. Its last chunks are searched joined
        # (once a request), since an upstream may cut the event, or its end from it, anywhere.
        if (
            whole is None
            and translation is None
            and ends is None
            and upstream_error_in(pieces + third + before_last + last)
        ):
            return _result("stream_interrupted", size, count, before_last, last)
        return _result("served", size, count, before_last, last)
    finally:
        progress.bytes_relayed, progress.chunks_relayed = size, count
        closing = close_response(current.response)
        if closing is not None:
            await closing


async def send_whole(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """Send a complete response: one start (with its length) and one body message."""
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
