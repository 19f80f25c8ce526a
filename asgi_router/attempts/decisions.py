"""The one decision point of the attempt policy: admit a candidate or not, and what next after a call.

One object (:class:`Decisions`, one per router) holds the policy; each request asks it through
its own retry state (``retry_state.py``, Envoy's ``RetryStateImpl``: what the request has done
so far, and every verdict it gets); the modules around it only do I/O (``call.py``), record
(``steps.py``) or drive (``loop.py``, ``hedging.py``, ``continuing.py``). What a status or an exception
*means* (its :data:`~asgi_router.core.reasons.Reason`) and the fixed reason sets are tables in
:mod:`asgi_router.core.classify`; the per-group and router-wide sets are settings
(``failover_on``, ``retry_on``, ``breaker.failure_reasons``). This module decides with them.

**Admission** (:meth:`Decisions.admit`), asked in this order before every attempt:

=============================================  ======================================
the candidate                                  answer
=============================================  ======================================
provider's ``api_key_env`` is unset            Skip ``provider_not_configured``
provider does not serve the route's protocol,  Skip ``protocol_mismatch``
or the request has no translation for it
a translated Responses member (``responses =   Skip ``protocol_mismatch`` (detail:
"translate"``, any Anthropic provider) and a    ``previous_response_id``: stateless)
request with ``previous_response_id``
``max_attempts`` attempts made, or the         Skip ``budget_exhausted``, and stop:
request ``deadline`` passed                    nothing after it is tried either
catalog context window too small               Skip ``context_window``
its rpm/tpm budget in the group is spent       Skip ``over_budget`` (Retry-After: when
                                               usage frees up)
its provider said it is at its limit (rate-    Skip ``over_budget`` (Retry-After: the
limit headers: no requests left, fewer tokens  stated reset); no breaker counts it
than the estimate; or a 429 asked to wait)
its provider's or its own breaker is open      Skip ``circuit_open`` (when it opened;
(unless forced: the all-open rule below)       its open cause, ``failures`` or ``slow``)
its provider's or its own breaker recovers     Skip ``recovering`` (when its ramp began)
after an outage and this request is past its
share of the ramp (unless forced)
its provider is at ``max_concurrent``          Skip ``saturated``
otherwise                                      Admit: a gate lease (breaker admissions
                                               and the in-flight slot, held until the
                                               attempt is finished)
=============================================  ======================================

**After a call** (:meth:`Decisions.after`), in this order:

==========================================================  ==================================
what the call observed                                      answer
==========================================================  ==================================
a 2xx committed (first chunk, or the whole body)            Commit
an answer whose reason is not in ``failover_on`` (by        PassThrough: the upstream's
default ``client_error``); ``call.py`` asks                 status and body go to the client
:meth:`Decisions.passes_through` before reading its body
the router's own failure (``router_error``)                 Stop, fatal: 500 ``router_error``
a failure whose reason is not in ``failover_on``            Stop: the plan's error so far
a 429 (``rate_limited``), whatever comes next              the member is marked over budget
                                                            until its ``Retry-After`` (then the
                                                            rows below answer)
a failure in ``retry_on``, with retries left (``retries``;  Retry after the wait
0 for a client that sends ``x-stainless-retry-count`` and
for a hedged group), a wait (the upstream's hint, else
full-jitter backoff) within ``max_retry_wait`` and
shorter than what is left of the ``deadline``, and a
token from the provider's ``retry_budget``
the same, but the retry budget refuses                      FailOver, the candidate recorded
                                                            as skipped ``budget_exhausted``
any other failure                                           FailOver: the next candidate
==========================================================  ==================================

**Retries in place** (:meth:`Decisions.retries_in_place`, :func:`retries_for`; how often the
"retries left" above allows, per candidate of a plan):

==========================================================  ==================================
the plan and the client                                     retries in place per candidate
==========================================================  ==================================
a client that sends ``x-stainless-retry-count``             0: it retries on its own
a group that sets ``retries``                               that many
a direct ref, or a group of one member                      the router's ``retries`` (2)
a group of several members                                  0: it fails over instead
a hedged group                                              not asked: the race is its second
                                                            chance
==========================================================  ==================================

When the walk ends with nothing attempted and every candidate skipped ``over_budget`` or
``saturated`` (no capacity, and nothing else, stood in the way), a group with a ``queue``
waits for capacity (:meth:`Decisions.waits`; ``capacity_queue.py``) and, once its turn comes
and it has paused until capacity may be back (:meth:`Decisions.recheck`), is *planned again*: its
``model`` resolved anew and its candidates ordered afresh by the strategy (a rotate group's next
rotation, ``least_busy``'s current counts), then walked under this table again.
A sticky group's key's member is put first before the walk (``capacity.py``): whether it may be
called is this table's answer, as for any candidate.

When the walk ends with nothing attempted and every candidate skipped ``circuit_open`` or
``recovering`` (and ``max_attempts``/the deadline did not stop it), the one whose breaker opened
(or began its ramp) longest ago is tried anyway, forced, with no retries
(:meth:`Decisions.all_open`): breakers alone never fail a plan untried, and a ramp never turns
a request of a one-candidate plan into a 502.

When the walk ends with every candidate skipped as a translated member of a request with
``previous_response_id`` (a plan of translated members only), the answer is a 400
``unsupported_on_member`` (:meth:`Decisions.stateless_only`): translated members store nothing,
so none can continue a stored response, and the client is told so rather than that no member
speaks its protocol. A plan with a native member among them walks on to it; a request without
``previous_response_id`` is served by translated members like any other (``store`` is ignored,
the answer says ``"store": false``).

**Order** (:meth:`Decisions.order`): a plan's candidates are walked in the strategy's order,
except that candidates marked slow (``asgi_router.resilience.slowness``: p90 time to first byte
of streamed calls above ``slow_factor`` times the target, with few errors) are demoted after
the ones that are not, order kept among each. Slow *and* failing is not an order: the breaker
opens with cause ``slow`` and the candidate is skipped ``circuit_open`` above.

**After a committed stream broke** (:meth:`Decisions.resume`, asked through the request's retry
state when the relay reports a break of a stream whose plan has a candidate whose ``resume`` is
not ``"none"`` and the text so far can be continued): the resume table, in
``request_answers.py`` beside its rule, says whether the stream is continued
(:class:`~asgi_router.attempts.request_answers.Continue`) and on whom; each candidate it names
is one attempt, admitted as any other.

**The caller's caps** (:meth:`Decisions.caller`, asked in the admit phase before the body is
read, for a request with a cap past its limit; ``resilience/caller_limits.py`` judges each cap
of the caller's table, then of its session's, under, past its limit, or past where refusal
starts, and serves at once a request with every cap under, the table's last row):

==========================================================  ==================================
the caps                                                    answer
==========================================================  ==================================
a cap past where refusal starts (its limit without          Refuse: a 429
``downgrade_to``, ``hard_limit`` times it with one)          ``caller_limit_reached``
a cap past its limit, its table without ``downgrade_to``    Refuse
a cap past its limit, its table with ``downgrade_to``       Downgrade: serve that ref (the
                                                            first such cap names it)
every cap under its limit                                   None: serve the ref asked for
==========================================================  ==================================

A refusal wins over a downgrade, whichever table it comes from. The answers about the whole
request (this one and a broken stream's) are made in ``request_answers.py``.

**Per reason, with the default settings** (``asgi_router.core.classify`` has the sets):

======================  ===========  ==========  =================  =================
reason                  fails over   retried in  candidate breaker  provider breaker
                        by default   place       counts             (no response)
======================  ===========  ==========  =================  =================
``connect_error``       yes          yes         failure            failure
``timeout``             yes          yes         failure            failure
``rate_limited`` (429)  yes          yes [1]_    neutral            success [2]_
``upstream_5xx``        yes          yes [1]_    failure            success [2]_
``stream_interrupted``  yes          yes         failure            success [2]_
``auth_error``          yes          no          neutral            success [2]_
``billing``             yes          no          neutral            success [2]_
``model_not_found``     yes          no          neutral            success [2]_
``context_window``      yes          no          neutral            success [2]_
``guardrail_failed``    yes          no          neutral            success [2]_
``client_error``        no: pass     no          success            success [2]_
``served``              commit       --          success            success
``router_error``        no: 500      never       never counts       neutral
``client_disconnected``  --          --          neutral            neutral
``hedge_lost``           --          --          neutral            neutral
skip reasons             next        --          not counted        not counted
======================  ===========  ==========  =================  =================

.. [1] after the upstream's hint (``Retry-After`` and the like, read on a 429 or 5xx:
   ``classify.HINTED``) when it is within ``max_retry_wait``; a longer hint is not waited and
   the candidate is failed over at once.
.. [2] any response at all is a success for its provider, recorded when the status arrives.

``guardrail_failed`` is an answer an output guardrail with ``action = "fail_over"`` refused
(``asgi_router/guardrails``): the upstream answered, so it says nothing about its health, and
asking it again would most likely get the same kind of answer: the next candidate is asked.

So a 429 (``rate_limited``) decides here: with ``retries`` left (a plan of one candidate, or a
group that sets ``retries``) and ``rate_limited`` in ``retry_on``, the same candidate is asked
again after its ``Retry-After`` (if within ``max_retry_wait``); otherwise the next candidate,
as long as ``rate_limited`` is in the group's ``failover_on``; a group that leaves it out
passes the 429 through. It counts on no breaker unless ``breaker.failure_reasons`` lists it.

The breaker counts themselves are applied by the gate (``asgi_router.resilience.gate``) when a
lease is finished, because a streamed attempt's lease is finished by the relay, below this
layer. Answers added later are new answer classes here (or, about the whole request, in
``request_answers.py``), with their rule in the method that gives them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

from asgi_router.attempts.bookkeeping import Bookkeeper
from asgi_router.attempts.capacity_queue import RECHECK
from asgi_router.attempts.outcomes import Attempted, Committed, Refused
from asgi_router.attempts.request_answers import Downgrade, Refuse, caller_answer, continuation
from asgi_router.attempts.wire_body import SplicedBody, WireBody
from asgi_router.core.candidate import Candidate
from asgi_router.core.header_names import client_retries
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import AttemptSummary
from asgi_router.core.skip import Skip
from asgi_router.protocols.responses_to_chat import STATEFUL
from asgi_router.resilience.caller_limits import Judged
from asgi_router.resilience.gate import Gate, Lease
from asgi_router.resilience.retry import RetryPolicy, retry_wait
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan
from asgi_router.routing.policy import GroupPolicy
from asgi_router.transports.provider import ProviderRuntime

__all__ = [
    "COMMIT",
    "EXHAUSTED",
    "FAIL_OVER",
    "FATAL",
    "PASS_THROUGH",
    "Admit",
    "Commit",
    "Decisions",
    "FailOver",
    "Next",
    "PassThrough",
    "Retry",
    "Stop",
    "retries_for",
]

#: Admission's "yes": the gate's lease on the candidate (its breaker admissions and its
#: provider's in-flight slot), finished exactly once with how the attempt ended.
Admit: TypeAlias = Lease


@dataclass(frozen=True, slots=True)
class Commit:
    """The candidate committed: its answer goes to the client."""


@dataclass(frozen=True, slots=True)
class PassThrough:
    """The upstream refused the request (a reason not in ``failover_on``): relay its answer."""


@dataclass(frozen=True, slots=True)
class Retry:
    """Ask the same candidate again after ``wait`` seconds (a retry-budget token is held)."""

    wait: float


@dataclass(frozen=True, slots=True)
class FailOver:
    """Move on to the next candidate; ``skip`` is to be recorded first (a refused retry)."""

    skip: Skip | None = None


@dataclass(frozen=True, slots=True)
class Stop:
    """Try nothing more: the router's own failure (``fatal``: a 500), else the plan's error so far."""

    fatal: bool


#: What the decision point answers after a call.
Next: TypeAlias = Commit | PassThrough | Retry | FailOver | Stop


# The answers with nothing of their own are made once.
COMMIT: Final = Commit()
PASS_THROUGH: Final = PassThrough()
FAIL_OVER: Final = FailOver()
FATAL: Final = Stop(fatal=True)
EXHAUSTED: Final = Stop(fatal=False)
_RETRY_REFUSED: Final = FailOver(Skip("budget_exhausted"))
_OUT_OF_BUDGET: Final = Skip("budget_exhausted", stops=True)
_TOO_LONG: Final = Skip("context_window")
_SATURATED: Final = Skip("saturated")
# The skips a group's queue waits out: a member at its budget or its provider's stated limit,
# or its provider at its concurrency cap.
_CAPACITY: Final[frozenset[Reason]] = frozenset({"over_budget", "saturated"})


def retries_for(plan: Plan, default: int) -> int:
    """Retries in place per candidate of ``plan`` for a client that does not retry on its own
    (the module's retries table): its group's own ``retries`` when it sets one; else ``default``
    (the router's ``retries``) for a plan of one configured candidate, a direct ref or a group
    of one member, and none for a longer group, which fails over instead."""
    if plan.retries is not None:
        return plan.retries
    policy = plan.policy
    return default if policy is None or policy.size == 1 else 0


class Decisions:
    """A router's attempt policy: every admission and every "what next"; no per-request state.

    What a request has done so far (attempts, retries, its deadline) is passed in by its
    :class:`~asgi_router.attempts.steps.RequestAttempts`, which records the answers.
    """

    __slots__ = ("_book", "_clock", "_gate", "_max_attempts", "_policy", "_random", "_retry_on")

    def __init__(
        self,
        book: Bookkeeper,
        gate: Gate,
        policy: RetryPolicy,
        clock: Callable[[], float],
        random: Callable[[], float],
    ) -> None:
        self._book = book
        self._gate = gate
        self._policy = policy
        self._retry_on = policy.retry_on
        self._max_attempts = policy.max_attempts
        self._clock = clock
        self._random = random

    # -- admission -----------------------------------------------------------------------------

    def admit(
        self,
        candidate: Candidate,
        provider: ProviderRuntime | None,
        wire: SplicedBody | WireBody | str | None,
        attempts: int,
        deadline: float,
        policy: GroupPolicy | None,
        facts: RequestFacts,
        force: bool = False,
        stream: bool = False,
    ) -> Admit | Skip:
        """Admit ``candidate`` (a lease) or skip it, and why (the module's first table).

        ``wire`` is its body builder for the route, or why it has none; ``attempts`` how many
        the request has made; ``force`` admits it through open and recovering breakers (the
        all-open rule); ``stream``: the request is streamed (its first byte counts for slowness).
        """
        if provider is None or not provider.configured:
            unset = provider.missing_key_env if provider is not None else None
            return Skip("provider_not_configured", detail=f"{unset} is not set" if unset else None)
        if wire is None or isinstance(wire, str):
            return Skip("protocol_mismatch", detail=wire)
        if attempts >= self._max_attempts or self._clock() >= deadline:
            return _OUT_OF_BUDGET
        key = candidate.key
        book = self._book
        if not book.fits(key, facts):
            return _TOO_LONG
        frees_in = book.over_budget(key, policy, facts)
        if frees_in is not None:
            return Skip("over_budget", frees_in)
        if book.rate_limits.marks:  # a provider said a member is at its limit (else: one test)
            frees_in = book.over_stated_limit(key, facts)
            if frees_in is not None:
                return Skip("over_budget", frees_in)
        entered = self._gate.enter(candidate, force=force, stream=stream)
        if isinstance(entered, Lease):
            return entered
        if entered is None:
            return _SATURATED
        if entered.recovering:
            return Skip("recovering", opened_at=entered.opened_at)
        return Skip("circuit_open", opened_at=entered.opened_at, cause=entered.cause)

    def order(self, candidates: Sequence[Candidate]) -> Sequence[Candidate]:
        """The order to walk ``candidates`` in: the strategy's, slow candidates after the others."""
        return self._gate.demote(candidates)

    @staticmethod
    def waits(attempts: int, stopped: bool, skipped: Sequence[AttemptSummary] | None) -> bool:
        """Whether a request of a group with a ``queue`` waits for capacity: nothing was
        attempted and every candidate was skipped for want of capacity (``skipped``: the
        pass's lines), nothing else."""
        if attempts or stopped or not skipped:
            return False
        return all(summary.reason in _CAPACITY for summary in skipped)

    @staticmethod
    def stateless_only(skipped: Sequence[AttemptSummary] | None) -> bool:
        """Whether a walk's every candidate was a translated member skipped because the request
        continues a stored response (``skipped``: the pass's lines): a 400
        ``unsupported_on_member`` rather than the plan's error."""
        return bool(skipped) and all(
            summary.reason == "protocol_mismatch" and summary.detail == STATEFUL for summary in skipped or ()
        )

    @staticmethod
    def recheck(skipped: Sequence[AttemptSummary] | None) -> float:
        """How long the request at the head of a queue pauses before it is planned again, after
        a pass that :meth:`waits` (``skipped``: its lines): until the soonest stated reset when
        every skip states one (a budget's or a provider's), else :data:`RECHECK` (a provider's
        concurrency frees up without notice); never less than :data:`RECHECK`, so that a reset
        already due cannot spin the loop."""
        waits = [summary.retry_after for summary in skipped or ()]
        if not waits or any(wait is None for wait in waits):
            return RECHECK
        return max(RECHECK, min(wait for wait in waits if wait is not None))

    def all_open(
        self, attempts: int, stopped: bool, open_skips: Sequence[tuple[float, Candidate]] | None
    ) -> Candidate | None:
        """The candidate to try anyway when nothing was tried and open or recovering breakers
        were why: the one whose breaker opened (or began its ramp) first (``open_skips``: each
        with that time)."""
        if attempts or stopped or not open_skips:
            return None
        return min(open_skips, key=lambda skipped: skipped[0])[1]

    # -- about the whole request (``request_answers.py``) ---------------------------------------

    @staticmethod
    def caller(judged: Sequence[Judged]) -> Downgrade | Refuse | None:
        """What the caller's caps make of a request (the module's caller's caps table): ``None``
        serves it as asked; ``judged`` are its caps past their limits, the caller's table before the
        session's, as ``resilience/caller_limits.py`` found them."""
        return caller_answer(judged) if judged else None

    #: Whether and on whom a stream that broke after commit is continued: the resume table,
    #: answered in ``request_answers.py`` (:func:`~asgi_router.attempts.request_answers.continuation`).
    resume = staticmethod(continuation)

    # -- after a call --------------------------------------------------------------------------

    def retries_in_place(self, plan: Plan, inbound: Sequence[tuple[bytes, bytes]]) -> int:
        """How often each candidate of ``plan`` may be retried in place for this request (the
        module's retries table).

        ``0`` for a client that retries on its own (the official SDKs send
        ``x-stainless-retry-count``): its tries times ours would multiply the load on a failing
        upstream. A hedged plan races instead (its driver does not ask).
        """
        retries = retries_for(plan, self._policy.retries)
        if retries == 0 or client_retries(inbound):
            return 0
        return retries

    @staticmethod
    def passes_through(reason: Reason, failover_on: frozenset[Reason]) -> bool:
        """Whether an answer with ``reason`` is passed through to the client (else failed over).

        ``call.py`` asks before reading a non-2xx body (one passed through is read whole and
        kept; one failed over is read bounded, to refine its reason and find its retry hint)
        and again once a ``client_error`` is refined (a context-window 400 may fail over).
        """
        return reason not in failover_on

    def after(
        self,
        result: Attempted,
        failover_on: frozenset[Reason],
        deadline: float,
        provider: str,
        retry: int = 0,
        retries: int = 0,
        key: str | None = None,
    ) -> Next:
        """What next after a call that ended in ``result`` (the module's second table).

        ``retry`` is how many retries of this candidate were made, ``retries`` how many are
        allowed; a :class:`Retry` answer holds a token of ``provider``'s retry budget, which the
        driver gives back when the retry has ended (:meth:`end_retry`). A 429 of the member
        ``key`` marks it over budget until its ``Retry-After``.
        """
        if isinstance(result, Committed):
            return COMMIT
        if isinstance(result, Refused):
            return PASS_THROUGH
        if result.fatal:
            return FATAL
        reason = result.reason
        if reason == "rate_limited" and key is not None:  # its wait marks the member over budget until then
            self._book.rate_limited(provider, key, result.retry_after)
        if reason not in failover_on:
            # A group that does not fail over on this reason (say, timeouts) stops here; with
            # no response to pass through, the client gets the plan's error so far.
            return EXHAUSTED
        if retry >= retries or reason not in self._retry_on:
            return FAIL_OVER
        policy = self._policy
        wait = retry_wait(
            result.retry_after,
            retry,
            backoff=policy.backoff,
            max_retry_wait=policy.max_retry_wait,
            remaining=deadline - self._clock(),
            random=self._random,
        )
        if wait is None:
            return FAIL_OVER
        if not self._gate.begin_retry(provider):
            return _RETRY_REFUSED
        return Retry(wait)

    def end_retry(self, provider: str) -> None:
        """A retry that held a token of ``provider``'s retry budget has ended: give it back."""
        self._gate.end_retry(provider)
