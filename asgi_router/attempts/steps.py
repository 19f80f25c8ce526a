"""One request's pass over its plan: the steps of trying one candidate, and what came of them.

:class:`RequestAttempts` holds what the pass has done so far (wire body, summaries, attempt
count, what is left of its budgets) and does each step the same way whoever drives it: the
plain loop in :meth:`~asgi_router.attempts.loop.AttemptLoop.run`, or the hedging race
(``hedging.py``) for groups that hedge. The steps:

* :meth:`~RequestAttempts.prepare` admits a candidate or skips it (a ``skipped`` event):
  ``provider_not_configured``; ``protocol_mismatch`` when the provider does not serve the
  route's protocol or the request has no translation for it (``asgi_router.protocols``: the
  request is translated once per request, when the first Anthropic candidate is reached);
  ``budget_exhausted`` once ``max_attempts`` or the request
  ``deadline`` is reached; the :class:`~asgi_router.attempts.bookkeeping.Bookkeeper`'s
  ``context_window`` and ``over_budget``; then the :class:`~asgi_router.resilience.gate.Gate`'s
  ``circuit_open`` and ``saturated``. An admitted candidate holds a gate lease.
* :meth:`~RequestAttempts.attempt` calls it (``call.py``; the lease learns when the upstream
  answered), and accounts for a call that was cancelled (the client left, a lost hedge race).
* :meth:`~RequestAttempts.settle` finishes the lease with the attempt's reason (a committed
  stream's lease is finished by the relay's end, so late failures count), events and accounts
  for the result, and says whether the pass is decided.

It lives apart from the loop so that each reads as one job: the loop decides the order and the
retries; this class does and records each step. Both read the router's parts from one public
:class:`~asgi_router.attempts.context.AttemptContext`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from asgi_router.attempts.call import call
from asgi_router.attempts.context import AttemptContext
from asgi_router.attempts.outcomes import Attempted, Committed, Failed, Ready, Refused
from asgi_router.attempts.wire_body import SplicedBody, WireBody
from asgi_router.core.candidate import Candidate
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import AttemptSummary, RouterError, exhausted_error
from asgi_router.core.skip import Skip
from asgi_router.inbound.body import InboundRequest
from asgi_router.observability.events import AttemptEvent, Outcome, RequestRecord
from asgi_router.protocols.from_anthropic import StreamTranslation
from asgi_router.protocols.to_anthropic import Untranslatable, include_usage, to_messages_request
from asgi_router.resilience.gate import Lease
from asgi_router.resilience.retry import retry_wait
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan
from asgi_router.transports.provider import RouteTarget
from asgi_router.transports.request_headers import request_headers_for_upstream
from asgi_router.transports.transport import close_response

if TYPE_CHECKING:  # only a router whose tracing is on passes one (opentelemetry is optional)
    from asgi_router.observability.tracing import RequestTrace

__all__ = ["Flight", "RequestAttempts"]


class Flight(Protocol):
    """Where a request keeps the attempt in flight and since when (the middleware's request
    context): if the client leaves meanwhile, that attempt is evented as ``aborted``."""

    in_flight: tuple[str, float] | None


class RequestAttempts:
    """One request's pass over its plan: each step of trying one candidate, and what came of it.

    Steps: :meth:`prepare` (skip or get :class:`Ready`), :meth:`attempt` (call it),
    :meth:`settle` (finish its lease, event it; say whether the pass is decided), then for the
    plain loop :meth:`retry_wait` (ask the same candidate again?). The hedging race adds
    :meth:`discard` for attempts it gives up on.
    """

    __slots__ = (
        "_context",
        "_inbound",
        "_open_skips",
        "_payload",
        "_route",
        "_stream",
        "_summaries",
        "_trace",
        "_translated",
        "_wire",
        "attempts",
        "deadline",
        "facts",
        "failover_on",
        "flight",
        "plan",
        "record",
        "stopped",
    )

    def __init__(
        self,
        context: AttemptContext,
        plan: Plan,
        request: InboundRequest,
        route: str,
        inbound: Sequence[tuple[bytes, bytes]],
        record: RequestRecord,
        flight: Flight,
        facts: RequestFacts,
        deadline: float,
        trace: RequestTrace | None = None,
    ) -> None:
        self._context = context
        #: The request's trace, when a tracer provider is set: each call is a span of it.
        self._trace = trace
        self.plan = plan
        #: The reasons that move on to the next candidate (the group's, or the default).
        self.failover_on = plan.failover_on
        # Each candidate's body: the client's bytes with the model spliced in where the parse
        # located it, else the payload serialised once (wire.py).
        span = request.model_span
        self._wire = SplicedBody(request.body, span) if span is not None else WireBody(request.payload)
        # For Anthropic candidates: the request translated once per ``default_max_tokens``, on
        # first use (most plans have no Anthropic member).
        self._payload = request.payload
        self._translated: dict[int, WireBody | Untranslatable] | None = None
        self._stream = request.stream
        self._route = route
        #: The client's headers: each provider's upstream headers allow some of them through.
        self._inbound = inbound
        self.record = record
        self.flight = flight
        self.facts = facts
        #: Monotonic time by which a candidate must have committed (``RouterSettings.deadline``).
        self.deadline = deadline
        # Both lists are made on first use: most requests never fail or skip a candidate.
        self._summaries: list[AttemptSummary] | None = None
        #: Attempts started so far, retries included (skips are not attempts).
        self.attempts = 0
        #: Set once ``max_attempts`` or the deadline stopped the pass: nothing more is tried.
        self.stopped = False
        #: Candidates skipped for an open breaker, with when it opened.
        self._open_skips: list[tuple[float, Candidate]] | None = None

    def prepare(self, candidate: Candidate, *, force: bool = False, retry: bool = False) -> Ready | None:
        """The candidate ready to call, or ``None`` when it is skipped (the skip is evented).

        ``force`` admits it through an open breaker (the all-open fallback); ``retry`` says it
        is asked again in place.
        """
        if self.stopped:
            return None
        context = self._context
        key = candidate.key
        provider = context.providers.get(candidate.provider)
        if provider is None or not provider.configured:
            unset = provider.missing_key_env if provider is not None else None
            self.skip(key, Skip("provider_not_configured", detail=f"{unset} is not set" if unset else None))
            return None
        target = provider.targets.get(self._route)
        wire = self._wire_for(target, provider.default_max_tokens)
        if isinstance(wire, str):
            self.skip(key, Skip("protocol_mismatch", detail=wire))
            return None
        assert isinstance(target, RouteTarget)
        if self.attempts >= context.policy.max_attempts or context.clock() >= self.deadline:
            self.skip(key, Skip("budget_exhausted"))
            self.stopped = True
            return None
        body = wire.for_model(candidate.model_id)
        if not wire.targets(body, candidate.model_id):  # pragma: no cover - defence in depth
            raise AssertionError(f"target guard: wire body does not name {candidate}")
        admitted: Skip | Lease | None = context.book.admit(key, self.plan.policy, self.facts)
        if admitted is None:
            admitted = context.gate.enter(candidate, force=force)
        if isinstance(admitted, Skip):
            self.skip(key, admitted)
            if admitted.opened_at is not None and not retry:
                if self._open_skips is None:
                    self._open_skips = []
                self._open_skips.append((admitted.opened_at, candidate))
            return None
        return Ready(candidate, key, provider, target, body, admitted)

    def _wire_for(self, target: RouteTarget | str | None, max_tokens: int) -> SplicedBody | WireBody | str:
        """The body builder for a candidate reached through ``target``, or why it has none."""
        if not isinstance(target, RouteTarget):
            return target or "the provider does not serve this route"
        if not target.translated:
            return self._wire
        if self._translated is None:
            self._translated = {}
        wire = self._translated.get(max_tokens)
        if wire is None:
            translated = to_messages_request(self._payload, max_tokens)
            wire = self._translated[max_tokens] = (
                translated if isinstance(translated, Untranslatable) else WireBody(translated)
            )
        return wire.detail if isinstance(wire, Untranslatable) else wire

    async def attempt(self, ready: Ready) -> Attempted:
        """Call ``ready``'s upstream and count the attempt; a cancelled call is accounted for
        (:meth:`aborted`) before the cancellation goes on."""
        context = self._context
        self.attempts += 1
        ready.started = context.clock()
        self.flight.in_flight = (ready.key, ready.started)
        context.book.started(ready.key, self.facts)
        target = ready.target
        headers = request_headers_for_upstream(
            self._inbound, target.headers, self.record.request_id, target.forward, target.defaults
        )
        translation = StreamTranslation(include_usage(self._payload)) if target.translated and self._stream else None
        if self._trace is not None:  # the attempt's span, and its traceparent in the headers
            self._trace.attempt(ready.key, ready.provider.name, ready.candidate.model_id, target.url, headers)
        try:
            return await call(
                context,
                ready,
                target.url,
                headers,
                self._stream,
                self.failover_on,
                self.attempts,
                self.deadline,
                translation,
            )
        except BaseException:  # cancelled: the client left, or the attempt lost a hedge race
            self.aborted(ready)
            raise

    def _landed(self, ready: Ready) -> None:
        """``ready``'s call is over: it is no longer the request's attempt in flight."""
        in_flight = self.flight.in_flight
        if in_flight is not None and in_flight[0] == ready.key:
            self.flight.in_flight = None

    def aborted(self, ready: Ready) -> None:
        """``ready``'s call was cancelled (the client left, or it lost a hedge race): account for it."""
        elapsed = self._context.clock() - ready.started
        ready.lease.finish(ready.cancel_reason)
        self._context.book.failed(ready.key, self.facts, ready.cancel_reason, elapsed, 0.0)

    def settle(self, ready: Ready, result: Attempted) -> Committed | Refused | RouterError | None:
        """Finish, event and account for ``result``; the pass's outcome, or ``None`` to go on."""
        book = self._context.book
        self._landed(ready)
        elapsed = self._context.clock() - ready.started
        if isinstance(result, Committed):
            result.attempts = self.attempts
            book.committed(ready.key, result.ttfb)
            if self._stream:
                result.lease = ready.lease  # finished by the relay's end (``Answer._note_served``)
            else:
                ready.lease.finish("served")
            return result
        ready.lease.finish(result.reason)
        if isinstance(result, Refused):
            result.attempts = self.attempts
            book.failed(ready.key, self.facts, result.reason, elapsed, 0.0)
            self.record.events.append(
                AttemptEvent(
                    self.record.request_id,
                    len(self.record.events),
                    ready.key,
                    "failed",
                    result.reason,
                    result.status,
                    elapsed,
                    principal=self.record.principal,
                )
            )
            return result
        book.failed(ready.key, self.facts, result.reason, elapsed, ready.provider.timeouts.first_byte)
        self._note(ready.key, "failed", result, elapsed)
        if result.fatal:
            summaries = self._summaries or []
            lines = "\n".join(summary.line() for summary in summaries)
            return RouterError(500, "router_error", lines, tuple(summaries))
        if result.reason not in self.failover_on:
            # A group that does not fail over on this reason (say, timeouts) stops here; with
            # no response to pass through, the client gets the plan's error so far.
            return self.exhausted()
        return None

    def retry_wait(self, result: Attempted, retry: int) -> float | None:
        """Seconds to wait before retry ``retry`` (0-based) of a failed attempt; ``None``: don't.

        Only reasons in ``retry_on`` are retried; the upstream's hint replaces the backoff, a
        hint over ``max_retry_wait`` is not waited, and no wait may outrun the deadline.
        """
        policy = self._context.policy
        if not isinstance(result, Failed) or result.fatal or result.reason not in policy.retry_on:
            return None
        return retry_wait(
            result.retry_after,
            retry,
            backoff=policy.backoff,
            max_retry_wait=policy.max_retry_wait,
            remaining=self.deadline - self._context.clock(),
            random=self._context.random,
        )

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
        """When nothing was tried and breakers were why: the candidate whose breaker opened first."""
        if self.attempts or self.stopped or not self._open_skips:
            return None
        return min(self._open_skips, key=lambda skipped: skipped[0])[1]

    def exhausted(self) -> RouterError:
        return exhausted_error(self._summaries or [])

    def skip(self, name: str, skip: Skip) -> None:
        """Event a candidate that was not called."""
        failure = Failed(skip.reason, retry_after=skip.retry_after, skipped=True)
        self._note(name, "skipped", failure, 0.0, detail=skip.detail)

    def _note(
        self,
        name: str,
        outcome: Outcome,
        failure: Failed,
        latency: float,
        *,
        summary: bool = True,
        detail: str | None = None,
    ) -> None:
        if summary:
            if self._summaries is None:
                self._summaries = []
            self._summaries.append(
                AttemptSummary(
                    name, failure.reason, failure.status, failure.retry_after, failure.skipped, detail, failure.words
                )
            )
        self.record.events.append(
            AttemptEvent(
                self.record.request_id,
                len(self.record.events),
                name,
                outcome,
                failure.reason,
                failure.status,
                latency,
                failure.ttfb,
                principal=self.record.principal,
            )
        )
