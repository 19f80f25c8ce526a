"""One request's continuations after its stream broke: who is asked, and how it is accounted.

A :class:`StreamResumer` is made per request, only when the plan has a resumable candidate and
the request can be continued (:func:`resumable_request`). The relay
(``resume_relay.py``) asks it at each break; it asks the candidates in the order
:meth:`~asgi_router.attempts.decisions.Decisions.resume` answers
(:class:`~asgi_router.attempts.continuing.Continuations` makes the attempts), and accounts for
the call that broke once another call continues it: its gate lease finished with the break's
reason (a break counts against its breaker, as an unresumed one does), its statistics
released, and its attempt evented ``resumed`` with that reason. Each break it tried to continue
is kept on the request's state (and so its record) for ``asgi_router_resumes_total``: ``served``
when the answer was finished, ``failed`` when the client got the in-band error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Protocol

from asgi_router.attempts.bookkeeping import Bookkeeper
from asgi_router.attempts.continuing import Continuation, Continuations
from asgi_router.attempts.outcomes import Committed
from asgi_router.config.provider_settings import ResumeMode
from asgi_router.core.reasons import Reason
from asgi_router.protocols.continuation import Said, Splice, said_so_far
from asgi_router.protocols.continuation_messages import MessagesSplice, said_in_messages
from asgi_router.request.request_state import RequestState
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan

__all__ = ["Spliced", "StreamResumer", "resumable_request"]


class Spliced(Protocol):
    """Rewrites a continuation's complete events into the stream the client already has."""

    def feed(self, events: bytes) -> bytes: ...


def resumable_request(payload: dict[str, Any]) -> bool:
    """Whether a chat request's stream could be continued at all: one choice, no ``logprobs``
    (what an answer holds beyond that is read at the break)."""
    n = payload.get("n")
    return (n is None or n == 1) and not payload.get("logprobs") and not payload.get("top_logprobs")


class StreamResumer:
    """Continues one request's broken stream on its plan's resumable candidates."""

    __slots__ = (
        "_book",
        "_broken",
        "_clock",
        "_continuations",
        "_facts",
        "_max",
        "_modes",
        "_payload",
        "_plan",
        "current",
        "evented",
        "prior",
        "resumes",
        "state",
    )

    def __init__(
        self,
        continuations: Continuations,
        book: Bookkeeper,
        clock: Callable[[], float],
        state: RequestState,
        plan: Plan,
        modes: Sequence[ResumeMode],
        max_resumes: int,
        payload: dict[str, Any],
        facts: RequestFacts,
        committed: Committed,
    ) -> None:
        self._continuations = continuations
        self._book = book
        self._clock = clock
        #: The request's state: its events, bytes relayed, the attempt in flight, the winner.
        self.state = state
        self._plan = plan
        self._modes = modes
        self._max = max_resumes
        self._payload = payload
        self._facts = facts
        #: The call whose stream the client is getting now.
        self.current = committed
        #: Continuations that committed so far.
        self.resumes = 0
        #: ``(prompt, completion)`` tokens of the calls before the current one, estimated.
        self.prior = (0, 0)
        #: The call whose (``failed``) event was written at its break: not to be evented again.
        self.evented: Committed | None = None
        #: The candidates whose stream broke and that a continuation was asked for.
        self._broken: list[str] = []

    def said(self, sent: bytes) -> Said | str:
        """What the complete events ``sent`` to the client said, in the route's protocol."""
        return said_in_messages(sent) if self.state.anthropic else said_so_far(sent)

    def splice(self, said: Said, skip: str) -> Spliced:
        """The rewriting of the continuation that just committed, in the route's protocol."""
        if self.state.anthropic:
            return MessagesSplice(said, skip, self.prior)
        return Splice(said, skip, self.prior)

    def can_resume(self) -> bool:
        return self.resumes < self._max

    async def resume(self, broken: Committed, reason: Reason, text: str) -> Continuation | None:
        """The call that continues ``text`` after ``broken`` broke for ``reason``, or ``None``.

        The broken call's event is written at the break, before the continuations' own (events
        are in the order attempts ended, and spans are matched to them in that order): ``resumed``,
        made ``failed`` if nothing continues it (:attr:`evented` then names it).
        """
        self._broken.append(broken.candidate.key)
        state = self.state
        at = state.event(
            broken.candidate.key,
            "resumed",
            reason,
            broken.response.status,
            self._clock() - broken.started,
            broken.ttfb,
        )
        plan = self._plan
        answer = self._continuations.context.decisions.resume(
            plan.candidates, self._modes, broken.candidate, reason, self.resumes, self._max
        )
        continued = None
        if answer is not None:
            continued = await self._continuations.ask(
                answer.order,
                plan,
                self._payload,
                text,
                state,
                self._facts,
                broken.attempts,
            )
        if continued is None:
            state.events[at] = replace(state.events[at], outcome="failed")
            self.evented = broken
            return None
        self.resumes += 1
        calls = self.resumes
        self.prior = (self._facts.prompt_tokens * calls, (len(text) + 3) // 4)
        # The broken call is over: its lease and statistics end with the break's reason.
        if broken.lease is not None:
            broken.lease.finish(reason)
        self._book.finished(broken.candidate.key, self._facts, None)
        committed = continued.committed
        self.current = committed
        state.in_flight = (committed.candidate.key, committed.started)
        state.winner = committed.candidate.key
        return continued

    def served(self) -> None:
        """The answer was finished: every break tried is ``served``."""
        self._close("served")

    def failed(self) -> None:
        """The client got the in-band error: every break tried is ``failed``."""
        self._close("failed")

    def _close(self, outcome: str) -> None:
        if self._broken:
            self.state.resumes += tuple((key, outcome) for key in self._broken)
            self._broken.clear()
