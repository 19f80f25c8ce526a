"""One upstream call: send a candidate's request and report what came back, before any client byte.

This module does I/O and reports; it decides nothing about what comes next (``decisions.py``
does). The one question it asks the decision point is how to read a non-2xx answer: whole, to
pass it through, or bounded, to refine its reason and find its retry hint.

Commit rules:

* streaming: a 2xx *and* its first real event within ``first_byte``: one that carries content,
  a tool call, a finish or an error (``asgi_router.protocols.first_event``). Role-only deltas,
  ``message_start``, ``ping`` and SSE comments are held (at most ``max_response_bytes``) and
  sent at commit. A 200 that then says nothing is a timeout, one that ends before a real event
  is ``stream_interrupted`` (one that says its end, ``[DONE]`` or ``message_stop``, before
  anything a client shows is an empty answer: ``upstream_5xx``), and one whose first real
  event is an error fails over as the status that error names (and counts for breakers as
  that status would).
* non-streaming: a 2xx whose whole body (at most ``max_response_bytes``) was read; a body that
  breaks or stalls (``idle``) is a failure like any other, still before the first client byte.

A non-2xx answer's body is read (bounded, by the first-byte time) so that its connection can be
reused and its words refine the reason (``asgi_router.core.classify``): a 429 that says
``insufficient_quota`` is ``billing``, a 400 that says the prompt exceeded *this* model's
context window is ``context_window`` (the next model's window may be larger). An answer the
decision point passes through (by default only ``client_error``) is reported as
:class:`Refused`, kept whole for the client.

A translated attempt (a chat completion sent to an Anthropic provider) commits by the same
rules, on the *translated* answer: a stream commits once its events have translated to
something a client can show (content, a tool call, the end), so an ``error`` event before that
(Anthropic's ``overloaded_error`` after a 200) fails over like the status it stands for; a whole
body commits once it has translated to a ``chat.completion`` (one that does not is
``upstream_5xx``); a refusal is passed through in OpenAI's error shape.

Every response that is not handed on is closed here, also on cancellation. An attempt's time
limits (first byte, ``idle``, ``total``) bound its reads as one
:func:`~asgi_router.core.deadlines.reading` block, not a timer per read: timed by the request's
own scope when the attempt runs in the request's task, by a scope of its own when it runs in a
task of its own (a hedge's racer) or outside a request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Final

from asgi_router.attempts.context import AttemptContext
from asgi_router.attempts.hints import retry_hint
from asgi_router.attempts.outcomes import Attempted, Committed, Failed, Ready, Refused
from asgi_router.core.candidate import Candidate
from asgi_router.core.classify import (
    HINTED,
    UnrecognisedFailure,
    classify_exception,
    classify_status,
    refine_client_error,
    refine_rate_limited,
)
from asgi_router.core.deadlines import Reads, reading
from asgi_router.core.reasons import Reason
from asgi_router.core.route_paths import RouteKind
from asgi_router.core.upstream_errors import UpstreamBroken
from asgi_router.observability.events import logger
from asgi_router.protocols.anthropic_errors import openai_error_from_anthropic, status_of_error_type
from asgi_router.protocols.chat_to_responses import ResponsesStream, response_from_completion
from asgi_router.protocols.first_event import REAL, FirstEvent, shows_text
from asgi_router.protocols.from_anthropic import StreamTranslation, completion_from_message
from asgi_router.protocols.openai_responses_events import (
    ResponsesFirstEvent,
    failed_body,
    response_id_in,
    responses_refusal,
    status_of_code,
)
from asgi_router.transports.transport import UpstreamResponse, close_response

__all__ = ["call", "read_to_end"]

# The protocols whose streams are always read event by event up to their commit point (a chat
# stream's first chunk usually shows text: a byte test answers for it).
_PARSED: Final = frozenset({"messages", "responses"})
# A failover response's body is read (so its connection can be reused) up to this size.
_FAILURE_BODY_CAP: Final = 64 * 1024


async def read_to_end(chunks: AsyncIterator[bytes], parts: list[bytes], limit: int, reads: Reads) -> bytes | None:
    """Append the remaining chunks to ``parts`` and join them; ``None`` past ``limit`` bytes.

    Each read is one of ``reads`` (within its ``idle``, before its ``deadline``); one that
    overruns cuts the caller's block short.
    """
    size = 0
    for part in parts:
        size += len(part)
    if size > limit:  # the first chunk alone may be over it
        return None
    while True:
        try:
            chunk = await reads.next(chunks)
        except StopAsyncIteration:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)


async def call(
    context: AttemptContext,
    ready: Ready,
    url: str,
    headers: dict[str, str],
    stream: bool,
    failover_on: frozenset[Reason],
    attempts: int,
    commit_by: float,
    translation: StreamTranslation | ResponsesStream | None = None,
    events: RouteKind | None = None,
    echo: dict[str, Any] | None = None,
) -> Attempted:
    """Call ``ready``'s upstream once; never raises but for cancellation (the caller accounts).

    ``translation`` translates a streamed answer (a translated non-streaming one is translated
    whole, here too); an answer relayed as it is (``events`` says which protocol it is in;
    ``None``: a translated one) commits, streamed, once an event a client shows has come (the
    commit point); a Responses answer also once it is not a failure. ``echo``: a Responses
    request answered by chat completions (its settings, stated back in the whole answer)."""
    candidate, provider, lease, started = ready.candidate, ready.provider, ready.lease, ready.started
    timeouts = provider.timeouts
    clock = context.clock
    # Until commit, the request's deadline caps the attempt; the relay has the attempt's own.
    relay_deadline = started + timeouts.total
    deadline = min(relay_deadline, commit_by)
    # Until the first body byte, every read (a failure's body included) must end by this.
    first_byte_by = min(started + timeouts.first_byte, deadline)
    response: UpstreamResponse | None = None
    handed_off = False
    try:
        # Up to the first byte, the whole stretch within first_byte; after it, each read within
        # idle. The client leaving or a lost hedge race cancels the request or the racer's task
        # instead: not the block's, so it goes on.
        with reading(first_byte_by - clock(), timeouts.idle, first_byte_by, clock) as reads:
            sending = context.transport.send(provider, url, headers, ready.body)
            # The headers are the transport's now (aiohttp copies them): not held across the
            # wait for the upstream, nor is the finished send after it.
            del headers
            response = await sending
            del sending
            lease.responded()
            status = response.status
            reason = classify_status(status)
            if reason != "served":
                unserved = await _unserved(context, candidate, response, reason, failover_on, attempts, reads)
                target = ready.target
                return _in_openai_shape(unserved) if target.translated and target.responses_via != "chat" else unserved
            chunks = response.chunks
            held: tuple[bytes, ...] | None = None
            response_id: str | None = None
            if translation is None:
                try:  # the first non-empty chunk (b"": none before the end)
                    first = await anext(chunks)
                    while not first:
                        first = await anext(chunks)
                except StopAsyncIteration:
                    first = b""
                if first and stream and events is not None and (events in _PARSED or not shows_text(first)):
                    reader = (
                        ResponsesFirstEvent() if events == "responses" else FirstEvent(anthropic=events == "messages")
                    )
                    held, verdict = await _first_real(chunks, reader, context.max_response_bytes, first)
                    first = held[0] if len(held) == 1 else b"".join(held)
                    if verdict is not None and verdict != REAL:  # an error before anything to show
                        if isinstance(reader, ResponsesFirstEvent) and reader.failure is not None:
                            return _responses_failed(
                                context, candidate, status, verdict, reader.failure, failover_on, attempts
                            )
                        return Failed(classify_status(verdict), status)
                    if isinstance(reader, ResponsesFirstEvent):
                        response_id = reader.response_id
                    if verdict is None:
                        first = b""  # it ended (or outgrew the limit) before saying anything
            else:
                first = await _first_translated(chunks, translation)
                if translation.failure is not None:  # an error event before anything to show
                    return Failed(classify_status(status_of_error_type(translation.failure[0])), status)
                if translation.empty:  # it stopped before anything to show: an empty answer
                    return Failed("upstream_5xx", status, ttfb=clock() - started)
            ttfb = clock() - started
            if not first:
                return Failed("stream_interrupted", status, ttfb=ttfb)
            if not stream:
                limit = context.max_response_bytes
                if response.drained:  # all of it came with the first chunk
                    whole: bytes | None = first if len(first) <= limit else None
                else:
                    reads.deadline = deadline  # the body after its first byte: the attempt's own
                    whole = await read_to_end(chunks, [first], limit, reads)
                if whole is not None and ready.target.translated:
                    if ready.target.responses_via != "chat":
                        whole = completion_from_message(whole)
                    if whole is not None and echo is not None:
                        whole = response_from_completion(whole, echo)
                if whole is None:
                    return Failed("upstream_5xx", status, ttfb=ttfb)
                if events == "responses":  # a 200 may still say the response failed
                    failure = failed_body(whole)
                    if failure is not None:
                        verdict = status_of_code(failure[0])
                        return _responses_failed(context, candidate, status, verdict, failure, failover_on, attempts)
                    response_id = response_id_in(whole)
                first = whole
            handed_off = True
            return Committed(
                candidate,
                response,
                first,
                provider,
                started,
                relay_deadline,
                ttfb,
                attempts,
                translation=translation,
                parts=held if held is not None and len(held) > 1 and stream else None,
                response_id=response_id,
            )
        # Only reached when a read overran its time and cut the block short.
        return Failed("timeout", response.status if response else None)
    except Exception as exc:
        try:
            return Failed(classify_exception(exc), response.status if response else None)
        except UnrecognisedFailure:
            # The router's own failure (its client, or a bug), not the upstream's: not retried,
            # and counted against no breaker or statistic (classify.py).
            logger.exception("the router failed calling %s; not retried", candidate)
            return Failed("router_error", response.status if response else None, fatal=True)
    finally:
        if response is not None and (not handed_off or not stream):
            closing = close_response(response)  # closed even when cancelled: never leak it
            if closing is not None:
                await closing


async def _first_translated(chunks: AsyncIterator[bytes], translation: StreamTranslation | ResponsesStream) -> bytes:
    """What the stream's first events translate to, once it can be shown (``b""``: the stream
    ended or broke first, or an error event came: :attr:`~StreamTranslation.failure` says so)."""
    out = b""
    try:
        async for chunk in chunks:
            out += translation.feed(chunk)
            if translation.ready or translation.failure is not None:
                break
    except UpstreamBroken:  # it broke after its 200: as a relayed stream that breaks
        return b""
    return out if translation.ready else b""


async def _first_real(
    chunks: AsyncIterator[bytes], first_event: FirstEvent | ResponsesFirstEvent, limit: int, first: bytes
) -> tuple[tuple[bytes, ...], int | None]:
    """The stream's chunks from ``first`` up to its first real event, and
    :meth:`FirstEvent.feed`'s verdict (``None``: the stream ended, broke once it had begun, or
    held more than ``limit`` bytes first: ``stream_interrupted``, as a stream that ends empty is)."""
    parts = [first]
    verdict = first_event.feed(first)
    if verdict is not None:
        return (first,), verdict
    size = len(first)
    if size <= limit:
        try:
            async for chunk in chunks:
                if not chunk:
                    continue
                parts.append(chunk)
                verdict = first_event.feed(chunk)
                if verdict is not None:
                    return tuple(parts), verdict
                size += len(chunk)
                if size > limit:
                    break
        except UpstreamBroken:
            return (), None
    if parts and size <= limit and not first_event.saw_events:  # not an event stream: as it came
        return tuple(parts), REAL
    return (), None


def _responses_failed(
    context: AttemptContext,
    candidate: Candidate,
    status: int,
    verdict: int,
    failure: tuple[str, str],
    failover_on: frozenset[Reason],
    attempts: int,
) -> Failed | Refused:
    """A Responses answer that said it failed before anything a client shows: failed over as the
    status its code stands for, or, when that is the client's own error the decision point passes
    through (``invalid_prompt``), refused in OpenAI's error shape with that status (``status``: the
    answer's own, a 200)."""
    reason = classify_status(verdict)
    code, message = failure
    if context.decisions.passes_through(reason, failover_on):
        body = responses_refusal(code, message)
        return Refused(candidate, verdict, ((b"content-type", b"application/json"),), body, attempts, reason)
    return Failed(reason, status)


def _in_openai_shape(result: Failed | Refused) -> Failed | Refused:
    """A translated attempt's refusal, passed through to an OpenAI client in OpenAI's error shape."""
    if isinstance(result, Refused):
        result.body = openai_error_from_anthropic(result.body)
    return result


async def _unserved(
    context: AttemptContext,
    candidate: Candidate,
    response: UpstreamResponse,
    reason: Reason,
    failover_on: frozenset[Reason],
    attempts: int,
    reads: Reads,
) -> Failed | Refused:
    """A non-2xx answer: read its body (in ``reads``: by the first-byte time), as the decision
    point says it is to be used: refined and failed over, or kept to be passed through."""
    status = response.status
    passes_through = context.decisions.passes_through
    if not passes_through(reason, failover_on):
        failure = await read_to_end(response.chunks, [], _FAILURE_BODY_CAP, reads)
        reason, retry_after = _read_failure(reason, response.raw_headers, failure, context.max_rate_limit_reset)
        return Failed(reason, status, retry_after)
    refusal = await read_to_end(response.chunks, [], context.max_response_bytes, reads)
    if refusal is None:
        return Failed("upstream_5xx", status)
    if reason == "client_error":
        reason, words = _read_refusal(status, refusal)
        if not passes_through(reason, failover_on):
            return Failed(reason, status, words=words)
    return Refused(candidate, status, response.raw_headers, refusal, attempts, reason)


# Reading what a failure says (its body, its hint headers) only refines what its status already
# decided, so a bug there must not make the failure fatal (an exception out of an attempt that
# the tables do not know is the router's own error, with no failover): it is logged, and the
# status alone decides.


def _read_failure(
    reason: Reason, headers: Sequence[tuple[bytes, bytes]], body: bytes | None, longest: float
) -> tuple[Reason, float | None]:
    """A failed-over answer's refined reason and its retry hint (at most ``longest``); never raises."""
    try:
        if reason == "rate_limited":
            reason = refine_rate_limited(body)
        limited = reason == "rate_limited"
        return reason, retry_hint(headers, body, rate_limited=limited, longest=longest) if reason in HINTED else None
    except Exception:
        logger.exception("could not read a %s answer's body or headers; its status decides", reason)
        return reason, None


def _read_refusal(status: int, body: bytes) -> tuple[Reason, str | None]:
    """A ``client_error``'s refined reason and the provider's words; never raises."""
    try:
        return refine_client_error(status, body)
    except Exception:
        logger.exception("could not read a %d answer's body; passed through as it is", status)
        return "client_error", None
