"""Relaying a stream that may be continued after a break: whole events only, then one stream.

Used instead of :func:`~asgi_router.responses.relay.relay_stream` when (and only when) the plan
has a candidate whose ``resume`` is not ``"none"`` and the request can be continued at all
(chat completions, ``n`` of 1, no ``logprobs``). Two things differ from the byte-exact relay:

* **Whole events.** Each chunk is sent up to its last event delimiter (a blank line); the tail
  after it is held until the event completes. A scan for the delimiter, not a parse: this is
  the only per-chunk cost beside the byte-exact relay's own (what is sent is kept too, to read
  the text so far at a break: one list append). So when the upstream breaks, the client never
  has half an event, and the continuation's events can follow on an event boundary.
* **Continuation.** When the stream breaks (``stream_interrupted``) or stalls (the ``idle``
  timeout; not ``total``) before its end, the events sent so far are read
  (:func:`~asgi_router.protocols.continuation.said_so_far`, or
  :func:`~asgi_router.protocols.continuation_messages.said_in_messages` on ``/v1/messages``);
  plain text is asked to be
  continued (:class:`~asgi_router.responses.resuming.StreamResumer`), and the first candidate
  that commits is relayed on, its events rewritten into the same stream
  (:class:`~asgi_router.protocols.continuation.Splice`): one ``id``, one ``created``, one
  finish, one usage, one ``data: [DONE]`` (on ``/v1/messages``, one message). Up to
  ``max_resumes`` breaks are continued; past them, or when nothing can continue, the client gets
  the in-band error the byte-exact relay writes, naming the break (never a refused
  continuation's 400).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from starlette.types import Send

from asgi_router.attempts.outcomes import Committed
from asgi_router.attempts.usage import Tail
from asgi_router.core.deadlines import Deadline, bounding
from asgi_router.core.reasons import Reason
from asgi_router.protocols.continuation import Said
from asgi_router.protocols.stream_end import ends_stream
from asgi_router.request.request_state import RequestState
from asgi_router.responses.relay import RelayResult, UpstreamSaid, event_boundary, late_reason
from asgi_router.responses.resuming import Spliced, StreamResumer
from asgi_router.transports.transport import close_response

__all__ = ["complete_events", "relay_resumable"]


def complete_events(data: bytes) -> int:
    """Where the complete events of ``data`` end: just past its last blank line (0: none)."""
    at = data.rfind(b"\n\n")
    cut = at + 2 if at >= 0 else 0
    if b"\r" in data:  # CRLF line ends: a blank line is \r\n\r\n
        crlf = data.rfind(b"\r\n\r\n")
        if crlf >= 0 and crlf + 4 > cut:
            cut = crlf + 4
    return cut


class _Sent:
    """What the client has been sent: bytes, chunks, the last two chunks, and the events (kept to
    read the text so far at a break)."""

    __slots__ = ("before_last", "bytes", "chunks", "events", "last")

    def __init__(self) -> None:
        self.bytes = self.chunks = 0
        self.before_last = self.last = b""
        self.events: list[bytes] = []


async def relay_resumable(
    send: Send,
    committed: Committed,
    headers: list[tuple[bytes, bytes]],
    clock: Callable[[], float],
    resumer: StreamResumer,
    error_event: Callable[[str, Reason, str], bytes],
    tail: Tail | None,
    progress: RequestState,
    within: Deadline | None = None,
) -> tuple[RelayResult, Committed]:
    """Relay ``committed`` whole event by whole event, continuing it after a break; the result
    and the call that ended the stream (``committed`` itself when it was never continued).
    ``progress`` and ``within`` (where each read is bounded) as
    :func:`~asgi_router.responses.relay.relay_stream`'s."""
    if within is None:
        within = bounding()
        if within is None:  # outside a request's scope: a scope of its own to bound the reads in
            with Deadline() as own:
                return await relay_resumable(send, committed, headers, clock, resumer, error_event, tail, progress, own)
            raise AssertionError("unreachable: the block has no cancellation of its own")  # pragma: no cover
    sent = _Sent()
    current = committed
    splice: Spliced | None = None
    held = b""
    try:
        try:
            await send({"type": "http.response.start", "status": committed.response.status, "headers": headers})
            del headers
            while True:
                failure, expired, total, held = await _relay_one(
                    send, current, clock, sent, held, splice, tail, progress, within
                )
                if ends_stream(sent.last):  # the client has the whole answer: nothing is lost
                    break
                if failure is None and not expired:
                    if not held.strip():
                        break
                    failure = UpstreamSaid("", "the upstream's stream ended inside an event")
                reason: Reason = "timeout" if failure is None else late_reason(failure, current.candidate.key)
                said = resumer.said(b"".join(sent.events)) if resumer.may_continue(reason, total) else None
                continued = None
                if isinstance(said, Said):
                    continued = await resumer.resume(current, reason, said.text)
                if continued is None:
                    resumer.failed()
                    detail = _detail(failure, reason, total)
                    body = event_boundary(sent.last) + error_event(current.candidate.key, reason, detail)
                    await send({"type": "http.response.body", "body": body, "more_body": False})
                    progress.complete()
                    return _result(sent, reason), current
                closing = close_response(current.response)
                if closing is not None:
                    await closing
                current, held = continued.committed, b""
                assert isinstance(said, Said)
                splice = resumer.splice(said, continued.skip)
            if held:  # an upstream that ended without a final blank line: its last event as it is
                await send({"type": "http.response.body", "body": held, "more_body": True})
                sent.bytes += len(held)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            progress.complete()
            resumer.served()
        except OSError:  # the ASGI server says the client is gone (ASGI spec 2.4)
            ended = ends_stream(sent.last)
            if ended:
                resumer.served()
            return _result(sent, "served" if ended else "client_disconnected"), current
        return _result(sent, "served"), current
    finally:
        progress.bytes_relayed = sent.bytes
        closing = close_response(current.response)
        if closing is not None:
            await closing


async def _relay_one(
    send: Send,
    committed: Committed,
    clock: Callable[[], float],
    sent: _Sent,
    held: bytes,
    splice: Spliced | None,
    tail: Tail | None,
    progress: RequestState,
    within: Deadline,
) -> tuple[Exception | None, bool, bool, bytes]:
    """Relay one call's stream, its first bytes (``committed.body``) included, whole events only
    (``held``: the unfinished event before it), each read bounded in ``within``; ``(failure, idle
    or total expired, total ran out, the unfinished event held at its end)``."""
    chunks = committed.response.chunks
    translation = committed.translation
    idle, deadline = committed.provider.timeouts.idle, committed.deadline
    failure: Exception | None = None
    data = committed.body
    events = sent.events
    # Kept in locals while relaying (as the byte-exact relay does), written back on the way out.
    count, before_last, last, size = sent.chunks, sent.before_last, sent.last, sent.bytes
    expired = False  # whether a read overran its bound (idle or total), which cut it short
    try:
        try:  # each read bounded in the request's scope (core/deadlines.py): no scope of its own
            while True:
                if data:
                    # The hold-back: up to the last blank line goes out, the rest waits for its end.
                    # A chunk that ends on a blank line (nearly every one) is sent whole.
                    if held:
                        data, held = held + data, b""
                    if data[-2:] != b"\n\n":
                        cut = complete_events(data)
                        held, data = data[cut:], data[:cut]
                    if data and splice is not None:
                        data = splice.feed(data)
                    if data:
                        await send({"type": "http.response.body", "body": data, "more_body": True})
                        size += len(data)
                        count += 1
                        before_last = last
                        last = progress.last_sent = data
                        events.append(data)
                        if tail is not None:
                            tail.add(data)
                if failure is not None:
                    break
                left = deadline - clock()
                within.bound(idle if idle < left else left)  # not min(): a builtin call per chunk is dear
                try:
                    data = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    failure = exc
                    break
                within.lift()  # a slow client is backpressure, not upstream idleness
                if translation is not None:
                    data = translation.feed(data)
                    if translation.failure is not None:
                        failure = UpstreamSaid(*translation.failure)
        except asyncio.CancelledError:  # where a scope's exit would take its own back
            if not within.unbound():  # not the bound's: the client left, the server cancels
                raise
            expired = True
    finally:
        sent.chunks, sent.before_last, sent.last, sent.bytes = count, before_last, last, size
        within.unbound()  # however the loop ends, its last read is no longer bounded
    if failure is None and translation is not None and not translation.finished and not expired:
        failure = UpstreamSaid("", "the upstream's stream ended before message_stop")
    return failure, expired, expired and clock() >= deadline, held


def _detail(failure: Exception | None, reason: Reason, total: bool) -> str:
    if isinstance(failure, UpstreamSaid):
        return str(failure)
    if reason == "router_error":
        return "the router failed; see the server log"
    if reason != "timeout":
        return "upstream connection broke"
    return "the attempt's total timeout ran out" if total else "no data within the idle timeout"


def _result(sent: _Sent, reason: Reason) -> RelayResult:
    return RelayResult(sent.bytes, reason, sent.chunks, sent.before_last, sent.last)
