"""Answering the client with what a request's attempts came to.

The attempt loop decides (``attempts/``); this module sends: the winner's response, whole or
relayed chunk by chunk (``relay.py``), a refusal passed through, a group's canned reply
(``degraded.py``), or the router's error (``error_reply.py``). Then what the response used is
counted: tokens and cost for budgets, prices, metrics and traces (``attempts/bookkeeping.py``),
and the winner's attempt event. It is the pipeline's *answer* phase: what it learns (status,
winner, bytes, spend) goes on the request's
:class:`~asgi_router.request.request_state.RequestState`, from which the record is built once
the request is over. It holds the committed attempt's gate lease until the relay ends, and
finishes it as ``client_disconnected`` if the relay never does (it was cancelled, or crashed).
It runs no attempts: a committed stream the attempts can continue after a break arrives with
what continues it (``attempts/continuing.py``), which the relay reports each break to.

Token counting keeps as little as it needs, and does nothing per chunk: an upstream states a
stream's usage in its last events (OpenAI's usage chunk, Anthropic's ``message_delta``) and, for
Anthropic's prompt, its first (``message_start``). Budgets, prices and caller caps count every
response (estimated when it reports no usage: the prompt's estimate is kept, and the relay's count
of chunks), reading the chunks held for commit and the last few the relay sent
(:class:`~asgi_router.attempts.usage.LastChunks`); metrics and traces report only usage an upstream
stated, in the two chunks the relay names anyway. A continued stream (``resume``) keeps a
:class:`~asgi_router.attempts.usage.Tail` of its last bytes instead, its calls' events being
rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from asgi_router.attempts.bookkeeping import Bookkeeper
from asgi_router.attempts.outcomes import Committed, Refused
from asgi_router.attempts.response_affinity import ResponseAffinity
from asgi_router.attempts.usage import LAST_CHUNKS, LastChunks, Tail, response_model
from asgi_router.config.degraded_settings import DegradedSettings
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import RouterError, stream_error_event
from asgi_router.inbound.body import InboundRequest
from asgi_router.observability.events import Outcome
from asgi_router.protocols.anthropic_errors import anthropic_stream_error_event
from asgi_router.protocols.chat_to_responses import ResponsesStream
from asgi_router.protocols.openai_responses_events import ResponsesEnd, responses_stream_error
from asgi_router.request.request_state import RequestState
from asgi_router.request.router_headers import add_router_headers
from asgi_router.request.spend import Spend
from asgi_router.responses.degraded import degraded_reply, should_degrade
from asgi_router.responses.error_reply import send_error
from asgi_router.responses.headers import relayed_headers
from asgi_router.responses.relay import RelayResult, relay_stream, send_whole
from asgi_router.responses.resume_relay import relay_resumable
from asgi_router.responses.resuming import StreamResumer
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan

__all__ = ["Answer"]


class Answer:
    """Sends a request's answer and accounts for it: one per router, called once per request."""

    __slots__ = ("_book", "_clock", "_responses")

    def __init__(self, book: Bookkeeper, clock: Callable[[], float], responses: ResponseAffinity | None = None) -> None:
        self._book = book
        self._clock = clock
        #: Where a relayed Responses answer's id is remembered with its producer (``None``: no
        #: Responses route).
        self._responses = responses

    async def __call__(
        self,
        state: RequestState,
        plan: Plan,
        request: InboundRequest,
        facts: RequestFacts,
        result: Committed | Refused | RouterError,
    ) -> None:
        """Answer the client with what the attempts came to: the winner's response (whole or
        relayed), a refusal passed through, the group's canned reply, or the error."""
        if isinstance(result, RouterError):
            attempts = state.attempts()
            degraded = plan.policy.degraded if plan.policy is not None else None
            if degraded is not None and should_degrade(result.status):
                await self._send_degraded(state, degraded, request.stream, attempts)
                return
            await send_error(state, result, attempts)
            return
        if isinstance(result, Refused):
            headers, dropped = relayed_headers(result.headers)
            if dropped:
                state.dropped(result.candidate.key, dropped)
            add_router_headers(headers, state, result.candidate.key, result.attempts)
            state.status = result.status
            await send_whole(state.send_tracked, result.status, headers, result.body)
            return
        stream = request.stream
        winner = result.candidate.key
        if result.response_id is not None and self._responses is not None:  # a follow-up comes back here
            self._responses.remember(result.response_id, winner, state.principal)
        tail: LastChunks | Tail | None = None
        spend: Spend | None = None
        resumer: StreamResumer | None = None
        try:
            upstream_headers = result.response.raw_headers
            relayed, dropped = relayed_headers(upstream_headers)
            headers = add_router_headers(relayed, state, winner, result.attempts)
            state.status = result.response.status
            state.winner = winner
            if state.trace is not None:  # the winner's span reports its model and usage
                state.trace.response_model = response_model(result.body)
            # Budgets, prices and caps count every response (estimated when it reports no usage):
            # the prompt's estimate is kept. Metrics and traces only report usage (module docstring).
            estimate = self._book.needs_estimate(winner)
            wants_tokens = estimate or self._book.counts_all or state.trace is not None
            if not stream:
                state.response_started = True  # as for the relay: sent through the server's send
                await send_whole(state.send, result.response.status, headers, result.body)
                state.bytes_relayed = len(result.body)
                # The winner's statistics released; what it used kept for the record.
                spend = state.spend = self._book.finished(winner, facts, result.body if wants_tokens else None)
                self._note_served(state, result, "served", spend)
                if dropped:
                    state.dropped(winner, dropped)
                return
            if result.continues is not None:  # the attempts continue it after a break
                resumer = StreamResumer(result.continues, state, facts, result)
            # Committed: nothing reads the request again but the token estimate; free the rest
            # for the relay's whole life (RSS per open stream). A continuation keeps the payload
            # (the facts read the same one, so keeping them costs nothing, and their estimate is
            # made only if a continuation or the bookkeeping asks for it).
            if resumer is None:
                facts.release(keep_estimate=estimate)
            request.release()
            state.response_started = True
            state.in_flight = (winner, result.started)
            error_event = anthropic_stream_error_event if state.anthropic else stream_error_event
            ends = None
            if state.kind == "responses":  # its own in-band error, and its own last event
                translated = result.translation
                said = translated.response_id if isinstance(translated, ResponsesStream) else result.response_id
                error_event, ends = partial(responses_stream_error, said), ResponsesEnd()
            final = result
            if resumer is None:
                recent = tail = LastChunks(maxlen=LAST_CHUNKS) if estimate else None
                relay = relay_stream(state.send, result, headers, self._clock, recent, state, error_event, None, ends)
                # Not held for the stream's life (the relay drops its own once the start is sent):
                # guarded by the bench's RSS per open idle stream.
                del headers, upstream_headers, relayed
                outcome = await relay
            else:
                resumed = tail = Tail() if estimate else None
                resuming = relay_resumable(
                    state.send, result, headers, self._clock, resumer, error_event, resumed, state
                )
                del headers, upstream_headers, relayed
                outcome, final = await resuming
            state.in_flight = None
            if outcome.reason == "client_disconnected":
                state.disconnected = True
            spend = state.spend = self._book.finished(
                final.candidate.key,
                facts,
                *_streamed_usage(final, tail, outcome if wants_tokens else None, outcome.chunks),
            )
            if final is not result and spend.tokens is not None:  # two calls' usage, one estimated
                spend = state.spend = spend._replace(tokens=spend.tokens._replace(measured=False))
            self._note_served(state, final, outcome.reason, spend, resumer is None or resumer.evented is not final)
            if dropped:
                state.dropped(winner, dropped)
        finally:
            if spend is None:  # cancelled (the client left): still finish, release and count it
                if resumer is not None:
                    result = resumer.current
                if result.lease is not None:  # held until the relay ends: it never did
                    result.lease.finish("client_disconnected")
                state.spend = self._book.finished(
                    result.candidate.key, facts, *_streamed_usage(result, tail, None, state.chunks_relayed)
                )

    async def _send_degraded(
        self, state: RequestState, degraded: DegradedSettings, stream: bool, attempts: int
    ) -> None:
        """Every candidate failed and the group has a canned reply: send it, marked as such."""
        headers, body = degraded_reply(degraded, state.request_id, state.ref, stream, state.anthropic)
        state.status = 200
        state.degraded = True
        add_router_headers(headers, state, None, attempts)
        await send_whole(state.send_tracked, 200, headers, body)

    def _note_served(
        self, state: RequestState, committed: Committed, reason: Reason, spend: Spend, event: bool = True
    ) -> None:
        if committed.lease is not None:
            committed.lease.finish(reason)  # a late failure counts against the candidate
        if not event:  # evented at its break already (``attempts/continuing.py``)
            return
        outcome: Outcome = (
            "served" if reason == "served" else "aborted" if reason == "client_disconnected" else "failed"
        )
        state.event(
            committed.candidate.key,
            outcome,
            reason,
            committed.response.status,
            self._clock() - committed.started,
            committed.ttfb,
            spend.cost_usd,
        )


def _streamed_usage(
    committed: Committed, tail: LastChunks | Tail | None, relayed: RelayResult | None, chunks: int
) -> tuple[bytes | None, int | None]:
    """What a relayed stream of ``chunks`` chunks used, for the bookkeeper: a translated stream's
    usage as its upstream counted it (in OpenAI's words); else the bytes where a stream states its
    usage: a continued stream's :class:`Tail`; where an estimate may be needed, the chunks held
    for commit (Anthropic states the prompt in its first event) and the relay's last few
    (:class:`LastChunks`, kept even when the relay was cancelled); else the two the relay names
    (``relayed``); ``None`` when nothing is counted."""
    if tail is None and relayed is None:
        return None, None
    translation = committed.translation
    if translation is not None and translation.finished:
        prompt, completion, read, written = translation.usage
        usage = b'{"usage":{"prompt_tokens":%d,"completion_tokens":%d' % (prompt, completion)
        if read or written:
            usage += b',"prompt_tokens_details":{"cached_tokens":%d,"cache_write_tokens":%d}' % (read, written)
        return usage + b"}}", chunks
    if isinstance(tail, Tail):
        return tail.bytes(), tail.chunks
    if tail is not None:  # the held chunks were sent first: those among the last ones are not repeated
        return committed.body + tail.after(chunks - (len(committed.parts) if committed.parts else 1)), chunks
    assert relayed is not None
    return relayed.before_last + relayed.last, chunks
