"""One request's retry state: every verdict the decision point gives a request comes from it.

As Envoy's ``RetryStateImpl`` is to its router filter, a :class:`RetryState` is made per request
over the router's decision point (:class:`~asgi_router.attempts.decisions.Decisions`, whose
docstring tables are the policy) and kept for the request's whole life, before and after commit.
It holds what the policy needs to know of the request so far: the retries in place each candidate
of its plan may have (none for a client that retries on its own), the candidate being retried
and how often, the retry budget's token a retry holds until it has ended, and the continuations
made of its committed stream. Every verdict is asked of it, with what it implies carried out:

* **admit** (:meth:`RetryState.admit`): a lease on the candidate, or the skip and why; a skip
  for an open breaker kept, so that when such skips were all a pass did, the all-open rule
  (:meth:`RetryState.all_open`) names the candidate tried anyway;
* **after a result** (:meth:`RetryState.after`): commit, pass through, retry after a wait (a
  token of the provider's retry budget taken, given back by :meth:`RetryState.retry_over`), fail
  over or stop; a 429 marks the member over budget until its ``Retry-After``;
* **after a break** (:meth:`RetryState.may_continue`, then :meth:`RetryState.after_break`):
  whether a committed stream that broke is continued (a cut or a stall, not past the attempt's
  ``total``, ``max_resumes`` not yet spent) and on whom, in the resume table's order (a candidate
  that broke before in the request last); the candidates that broke are kept
  (:meth:`RetryState.take_broken`) for the request's record.

The drivers (``loop.py``, ``hedging.py``, ``continuing.py``) and the relay do I/O and ask; none
of them decides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from asgi_router.attempts.decisions import Admit, Decisions, Next, Retry
from asgi_router.attempts.outcomes import Attempted
from asgi_router.attempts.request_answers import Continue, continuable
from asgi_router.attempts.wire_body import SplicedBody, WireBody
from asgi_router.config.provider_settings import ResumeMode
from asgi_router.core.candidate import Candidate
from asgi_router.core.reasons import Reason
from asgi_router.core.skip import Skip
from asgi_router.routing.facts import EMPTY_FACTS, RequestFacts
from asgi_router.routing.plan import Plan
from asgi_router.transports.provider import ProviderRuntime

__all__ = ["RetryState"]


class RetryState:
    """What the attempt policy knows of one request so far, and every verdict it gives it."""

    __slots__ = (
        "_broke",
        "_broke_before",
        "_deadline",
        "_decisions",
        "_facts",
        "_inbound",
        "_open_skips",
        "_policy",
        "_retried",
        "_stream",
        "_token",
        "resumes",
        "retries",
    )

    def __init__(
        self,
        decisions: Decisions,
        plan: Plan,
        inbound: Sequence[tuple[bytes, bytes]],
        deadline: float = math.inf,
        facts: RequestFacts = EMPTY_FACTS,
        stream: bool = False,
    ) -> None:
        self._decisions = decisions
        self._inbound = inbound
        #: What the request is, for every admission: by when a candidate must have committed
        #: (monotonic), the facts budgets are estimated from, and whether it streams.
        self._deadline = deadline
        self._facts = facts
        self._stream = stream
        #: The plan's group policy (a group's admission rules).
        self._policy = plan.policy
        #: Candidates of this pass over the plan skipped for an open or recovering breaker, each
        #: with when it opened (or began its ramp): what the all-open rule chooses from.
        self._open_skips: list[tuple[float, Candidate]] | None = None
        #: Retries in place each candidate of the plan may have.
        self.retries = decisions.retries_in_place(plan, inbound)
        #: Retries made of the candidate being retried in place.
        self._retried = 0
        #: The provider whose retry-budget token a retry holds until it has ended.
        self._token: str | None = None
        #: Continuations of the committed stream made so far.
        self.resumes = 0
        #: The candidates (keys) whose committed stream broke and were asked after, in order.
        self._broke: list[str] = []
        #: Every candidate whose committed stream broke in this request, in order.
        self._broke_before: tuple[Candidate, ...] = ()

    def replanned(self, plan: Plan) -> None:
        """The request was planned again (after a wait for capacity): its retries are the new plan's."""
        self.retries = self._decisions.retries_in_place(plan, self._inbound)
        self._policy = plan.policy
        self._open_skips = None  # a fresh pass over the new plan

    def continuing(self, deadline: float) -> None:
        """A broken stream is being continued: a new wait, so the request's deadline runs again
        (``deadline``, monotonic) for the continuation's admissions and retries."""
        self._deadline = deadline

    def admit(
        self,
        candidate: Candidate,
        provider: ProviderRuntime | None,
        wire: SplicedBody | WireBody | str | None,
        attempts: int,
        *,
        force: bool = False,
        in_place: bool = False,
    ) -> Admit | Skip:
        """A lease on ``candidate``, or the skip and why (the decision point's first table, asked
        with the request's deadline, facts and kind); a skip for an open or recovering breaker
        is kept for the all-open rule, unless the candidate was being retried in place
        (``in_place``) or the skip stops the pass."""
        admitted = self._decisions.admit(
            candidate, provider, wire, attempts, self._deadline, self._policy, self._facts, force, self._stream
        )
        if type(admitted) is Skip and admitted.opened_at is not None and not admitted.stops and not in_place:
            if self._open_skips is None:
                self._open_skips = []
            self._open_skips.append((admitted.opened_at, candidate))
        return admitted

    def all_open(self, attempts: int, stopped: bool) -> Candidate | None:
        """The candidate the all-open rule tries anyway (the one whose breaker opened first), when
        this pass tried nothing (``attempts``, ``stopped``) and open breakers were why."""
        return self._decisions.all_open(attempts, stopped, self._open_skips)

    def retrying(self, candidate: Candidate) -> None:
        """``candidate`` is to be tried with retries in place: none made of it yet."""
        self._retried = 0

    def after(self, result: Attempted, failover_on: frozenset[Reason], candidate: Candidate, in_place: bool) -> Next:
        """What next after ``candidate``'s call ended in ``result`` (the decision point's second
        table); ``in_place``: it may be retried in place. A :class:`Retry` holds a token of the
        provider's retry budget until :meth:`retry_over`."""
        retried, retries = (self._retried, self.retries) if in_place else (0, 0)
        answer = self._decisions.after(
            result, failover_on, self._deadline, candidate.provider, retried, retries, candidate.key
        )
        if type(answer) is Retry:
            self._token = candidate.provider
            self._retried += 1
        return answer

    def retry_over(self) -> None:
        """The retry that held a retry-budget token has ended (or will not be made): give it back."""
        token = self._token
        if token is not None:
            self._token = None
            self._decisions.end_retry(token)

    def may_continue(self, reason: Reason, total: bool, max_resumes: int) -> bool:
        """Whether a committed stream that broke for ``reason`` may be continued at all: a cut or
        a stall, not once the attempt's ``total`` ran out (``total``), ``max_resumes`` not spent."""
        return not total and continuable(reason, self.resumes, max_resumes)

    def after_break(
        self,
        candidates: Sequence[Candidate],
        modes: Sequence[ResumeMode],
        broken: Candidate,
        reason: Reason,
        total: bool,
        max_resumes: int,
        silence: float = 0.0,
        idle: float = math.inf,
    ) -> Continue | None:
        """Whether and on whom a stream that broke for ``reason`` is continued (the resume table),
        ``silence`` seconds after its last byte (``idle``: its candidate's idle timeout); ``broken``
        is kept among the candidates that broke (:meth:`take_broken`), and asked again only after
        the others from then on."""
        self._broke.append(broken.key)
        before = self._broke_before
        self._broke_before = (*before, broken)
        if total:
            return None
        return self._decisions.resume(
            candidates, modes, broken, reason, self.resumes, max_resumes, before, silence, idle
        )

    def resumed(self) -> None:
        """A continuation committed."""
        self.resumes += 1

    def take_broken(self) -> tuple[str, ...]:
        """The candidates that broke since the last call, each once (their breaks' outcome is
        known only when the answer ends: served, or the client's in-band error)."""
        broke = tuple(self._broke)
        self._broke.clear()
        return broke
