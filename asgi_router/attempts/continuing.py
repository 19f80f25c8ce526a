"""Asking candidates to continue a stream that broke after commit: one continuation attempt each.

Each continuation is an attempt like any other (``steps.py``): admitted by the decision point's
checks (breakers, budgets, ``max_attempts``), called within its provider's timeouts with a fresh
first-byte wait from the break, and recorded the same way, a refusal as a ``failed`` event. Its
request is the original one with the text so far as a trailing assistant message
(:func:`~asgi_router.protocols.continuation.continuation_request`), built per candidate since
each may take another ``resume`` spelling. The first candidate that commits continues the
stream; which candidates are asked, in which order, is the decision point's
:class:`~asgi_router.attempts.request_answers.Continue` answer (``decisions.py``).

The attempt loop owns every upstream call of a request, before and after commit: when a stream
it commits can be continued (its plan has a resumable candidate, the request one choice without
logprobs), it hands the answer phase a :class:`StreamContinuer` on the
:class:`~asgi_router.attempts.outcomes.Committed` itself. The relay reports each break to it and
appends what the continuation sends; the continuer decides (through the decision point) whether
and where the stream goes on, makes the attempts and accounts for the call that broke. The answer
phase never imports this module (an import-linter contract keeps it so).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from asgi_router.attempts.context import AttemptContext
from asgi_router.attempts.outcomes import Committed, Continuation
from asgi_router.attempts.retry_state import RetryState
from asgi_router.attempts.steps import RequestAttempts
from asgi_router.config.provider_settings import ResumeMode
from asgi_router.core.candidate import Candidate
from asgi_router.core.reasons import Reason
from asgi_router.core.route_paths import route_kind
from asgi_router.inbound.body import InboundRequest
from asgi_router.protocols.continuation import continuation_request
from asgi_router.protocols.routes import is_anthropic
from asgi_router.request.request_state import RequestState
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan
from asgi_router.routing.resumable import ResumeTable
from asgi_router.transports.provider import RouteTarget

__all__ = ["Continuations", "StreamContinuer", "resumable_request"]

_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def resumable_request(payload: dict[str, Any]) -> bool:
    """Whether a chat request's stream could be continued at all: one choice, no ``logprobs``
    (what an answer holds beyond that is read at the break)."""
    n = payload.get("n")
    return (n is None or n == 1) and not payload.get("logprobs") and not payload.get("top_logprobs")


class Continuations:
    """Runs continuation attempts through a router's :class:`AttemptContext`; one per router."""

    __slots__ = ("_resumes", "context")

    def __init__(self, context: AttemptContext, resumes: ResumeTable | None = None) -> None:
        self.context = context
        #: Which candidates may continue a broken stream (``None`` or disabled: none may).
        self._resumes = resumes if resumes is not None and resumes.enabled else None

    def for_stream(
        self, plan: Plan, request: InboundRequest, state: RequestState, facts: RequestFacts, retry: RetryState
    ) -> StreamContinuer | None:
        """What continues ``request``'s committed stream after a break, when its plan has a
        resumable candidate and the request can be continued at all (one choice, no logprobs; a
        chat or Messages request: a Responses stream is its provider's, with no prefill to continue)."""
        resumes = self._resumes
        if resumes is None or state.kind == "responses":
            return None
        modes = resumes.modes(plan)
        if modes is None or not resumable_request(request.payload):
            return None
        return StreamContinuer(self, plan, modes, resumes.max_resumes(plan), request.payload, state, facts, retry)

    async def ask(
        self,
        order: Sequence[tuple[Candidate, ResumeMode]],
        plan: Plan,
        payload: dict[str, Any],
        text: str,
        state: RequestState,
        facts: RequestFacts,
        attempts: int,
        retry: RetryState,
        total_by: float = math.inf,
    ) -> Continuation | None:
        """The first candidate of ``order`` that commits to continuing ``text``, or ``None``.

        ``attempts`` is how many attempts the request has made (``max_attempts`` bounds them
        all); the request's ``deadline`` runs again from now, as a continuation is a new wait,
        but never past ``total_by`` (the ``total`` of the call that committed the stream), nor
        does the continuation's stream.
        """
        context = self.context
        sent_tokens = (len(text) + 3) // 4  # the router's usual estimate: about four characters a token
        deadline = min(context.clock() + context.policy.deadline, total_by)
        retry.continuing(deadline)
        path = state.path
        messages_path = is_anthropic(route_kind(path))
        for candidate, mode in order:
            provider = context.providers.get(candidate.provider)
            target = provider.targets.get(path) if provider is not None else None
            # The Messages API (translated to, or the route's own) refuses a prefill ending in whitespace.
            anthropic = (isinstance(target, RouteTarget) and target.translated) or messages_path
            continued, skip = continuation_request(payload, text, mode, anthropic=anthropic, sent_tokens=sent_tokens)
            if len(_COMPACT.encode(continued).encode()) > context.max_body_bytes:
                continue  # a request the router would refuse from a client is not sent for it
            steps = RequestAttempts(context, plan, InboundRequest(continued, True), state, facts, deadline, retry)
            steps.attempts = attempts
            ready = steps.prepare(candidate, retry=True)
            if ready is not None:
                result = await steps.attempt(ready)
                steps.settle(ready, result)  # recorded; a continuation that did not commit moves on
                attempts = steps.attempts
                if isinstance(result, Committed):
                    result.deadline = min(result.deadline, total_by)
                    return Continuation(result, skip)
            if steps.stopped:
                break
        return None


class StreamContinuer:
    """Continues one request's committed stream after each break the relay reports: which
    candidates are asked is the decision point's answer, and the call that broke is accounted
    once another continues it (its lease finished with the break's reason, so a break counts
    against its breaker as an unresumed one does; its statistics released; its attempt evented
    ``resumed``, made ``failed`` when nothing continues it)."""

    __slots__ = (
        "_continuations",
        "_facts",
        "_max",
        "_modes",
        "_payload",
        "_plan",
        "_retry",
        "_state",
        "_total_by",
        "bounds",
    )

    def __init__(
        self,
        continuations: Continuations,
        plan: Plan,
        modes: Sequence[ResumeMode],
        max_resumes: int,
        payload: dict[str, Any],
        state: RequestState,
        facts: RequestFacts,
        retry: RetryState,
    ) -> None:
        self._continuations = continuations
        context = continuations.context
        self.bounds = (context.max_event_bytes, context.max_response_bytes)
        #: The request's retry state: whether and where a broken stream goes on is its verdict.
        self._retry = retry
        self._plan = plan
        self._modes = modes
        self._max = max_resumes
        self._payload = payload
        self._state = state
        self._facts = facts
        #: When the ``total`` of the call that committed the stream runs out: no continuation
        #: runs past it (set at the first break).
        self._total_by = math.inf

    def may_continue(self, reason: Reason, total: bool) -> bool:
        return self._retry.may_continue(reason, total, self._max)

    def take_broken(self) -> tuple[str, ...]:
        return self._retry.take_broken()

    async def __call__(
        self, broken: Committed, reason: Reason, text: str, total: bool = False, silence: float = 0.0
    ) -> Continuation | None:
        """The call that continues ``text`` after ``broken`` broke for ``reason`` (``silence``
        seconds after its last byte), or ``None``; never past the ``total`` of the call that
        committed the stream.

        The broken call's event is written at the break, before the continuations' own (events
        are in the order attempts ended, and spans are matched to them in that order).
        """
        state, context = self._state, self._continuations.context
        at = state.event(
            broken.candidate.key,
            "resumed",
            reason,
            broken.response.status,
            context.clock() - broken.started,
            broken.ttfb,
        )
        plan = self._plan
        retry = self._retry
        if self._total_by == math.inf:  # the first break: the committed call's total bounds them all
            self._total_by = broken.deadline
        total_by = self._total_by
        total = total or context.clock() >= total_by
        idle = broken.provider.timeouts.idle
        answer = retry.after_break(
            plan.candidates, self._modes, broken.candidate, reason, total, self._max, silence, idle
        )
        continued = None
        if answer is not None:
            continued = await self._continuations.ask(
                answer.order, plan, self._payload, text, state, self._facts, broken.attempts, retry, total_by
            )
        if continued is None:
            state.events[at] = replace(state.events[at], outcome="failed")
            return None
        retry.resumed()
        # The broken call is over: its lease and statistics end with the break's reason.
        if broken.lease is not None:
            broken.lease.finish(reason)
        context.book.finished(broken.candidate.key, self._facts, None)
        committed = continued.committed
        state.in_flight = (committed.candidate.key, committed.started)
        state.winner = committed.candidate.key
        return continued
