"""Relay a committed upstream's bytes to the client: unparsed, unbuffered, byte-exact.

This is the default relay, for every plan without a candidate that may continue a broken stream
(``resume = "none"``, the default): once ``http.response.start`` has gone out there is no
failover, since sent bytes cannot be recalled. If the upstream breaks or stalls past ``idle``
after commit, the relay writes one in-band event ``data: {"error": {...}}`` and ends the
response *without* ``data: [DONE]``, so the ``openai`` SDK raises ``APIError`` rather than
returning a truncated answer as if it were whole. A plan with a resumable candidate is relayed by
``resume_relay.py`` instead: whole events only, and a break continued by another call.

Once the stream's last event (``data: [DONE]``, ``message_stop``) has been sent the client has the
whole answer, so a client that closes its connection before the response's final empty message
leaves a ``served`` request, not an abort. Nothing per chunk looks for that end: the relay keeps
the last chunk sent on the request's state, and only when something asks
(the client left, a send failed, the upstream broke) is that chunk tested (:func:`ends_stream`).

Each chunk is awaited into ``send`` before the next one is read: a slow client slows the
upstream read (TCP backpressure end to end), and at most one chunk is held at a time. The
``idle`` and ``total`` limits bound each read (:meth:`Deadline.bound
<asgi_router.core.deadlines.Deadline.bound>` before it, ``lift()`` after it): time spent
waiting on a slow *client* does not count as upstream idleness. The bound is set on the
request's own scope (:func:`~asgi_router.core.deadlines.bounding`) and timed by its one timer:
the relay enters no scope of its own, and a read that overruns is cut short and the bound's
cancellation taken back (``unbound()``), as a scope's exit would. A relay outside a request's
scope enters a :class:`~asgi_router.core.deadlines.Deadline` of its own and bounds its reads in
that.

A translated stream (a chat completion answered by an Anthropic provider) is the one exception
to "unparsed": each chunk read is fed to the committed attempt's
:class:`~asgi_router.protocols.from_anthropic.StreamTranslation` and what it gives back is sent
at once, so it is re-encoded as it arrives, never buffered. An ``error`` event, or an upstream
that ends before ``message_stop``, is a break like a cut connection.

On an Anthropic client's route the in-band error is Anthropic's ``event: error`` (``error_event``
says which shape to write), so the ``anthropic`` SDK raises too.

The only looks at the bytes are at the end: at a break, the last chunk's final bytes say whether
the stream's end already went out (then nothing is lost) and whether the error event needs a blank
line first to start on an event boundary. The result names
the last two chunks sent (where a stream's final ``usage`` is) and how many there were; a
``tail`` (:class:`~asgi_router.attempts.usage.LastChunks`, or a continued stream's
:class:`~asgi_router.attempts.usage.Tail`), when given, keeps references to more of the last chunks
sent (where an upstream whose writes arrive in pieces states its usage), so that token usage can be
read *after* the stream has ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from starlette.types import Send

from asgi_router.attempts.outcomes import Committed
from asgi_router.attempts.usage import LastChunks, Tail
from asgi_router.core.classify import UnrecognisedFailure, classify_exception
from asgi_router.core.deadlines import Deadline, bounding
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import stream_error_event
from asgi_router.observability.events import logger
from asgi_router.protocols.stream_end import ends_stream
from asgi_router.request.request_state import RequestState
from asgi_router.transports.transport import close_response

__all__ = [
    "RelayResult",
    "UpstreamSaid",
    "event_boundary",
    "late_reason",
    "relay_stream",
    "send_whole",
]


@dataclass(frozen=True, slots=True)
class RelayResult:
    """How a relay ended: ``served``, or the late failure / disconnect that ended it; and the
    chunks it sent (how many, and the last two: where a stream's final ``usage`` is)."""

    bytes_relayed: int
    reason: Reason
    chunks: int = 0
    before_last: bytes = b""
    last: bytes = b""


def event_boundary(last: bytes) -> bytes:
    """What to write before the error event so that it starts a new SSE event."""
    if last.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
        return b""
    if last.endswith((b"\n", b"\r")):
        return b"\n"
    return b"\n\n"


class UpstreamSaid(Exception):
    """A translated stream that broke in its own words: an ``error`` event, or an early end."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"the upstream sent {kind}: {message}" if kind else message)


def late_reason(exc: Exception, candidate: str) -> Reason:
    if isinstance(exc, UpstreamSaid):
        return "stream_interrupted"
    try:
        reason = classify_exception(exc)
    except UnrecognisedFailure:  # the router's own failure: not held against the upstream
        logger.exception("the router failed relaying %s", candidate)
        return "router_error"
    return "timeout" if reason == "timeout" else "stream_interrupted"


async def relay_stream(
    send: Send,
    committed: Committed,
    headers: list[tuple[bytes, bytes]],
    clock: Callable[[], float],
    tail: LastChunks | Tail | None,
    progress: RequestState,
    error_event: Callable[[str, Reason, str], bytes] = stream_error_event,
    within: Deadline | None = None,
) -> RelayResult:
    """Send the response start, the first chunk, and every chunk after it as it arrives.

    ``progress`` learns the bytes and chunks sent (kept current even when the relay is cancelled:
    the client left, so the request's log line says how much it did receive, and an estimate
    counts what it was sent) and the last chunk sent, and is told once the response's last
    message has been sent (a disconnect after it is no abort). ``error_event`` writes the
    in-band error in the route's protocol. The reads are bounded in ``within``: the request's
    scope, found when not given; with none, a scope of the relay's own.
    """
    if within is None:
        within = bounding()
        if within is None:  # outside a request's scope: a scope of its own to bound the reads in
            with Deadline() as own:
                return await relay_stream(send, committed, headers, clock, tail, progress, error_event, own)
            raise AssertionError("unreachable: the block has no cancellation of its own")  # pragma: no cover
    response = committed.response
    translation = committed.translation
    chunks = response.chunks
    idle = committed.provider.timeouts.idle
    deadline = committed.deadline
    last = before_last = b""
    sent = count = 0
    try:
        try:
            await send({"type": "http.response.start", "status": response.status, "headers": headers})
            del headers  # sent: not held for the stream's life
            # The first chunk, or the chunks held for commit, as they came.
            for part in committed.parts or (committed.body,):
                await send({"type": "http.response.body", "body": part, "more_body": True})
                sent += len(part)
                count += 1
                before_last, last = last, part
                if tail is not None:
                    tail.add(part)
            progress.last_sent = last
            failure: Exception | None = None
            # Whether a read overran its bound (idle or total), which cut it short.
            expired = False
            # Each read bounded in the request's scope (core/deadlines.py): no scope of its own.
            try:
                while True:
                    left = deadline - clock()
                    within.bound(idle if idle < left else left)  # not min(): a builtin call per chunk is dear
                    try:
                        chunk = await chunks.__anext__()  # no anext() wrapper held while idle
                    except StopAsyncIteration:
                        break
                    except Exception as exc:
                        failure = exc
                        break
                    within.lift()  # a slow client is backpressure, not upstream idleness
                    if translation is not None:
                        chunk = translation.feed(chunk)
                        if translation.failure is not None:
                            failure = UpstreamSaid(*translation.failure)
                    if chunk:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                        sent += len(chunk)
                        count += 1
                        before_last = last
                        last = progress.last_sent = chunk
                        if tail is not None:
                            tail.add(chunk)
                    if failure is not None:
                        break
            except asyncio.CancelledError:  # where a scope's exit would take its own back
                if not within.unbound():  # not the bound's: the client left, the server cancels
                    raise
                expired = True
            finally:
                within.unbound()  # however the loop ends, its last read is no longer bounded
            if failure is None and translation is not None and not translation.finished and not expired:
                failure = UpstreamSaid("", "the upstream's stream ended before message_stop")
            if (failure is not None or expired) and not ends_stream(last):  # after the end, nothing is lost
                reason = "timeout" if failure is None else late_reason(failure, committed.candidate.key)
                detail = (
                    str(failure)
                    if isinstance(failure, UpstreamSaid)
                    else "the router failed; see the server log"
                    if reason == "router_error"
                    else "upstream connection broke"
                    if reason != "timeout"
                    else "the attempt's total timeout ran out"
                    if clock() >= deadline
                    else "no data within the idle timeout"
                )
                await send(
                    {
                        "type": "http.response.body",
                        "body": event_boundary(last) + error_event(committed.candidate.key, reason, detail),
                        "more_body": False,
                    }
                )
                progress.complete()
                return RelayResult(sent, reason, count, before_last, last)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            progress.complete()
        except OSError:  # the ASGI server says the client is gone (ASGI spec 2.4)
            return RelayResult(sent, "served" if ends_stream(last) else "client_disconnected", count, before_last, last)
        return RelayResult(sent, "served", count, before_last, last)
    finally:
        progress.bytes_relayed, progress.chunks_relayed = sent, count
        closing = close_response(response)
        if closing is not None:
            await closing


async def send_whole(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    """Send a complete response: one start (with its length) and one body message."""
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
