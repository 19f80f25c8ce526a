"""One request's continued stream, as the relay sees it: what was said, and how it is spliced.

A :class:`StreamResumer` is made per request, only when the attempt loop handed the committed
stream something that continues it (:class:`~asgi_router.attempts.outcomes.Continues`: its plan
has a resumable candidate and the request can be continued at all). The relay
(``resume_relay.py``) reports each break to it; whether and where the stream goes on is decided
and done by the attempts (``attempts/continuing.py``), which also account for the call that
broke. What stays here is the relay's side: the text said so far read from the events sent, the
continuation's events rewritten into the stream the client already has, the calls' tokens so
far, and, once the answer ends, each break that was tried (the retry state keeps which
candidates broke) written to the request's state (and so its record) for
``asgi_router_resumes_total``: ``served`` when the answer was finished, ``failed`` when the
client got the in-band error.
"""

from __future__ import annotations

from asgi_router.attempts.outcomes import Committed, Continuation, Continues
from asgi_router.core.reasons import Reason
from asgi_router.protocols.continuation import Said, Splice, said_so_far
from asgi_router.protocols.continuation_messages import MessagesSplice, said_in_messages
from asgi_router.request.request_state import RequestState
from asgi_router.responses.whole_events import Spliced
from asgi_router.routing.facts import RequestFacts

__all__ = ["StreamResumer"]


class StreamResumer:
    """The relay's side of one request's continued stream."""

    __slots__ = ("_continues", "_facts", "current", "evented", "prior", "resumes", "state")

    def __init__(self, continues: Continues, state: RequestState, facts: RequestFacts, committed: Committed) -> None:
        self._continues = continues
        #: The request's state: its events, bytes relayed, the attempt in flight, the winner.
        self.state = state
        self._facts = facts
        #: The call whose stream the client is getting now.
        self.current = committed
        #: Continuations that committed so far.
        self.resumes = 0
        #: ``(prompt, completion)`` tokens of the calls before the current one, estimated.
        self.prior = (0, 0)
        #: The call whose (``failed``) event was written at its break: not to be evented again.
        self.evented: Committed | None = None

    @property
    def bounds(self) -> tuple[int, int]:
        """The largest unfinished event the relay holds, and the most bytes of events it keeps to
        read back what was said (the attempts' limits)."""
        return self._continues.bounds

    def said(self, sent: bytes) -> Said | str:
        """What the complete events ``sent`` to the client said, in the route's protocol."""
        return said_in_messages(sent) if self.state.anthropic else said_so_far(sent)

    def splice(self, said: Said, skip: str) -> Spliced:
        """The rewriting of the continuation that just committed, in the route's protocol."""
        if self.state.anthropic:
            return MessagesSplice(said, skip, self.prior)
        return Splice(said, skip, self.prior)

    def may_continue(self, reason: Reason, total: bool) -> bool:
        """Whether a break for ``reason`` may be continued (``total``: the attempt's ``total`` ran
        out): the attempts' verdict, from the request's retry state. The relay reads what was
        said only then."""
        return self._continues.may_continue(reason, total)

    async def resume(self, broken: Committed, reason: Reason, text: str, silence: float = 0.0) -> Continuation | None:
        """The call that continues ``text`` after ``broken`` broke for ``reason`` (``silence``
        seconds after its last byte), or ``None`` (:attr:`evented` then names ``broken``, its
        event written ``failed`` at the break)."""
        continued = await self._continues(broken, reason, text, silence=silence)
        if continued is None:
            self.evented = broken
            return None
        self.resumes += 1
        calls = self.resumes
        self.prior = (self._facts.prompt_tokens * calls, (len(text) + 3) // 4)
        self.current = continued.committed
        return continued

    def served(self) -> None:
        """The answer was finished: every break tried is ``served``."""
        self._close("served")

    def failed(self) -> None:
        """The client got the in-band error: every break tried is ``failed``."""
        self._close("failed")

    def _close(self, outcome: str) -> None:
        broke = self._continues.take_broken()  # kept by the request's retry state
        if broke:
            self.state.resumes += tuple((key, outcome) for key in broke)
