"""Relaying a stream that may be continued after a break: whole events, then one stream.

Used instead of :func:`~asgi_router.responses.relay.relay_stream` when (and only when) the plan
has a candidate whose ``resume`` is not ``"none"`` and the request can be continued at all
(chat completions, ``n`` of 1, no ``logprobs``). The same relay runs
(:func:`~asgi_router.responses.relay.relay_call`), cutting the stream into whole events
(:class:`~asgi_router.responses.whole_events.WholeEvents`), so that when the upstream breaks the
client never has half an event and a continuation's events can follow on an event boundary.

When the stream breaks (``stream_interrupted``) or stalls (the ``idle`` timeout; not ``total``)
before its end, the events sent so far are read
(:func:`~asgi_router.protocols.continuation.said_so_far`, or
:func:`~asgi_router.protocols.continuation_messages.said_in_messages` on ``/v1/messages``);
plain text is asked to be continued (:class:`~asgi_router.responses.resuming.StreamResumer`),
and the first candidate that commits is relayed on, its events rewritten into the same stream
(:class:`~asgi_router.protocols.continuation.Splice`): one ``id``, one ``created``, one finish,
one usage, one ``data: [DONE]`` (on ``/v1/messages``, one message). Whether a break may be
continued at all is one question (:func:`_continuable`); past ``max_resumes``, or when nothing
can continue, the client gets the in-band error the byte-exact relay writes, naming the break
(never a refused continuation's 400).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import Send

from asgi_router.attempts.outcomes import Committed
from asgi_router.attempts.usage import Tail
from asgi_router.core.reasons import Reason
from asgi_router.protocols.continuation import Said
from asgi_router.responses.relay import Break, Progress, RelayResult, Sent, end_with_error, ends_stream, relay_call
from asgi_router.responses.relay_failures import UpstreamSaid, failure_text
from asgi_router.responses.resuming import StreamResumer
from asgi_router.responses.whole_events import WholeEvents
from asgi_router.transports.transport import close_response

__all__ = ["relay_resumable"]


def _continuable(resumer: StreamResumer, reason: Reason, broke: Break, events: WholeEvents) -> Said | None:
    """The text said so far, when a break of ``reason`` may be asked to be continued: a break or
    a stall (not one past the attempt's ``total``) of a plain-text answer, resumes left."""
    if reason not in ("stream_interrupted", "timeout"):
        return None
    if broke.failure is None and broke.past_total:
        return None
    said = resumer.said(events.said())
    return said if isinstance(said, Said) and resumer.can_resume() else None


async def relay_resumable(
    send: Send,
    committed: Committed,
    headers: list[tuple[bytes, bytes]],
    clock: Callable[[], float],
    resumer: StreamResumer,
    error_event: Callable[[str, Reason, str], bytes],
    tail: Tail | None,
    progress: Progress,
) -> tuple[RelayResult, Committed]:
    """Relay ``committed`` whole event by whole event, continuing it after a break; the result
    and the call that ended the stream (``committed`` itself when it was never continued).
    ``progress`` as :func:`~asgi_router.responses.relay.relay_stream`'s."""
    sent = Sent()
    events = WholeEvents()
    current = committed
    try:
        try:
            await send({"type": "http.response.start", "status": committed.response.status, "headers": headers})
            del headers
            while True:
                broke = await relay_call(send, current, clock, sent, tail, progress, events)
                if ends_stream(sent.last):  # the client has the whole answer: nothing is lost
                    break
                if broke is None:
                    if not events.held.strip():
                        break
                    broke = Break(UpstreamSaid("", "the upstream's stream ended inside an event"), False)
                reason = broke.reason(current.candidate.key)
                said = _continuable(resumer, reason, broke, events)
                continued = None if said is None else await resumer.resume(current, reason, said.text)
                if continued is None or said is None:
                    resumer.failed()
                    text = failure_text(broke.failure, reason, broke.past_total)
                    await end_with_error(send, sent, reason, text, current.candidate.key, error_event)
                    progress.complete()
                    return sent.result(reason), current
                closing = close_response(current.response)
                if closing is not None:
                    await closing
                current = continued.committed
                events.continued(resumer.splice(said, continued.skip))
            if events.held:  # an upstream that ended without a final blank line: its last event as it is
                await send({"type": "http.response.body", "body": events.held, "more_body": True})
                sent.bytes += len(events.held)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            progress.complete()
            resumer.served()
        except OSError:  # the ASGI server says the client is gone (ASGI spec 2.4)
            ended = ends_stream(sent.last)
            if ended:
                resumer.served()
            return sent.result("served" if ended else "client_disconnected"), current
        return sent.result("served"), current
    finally:
        sent.told(progress)
        closing = close_response(current.response)
        if closing is not None:
            await closing
