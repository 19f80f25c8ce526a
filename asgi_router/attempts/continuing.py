"""Asking candidates to continue a stream that broke after commit: one continuation attempt each.

Each continuation is an attempt like any other (``steps.py``): admitted by the decision point's
checks (breakers, budgets, ``max_attempts``), called within its provider's timeouts with a fresh
first-byte wait from the break, and recorded the same way, a refusal as a ``failed`` event. Its
request is the original one with the text so far as a trailing assistant message
(:func:`~asgi_router.protocols.continuation.continuation_request`), built per candidate since
each may take another ``resume`` spelling. The first candidate that commits continues the
stream; which candidates are asked, in which order, is the decision point's
:class:`~asgi_router.attempts.request_answers.Continue` answer (``decisions.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from asgi_router.attempts.context import AttemptContext
from asgi_router.attempts.outcomes import Committed
from asgi_router.attempts.steps import RequestAttempts
from asgi_router.config.provider_settings import ResumeMode
from asgi_router.core.candidate import Candidate
from asgi_router.inbound.body import InboundRequest
from asgi_router.protocols.continuation import continuation_request
from asgi_router.protocols.routes import is_anthropic, route_kind
from asgi_router.request.request_state import RequestState
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan
from asgi_router.transports.provider import RouteTarget

__all__ = ["Continuation", "Continuations"]


@dataclass(slots=True)
class Continuation:
    """A continuation that committed, and the whitespace its prefill lost (said again by it)."""

    committed: Committed
    skip: str


class Continuations:
    """Runs continuation attempts through a router's :class:`AttemptContext`; one per router."""

    __slots__ = ("context",)

    def __init__(self, context: AttemptContext) -> None:
        self.context = context

    async def ask(
        self,
        order: Sequence[tuple[Candidate, ResumeMode]],
        plan: Plan,
        payload: dict[str, Any],
        text: str,
        state: RequestState,
        facts: RequestFacts,
        attempts: int,
    ) -> Continuation | None:
        """The first candidate of ``order`` that commits to continuing ``text``, or ``None``.

        ``attempts`` is how many attempts the request has made (``max_attempts`` bounds them
        all); the request's ``deadline`` runs again from now, as a continuation is a new wait.
        """
        context = self.context
        sent_tokens = (len(text) + 3) // 4  # the router's usual estimate: about four characters a token
        deadline = context.clock() + context.policy.deadline
        path = state.path
        messages_path = is_anthropic(route_kind(path))
        for candidate, mode in order:
            provider = context.providers.get(candidate.provider)
            target = provider.targets.get(path) if provider is not None else None
            # The Messages API (translated to, or the route's own) refuses a prefill ending in whitespace.
            anthropic = (isinstance(target, RouteTarget) and target.translated) or messages_path
            continued, skip = continuation_request(payload, text, mode, anthropic=anthropic, sent_tokens=sent_tokens)
            steps = RequestAttempts(context, plan, InboundRequest(continued, True), state, facts, deadline)
            steps.attempts = attempts
            ready = steps.prepare(candidate, retry=True)
            if ready is not None:
                result = await steps.attempt(ready)
                steps.settle(ready, result)  # recorded; a continuation that did not commit moves on
                attempts = steps.attempts
                if isinstance(result, Committed):
                    return Continuation(result, skip)
            if steps.stopped:
                break
        return None
