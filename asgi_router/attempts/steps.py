"""One request's pass over its plan: the steps of trying one candidate, and the record of them.

:class:`RequestAttempts` holds what the pass has done so far (wire body, summaries, attempt
count, what is left of its budgets) and does each step the same way whoever drives it: the
plain loop in :meth:`~asgi_router.attempts.loop.AttemptLoop.run`, or the hedging race
(``hedging.py``) for groups that hedge. It decides nothing itself: every admission and every
"what next" is the decision point's (``decisions.py``), asked with the pass's numbers. The
steps:

* :meth:`~RequestAttempts.prepare` looks up the candidate's provider and body builder (the
  request is translated once per request, when the first Anthropic candidate is reached:
  ``asgi_router.protocols``; a body its provider's prompt cache wants changed is built once,
  ``cache_bodies.py``), asks the decision point to admit it, and events a skip. An
  admitted candidate holds a gate lease.
* :meth:`~RequestAttempts.candidates` is the plan's order as the decision point gives it (slow
  candidates after the others).
* :meth:`~RequestAttempts.attempt` calls it (``call.py``; the lease learns when the upstream
  answered), and accounts for a call that was cancelled (the client left, a lost hedge race).
* :meth:`~RequestAttempts.settle` finishes the lease with the attempt's reason (a committed
  stream's lease is finished by the relay's end, so late failures count), events and accounts
  for the result, and returns the decision point's answer; :meth:`~RequestAttempts.outcome`
  turns that into the pass's outcome, if it is decided.

Both the loop and this class read the router's parts from one public
:class:`~asgi_router.attempts.context.AttemptContext`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from asgi_router.attempts.cache_bodies import CacheBodies
from asgi_router.attempts.call import call
from asgi_router.attempts.context import AttemptContext
from asgi_router.attempts.decisions import COMMIT, PASS_THROUGH, FailOver, Next, Stop
from asgi_router.attempts.held_stream import HeldResponse, hold
from asgi_router.attempts.outcomes import Attempted, Committed, Failed, Ready, Refused
from asgi_router.attempts.request_answers import pinned_error, stateless_error
from asgi_router.attempts.retry_state import RetryState
from asgi_router.attempts.wire_body import SplicedBody, WireBody
from asgi_router.core.candidate import Candidate
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import AttemptSummary, RouterError, exhausted_error
from asgi_router.core.skip import Skip
from asgi_router.guardrails.guardrail_run import GuardSet, caller_name
from asgi_router.inbound.body import InboundRequest
from asgi_router.observability.events import Outcome
from asgi_router.protocols.cache_marks import add_breakpoints, may_carry_marks
from asgi_router.protocols.chat_to_responses import ResponsesStream, echo_of
from asgi_router.protocols.from_anthropic import StreamTranslation
from asgi_router.protocols.responses_to_chat import to_chat_request, without_strict
from asgi_router.protocols.to_anthropic import Untranslatable, include_usage, to_messages_request
from asgi_router.request.request_state import RequestState
from asgi_router.routing.facts import CHARS_PER_TOKEN, RequestFacts
from asgi_router.routing.plan import Plan
from asgi_router.transports.provider import PromptCaching, RouteTarget
from asgi_router.transports.transport import close_response

if TYPE_CHECKING:  # only a router whose tracing is on passes one (opentelemetry is optional)
    pass

__all__ = ["RequestAttempts"]


class RequestAttempts:
    """One request's pass over its plan: each step of trying one candidate, and what came of it.

    Steps: :meth:`prepare` (skip or get :class:`Ready`), :meth:`attempt` (call it),
    :meth:`settle` (finish its lease, event it; the decision point's answer: commit, pass
    through, retry, fail over, stop) and :meth:`outcome`. The hedging race adds
    :meth:`discard` for attempts it gives up on.
    """

    __slots__ = (
        "_body",
        "_caches",
        "_chat",
        "_context",
        "_inbound",
        "_marked",
        "_path",
        "_payload",
        "_quiet",
        "_request",
        "_stream",
        "_summaries",
        "_trace",
        "_translated",
        "_wire",
        "admitted",
        "attempts",
        "deadline",
        "facts",
        "failover_on",
        "plan",
        "retry",
        "state",
        "stopped",
    )

    def __init__(
        self,
        context: AttemptContext,
        plan: Plan,
        request: InboundRequest,
        state: RequestState,
        facts: RequestFacts,
        deadline: float,
        retry: RetryState,
        *,
        quiet: bool = False,
    ) -> None:
        self._context = context
        #: A queued request's re-check: its skips go to the error lines, not to the events.
        self._quiet = quiet
        self._request = request
        #: Called once a candidate is admitted (a queued request leaves its queue then, not
        #: once its call is over: the next in line may find room meanwhile).
        self.admitted: Callable[[], None] | None = None
        #: The request's trace, when a tracer provider is set: each call is a span of it.
        self._trace = state.trace
        self.plan = plan
        #: The reasons that move on to the next candidate (the group's, or the default).
        self.failover_on = plan.failover_on
        # Each candidate's body: the client's bytes with the model spliced in where the parse
        # located it, else the payload serialised once (wire.py).
        span = request.model_span
        self._wire = SplicedBody(request.body, span) if span is not None else WireBody(request.payload)
        # For translated candidates: the request translated once per ``default_max_tokens`` (and
        # per target protocol, for a Responses request), on first use (most plans have none).
        self._payload = request.payload
        self._translated: dict[tuple[int, bool, str], WireBody | Untranslatable] | None = None
        # A Responses request translated to chat completions, on first use (both protocols read it).
        self._chat: dict[str, Any] | Untranslatable | None = None
        # For OpenAI-protocol candidates whose prompt cache wants the body changed: made on first use.
        self._caches: CacheBodies | None = None
        # Whether the body may carry prompt cache marks (``None``: not asked yet): asked only
        # when a candidate's provider has a prompt cache (docs/performance.md).
        self._marked: bool | None = None
        self._body = request.body
        self._stream = request.stream
        #: The URL path asked for: each provider's target for it.
        self._path = state.path
        #: The client's headers: each provider's upstream headers allow some of them through.
        self._inbound: Sequence[tuple[bytes, bytes]] = state.scope["headers"]
        #: The request's state: its events, and the attempt in flight.
        self.state = state
        self.facts = facts
        #: Monotonic time by which a candidate must have committed (``RouterSettings.deadline``).
        self.deadline = deadline
        #: The request's retry state: every admission and every "what next" is asked of it.
        self.retry = retry
        # Both lists are made on first use: most requests never fail or skip a candidate.
        self._summaries: list[AttemptSummary] | None = None
        #: Attempts started so far, retries included (skips are not attempts).
        self.attempts = 0
        #: Set once ``max_attempts`` or the deadline stopped the pass: nothing more is tried.
        self.stopped = False

    @property
    def inbound(self) -> Sequence[tuple[bytes, bytes]]:
        """The client's headers."""
        return self._inbound

    def again(self, plan: Plan, *, quiet: bool) -> RequestAttempts:
        """A fresh pass over ``plan`` (the request planned again) for the same request, within the
        same deadline (a queued request's walk at the head); ``quiet``: its skips are not evented."""
        self.retry.replanned(plan)
        return RequestAttempts(
            self._context,
            plan,
            self._request,
            self.state,
            self.facts,
            self.deadline,
            self.retry,
            quiet=quiet,
        )

    def candidates(self) -> Sequence[Candidate]:
        """The plan's candidates in the order to try them: the slow ones after the others."""
        return self._context.decisions.order(self.plan.candidates)

    def prepare(self, candidate: Candidate, *, force: bool = False, retry: bool = False) -> Ready | None:
        """The candidate ready to call, or ``None`` when the decision point skips it (evented).

        ``force`` admits it through an open breaker (the all-open fallback); ``retry`` says it
        is asked again in place.
        """
        if self.stopped:
            return None
        context = self._context
        provider = context.providers.get(candidate.provider)
        target: RouteTarget | str | None = None
        wire: SplicedBody | WireBody | str | None = None
        if provider is not None and provider.configured:
            target = provider.targets.get(self._path)
            if isinstance(target, RouteTarget) and not target.translated:  # the usual case: the body as sent
                caching = target.caching
                if caching is None or (caching.cache_key_header is None and not self._may_be_marked()):
                    wire = self._wire  # nothing for the provider's prompt cache to change
                else:
                    wire = self._cache_wire(caching)
            else:
                wire = self._wire_for(target, provider.default_max_tokens)
        admitted = self.retry.admit(candidate, provider, wire, self.attempts, force=force, in_place=retry)
        key = candidate.key
        if isinstance(admitted, Skip):
            self.skip(key, admitted)
            if admitted.stops:
                self.stopped = True
            return None
        assert provider is not None and isinstance(target, RouteTarget)
        assert wire is not None and not isinstance(wire, str)
        body = wire.for_model(candidate.model_id)
        if not wire.targets(body, candidate.model_id):  # pragma: no cover - defence in depth
            admitted.finish("router_error")
            raise AssertionError(f"target guard: wire body does not name {candidate}")
        if self.admitted is not None:
            self.admitted()
        return Ready(candidate, key, provider, target, body, admitted)

    def _may_be_marked(self) -> bool:
        """Whether the body may carry prompt cache marks: one search of its bytes, on first use
        (a body the router built itself, a continuation's, has none to search: its payload is
        walked)."""
        if self._marked is None:
            body = self._body
            self._marked = not body or may_carry_marks(body)
        return self._marked

    def _cache_wire(self, caching: PromptCaching) -> SplicedBody | WireBody:
        """The body builder for an OpenAI-protocol candidate whose prompt cache may want the body
        changed (it may carry marks, or the provider takes a cache key)."""
        caches = self._caches
        if caches is None:
            caches = self._caches = CacheBodies(self._payload, self._inbound, self._wire)
        return caches.for_target(caching)

    def _wire_for(self, target: RouteTarget | str | None, max_tokens: int) -> WireBody | str:
        """The body builder for a candidate whose ``target`` is translated, or why it has none
        (a target in the route's own protocol sends the request's own body). The provider's
        prompt cache may want breakpoints on a long prefix (``protocols/cache_marks.py``)."""
        if not isinstance(target, RouteTarget):
            return target or "the provider does not serve this route"
        if self._translated is None:
            self._translated = {}
        breakpoints = target.caching is not None and target.caching.breakpoints
        via = target.responses_via or ""
        wire = self._translated.get((max_tokens, breakpoints, via))
        if wire is None:
            translated = self._to_chat() if via else self._payload
            if via != "chat" and not isinstance(translated, Untranslatable):
                translated = to_messages_request(without_strict(translated) if via else translated, max_tokens)
            if isinstance(translated, Untranslatable):
                wire = translated
            else:
                if breakpoints:
                    add_breakpoints(translated, CHARS_PER_TOKEN)
                wire = WireBody(translated)
            self._translated[max_tokens, breakpoints, via] = wire
        return wire.detail if isinstance(wire, Untranslatable) else wire

    def _to_chat(self) -> dict[str, Any] | Untranslatable:
        """The Responses request as chat completions, translated once (``responses_to_chat.py``)."""
        if self._chat is None:
            self._chat = to_chat_request(self._payload)
        return self._chat

    async def attempt(self, ready: Ready) -> Attempted:
        """Call ``ready``'s upstream and count the attempt; a cancelled call is accounted for
        (:meth:`aborted`) before the cancellation goes on."""
        context = self._context
        self.attempts += 1
        trace = self._trace
        # Its span starts with the attempt's clock: the span ends at this start plus the latency
        # measured from ``started``, so it never outlasts the attempt into the next one's span.
        began = time.time_ns() if trace is not None else 0
        ready.started = context.clock()
        self.state.in_flight = (ready.key, ready.started)
        context.book.started(ready.key, self.facts)
        target = ready.target
        headers = target.head.build(self._inbound, self.state.request_id)
        translation: StreamTranslation | ResponsesStream | None = None
        echo = None
        if target.translated:
            if target.responses_via is not None:  # a Responses request answered by chat completions
                echo = echo_of(self._payload)
                if self._stream:
                    translation = ResponsesStream(echo, target.responses_via == "messages", context.max_event_bytes)
            elif self._stream:
                translation = StreamTranslation(include_usage(self._payload), context.max_event_bytes)
        # An answer relayed as it is commits on its first real event (streamed; a Responses answer
        # whole too); a translated one already does.
        events = None if target.translated else self.state.kind
        if trace is not None:  # the attempt's span, and its traceparent in the headers
            trace.attempt(ready.key, ready.provider.name, ready.candidate.model_id, target.url, headers, began)
        calling = call(
            context,
            ready,
            target.url,
            headers,
            self._stream,
            self.failover_on,
            self.attempts,
            self.deadline,
            translation,
            events,
            echo,
        )
        del headers  # the call's alone: it lets go of them once sent, before the upstream answers
        try:
            result = await calling
        except BaseException:  # cancelled: the client left, or the attempt lost a hedge race
            self.aborted(ready)
            raise
        guards = self.state.guards
        if guards is not None and guards.output and isinstance(result, Committed):
            if not self._stream:
                return await self._checked(ready, result, guards)
            if guards.buffer:  # the group holds its streams for their output checks
                return await self._held(ready, result, guards)
        return result

    async def _checked(self, ready: Ready, result: Committed, guards: GuardSet) -> Attempted:
        """A whole answer through the request's output guardrails, before it commits: masked,
        refused (the request's error, carried on the committed answer), or failed with
        ``guardrail_failed`` (the decision point fails it over)."""
        state = self.state
        caller = caller_name(state.caller, state.principal)
        checked = await guards.check_output(result.body, self._payload, self._path, caller, ready.key)
        state.guarded(checked.ran)
        if checked.fail_over:
            return Failed("guardrail_failed", result.response.status, ttfb=result.ttfb)
        result.body = checked.body
        result.refusal = checked.error
        return result

    async def _held(self, ready: Ready, result: Committed, guards: GuardSet) -> Attempted:
        """A stream held whole (``output_stream = "buffer"``) through the request's output
        guardrails, before its first byte is sent: as :meth:`_checked`, or failed as a stream
        that could not be read to its end is."""
        context, state = self._context, self.state
        status = result.response.status
        held = await hold(result, context.max_response_bytes, context.clock)
        if isinstance(held, str):
            await _closed(result)
            return Failed(held, status, ttfb=result.ttfb)
        caller = caller_name(state.caller, state.principal)
        checked = await guards.check_stream(held, self._payload, self._path, caller, ready.key)
        state.guarded(checked.ran)
        if checked.fail_over:
            await _closed(result)
            return Failed("guardrail_failed", status, ttfb=result.ttfb)
        result.body, result.parts = checked.body, None
        result.response = HeldResponse(result.response)
        result.refusal = checked.error
        return result

    async def refuse(self, committed: Committed) -> None:
        """Release an answer an output guardrail refused: the upstream served (its lease says
        so), nothing of it is sent, its response is closed."""
        if committed.lease is not None:
            committed.lease.finish("served")
        self._context.book.finished(str(committed.candidate), self.facts, None)
        await _closed(committed)

    def _landed(self, ready: Ready) -> None:
        """``ready``'s call is over: it is no longer the request's attempt in flight."""
        state = self.state
        in_flight = state.in_flight
        if in_flight is not None and in_flight[0] == ready.key:
            state.in_flight = None

    def aborted(self, ready: Ready) -> None:
        """``ready``'s call was cancelled (the client left, or it lost a hedge race): account for it."""
        elapsed = self._context.clock() - ready.started
        ready.lease.finish(ready.cancel_reason)
        self._context.book.failed(ready.key, self.facts, ready.cancel_reason, elapsed, 0.0)

    def settle(self, ready: Ready, result: Attempted, in_place: bool = False) -> Next:
        """Finish, event and account for ``result``, then ask the request's retry state what next.

        ``in_place``: the candidate may be retried in place (the plain loop's, as often as the
        retry state allows). A refused retry is evented here as the answer says;
        :meth:`outcome` turns the answer into the pass's outcome.
        """
        context = self._context
        book = context.book
        self._landed(ready)
        provider = ready.provider.name
        if isinstance(result, Committed):  # its time to first byte is its measure: no clock read
            result.attempts = self.attempts
            book.answered(provider, ready.key, result.response.raw_headers)
            book.committed(ready.key, result.ttfb)
            if self._stream:
                ready.lease.ttfb = result.ttfb  # the slowness rule reads it when the lease is finished
                result.lease = ready.lease  # finished by the relay's end (responses/answer.py)
            else:
                ready.lease.finish("served")
        elif isinstance(result, Refused):
            elapsed = context.clock() - ready.started
            ready.lease.finish(result.reason)
            result.attempts = self.attempts
            book.answered(provider, ready.key, result.headers)
            book.failed(ready.key, self.facts, result.reason, elapsed, 0.0)
            self.state.event(ready.key, "failed", result.reason, result.status, elapsed)
        else:
            elapsed = context.clock() - ready.started
            ready.lease.finish(result.reason)
            book.failed(ready.key, self.facts, result.reason, elapsed, ready.provider.timeouts.first_byte)
            self._note(ready.key, "failed", result, elapsed)
        answer = self.retry.after(result, self.failover_on, ready.candidate, in_place)
        if isinstance(answer, FailOver) and answer.skip is not None:
            self.skip(ready.key, answer.skip)
        return answer

    def outcome(self, answer: Next, result: Attempted) -> Committed | Refused | RouterError | None:
        """The pass's outcome for the decision point's ``answer`` on ``result``; ``None``: go on."""
        if answer is COMMIT or answer is PASS_THROUGH:
            assert not isinstance(result, Failed)
            return result
        if isinstance(answer, Stop):
            if answer.fatal:
                summaries = self._summaries or []
                lines = "\n".join(summary.line() for summary in summaries)
                return RouterError(500, "router_error", lines, tuple(summaries))
            return self.exhausted()
        return None

    async def discard(self, ready: Ready, result: Attempted | None, reason: Reason) -> None:
        """Event an attempt the hedging race gave up on: it lost (``hedge_lost``) or the client left.

        ``result`` is one that finished anyway after the race was decided (e.g. it committed a
        moment after the winner): it is accounted here and a committed response released, as the
        cancelled ones (``result`` None) were by :meth:`attempt`'s own clean-up. Either way its
        lease is finished with ``reason``, which counts neither for nor against its breakers: a
        lost race says nothing about the provider.
        """
        ready.lease.finish(reason)
        self._landed(ready)
        elapsed = self._context.clock() - ready.started
        if result is not None:
            self._context.book.failed(ready.key, self.facts, reason, elapsed, 0.0)
            if isinstance(result, Committed):
                closing = close_response(result.response)
                if closing is not None:
                    await closing
        self._note(ready.key, "aborted", Failed(reason), elapsed, summary=False)

    async def abandon(self, decided: Committed | Refused | RouterError | None) -> None:
        """Release a winner that will never be sent (the client left while the race wound down).

        Its lease is finished, its statistics released and its response closed, as the relay
        would have done; it is evented as ``aborted``.
        """
        if not isinstance(decided, Committed):
            return
        key = str(decided.candidate)
        if decided.lease is not None:
            decided.lease.finish("client_disconnected")
        self._context.book.finished(key, self.facts, None)
        closing = close_response(decided.response)
        if closing is not None:
            await closing
        elapsed = self._context.clock() - decided.started
        self._note(key, "aborted", Failed("client_disconnected", ttfb=decided.ttfb), elapsed, summary=False)

    def oldest_open(self) -> Candidate | None:
        """The candidate the all-open rule tries anyway, if the decision point says so."""
        return self.retry.all_open(self.attempts, self.stopped)

    def capacity_only(self) -> bool:
        """Whether the decision point would have a queued group's request wait: nothing was
        tried only for want of capacity."""
        return self._context.decisions.waits(self.attempts, self.stopped, self._summaries)

    def recheck(self) -> float:
        """Seconds a queued request that found no capacity pauses before it is planned again."""
        return self._context.decisions.recheck(self._summaries)

    def exhausted(self) -> RouterError:
        summaries = self._summaries or []
        if self._context.decisions.stateless_only(summaries):
            return stateless_error(summaries)
        error = exhausted_error(summaries)
        pinned = self.plan.pinned
        return error if pinned is None else pinned_error(error, pinned)

    def skip(self, name: str, skip: Skip) -> None:
        """Event a candidate that was not called."""
        failure = Failed(skip.reason, retry_after=skip.retry_after, skipped=True)
        detail = skip.detail if skip.cause != "slow" else "opened: slow"
        self._note(name, "skipped", failure, 0.0, detail=detail, cause=skip.cause, evented=not self._quiet)

    def _note(
        self,
        name: str,
        outcome: Outcome,
        failure: Failed,
        latency: float,
        *,
        summary: bool = True,
        detail: str | None = None,
        evented: bool = True,
        cause: str | None = None,
    ) -> None:
        if summary:
            if self._summaries is None:
                self._summaries = []
            self._summaries.append(
                AttemptSummary(
                    name, failure.reason, failure.status, failure.retry_after, failure.skipped, detail, failure.words
                )
            )
        if not evented:
            return
        self.state.event(name, outcome, failure.reason, failure.status, latency, failure.ttfb, cause=cause)


async def _closed(committed: Committed) -> None:
    closing = close_response(committed.response)
    if closing is not None:
        await closing
