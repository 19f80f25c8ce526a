"""The decision point's answers about a whole request rather than one candidate.

``Decisions`` (``decisions.py``) stays the one object the pipeline asks; the two answers that
concern the request as a whole are made here, so that ``decisions.py`` keeps to a candidate's
questions (admit it, what next after its call):

* **the caller's caps** (:func:`caller_answer`): given where the caller's and its session's
  tallies stand against their caps (judged by ``resilience/caller_limits.py``, which keeps the
  numbers and does the I/O), serve the ref asked for, :class:`Downgrade` to the table's
  ``downgrade_to``, or :class:`Refuse`;
* **a committed stream that broke** (:func:`continuation`): whether it is continued, and on
  whom (:class:`Continue`);
* **a follow-up of a stored response** (:func:`pinned_plan`, :func:`pinned_error`,
  :func:`stateless_error`): the Responses API's ``previous_response_id`` names a response only
  the provider that produced it holds, and no translated member holds any.

All are pure functions of what they are given. The caller's caps table is in ``decisions.py``'s
docstring with the others; the resume table is here, beside its rule.

**The resume table**: after a committed stream broke (``Decisions.resume``, asked through the
request's retry state, ``retry_state.py``, when the relay reports a break of a stream whose plan
has a candidate whose ``resume`` is not ``"none"`` and whose text so far can be continued):

==========================================================  ==================================
the break                                                   answer
==========================================================  ==================================
not ``stream_interrupted`` nor ``timeout`` (``idle``), or  None: the in-band error
``max_resumes`` continuations made already
the attempt's ``total`` ran out (a continuation never       None: the in-band error
runs past ``total``)
a cut (``stream_interrupted``)                              Continue: the same candidate
                                                            first, then the plan's other
                                                            resumable ones in plan order
a stall (``timeout``), or a cut after a silence of at      Continue: the next resumable
least half the candidate's ``idle`` timeout                 candidate after it first, then
                                                            the others in plan order (not
                                                            the stalled one)
a candidate that already broke earlier in the request       asked after every other one in
                                                            that order (again only when no
                                                            other resumable one is left)
no resumable candidate left in that order                   None: the in-band error
==========================================================  ==================================

**The affinity table**: a Responses request with ``previous_response_id`` (the plan phase asks,
``plan_phase.py``, with what ``response_affinity.py`` remembers of the id):

==========================================================  ==================================
the id                                                      answer
==========================================================  ==================================
one the router does not know (never relayed, forgotten)     the normal plan
one another caller produced                                 404 ``previous_response_not_found``
                                                            (as for an id never seen)
one this caller produced                                    the plan's members on the
                                                            producer's provider, in plan
                                                            order; none: the producer itself.
                                                            No failover to another provider
that pinned plan's walk ends with no answer: all rate-      its 429, with ``Retry-After``
limited
the same, for any other reason (skipped: breaker open,      503 ``previous_response_unavailable``
not configured; or failed)                                  naming the candidate
==========================================================  ==================================

A 404 from the producer (it no longer holds the response) is passed through, as a refusal is
(the pinned plan does not fail over on ``model_not_found``).

Each candidate of a :class:`Continue` is one attempt, admitted as any other (``decisions.py``'s
first table); the first to commit continues the stream, a refused one (a 400 for prefill) moves
on. This is independent of ``retries`` and of a client's retry headers: a client cannot retry a stream
whose 200 it already has.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import Final

from asgi_router.config.provider_settings import ResumeMode
from asgi_router.core.candidate import Candidate
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import AttemptSummary, RouterError
from asgi_router.resilience.caller_limits import Judged
from asgi_router.resilience.caller_tally import PAST, REFUSED, Cap, Table
from asgi_router.routing.plan import Plan

__all__ = [
    "Continue",
    "Downgrade",
    "Refuse",
    "caller_answer",
    "continuable",
    "continuation",
    "not_found",
    "pinned_error",
    "pinned_plan",
    "resume_order",
    "stalled",
]


# -- the caller's caps ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Downgrade:
    """Serve from ``ref`` instead: ``cap`` is past its limit."""

    cap: Cap
    ref: str


@dataclass(frozen=True, slots=True)
class Refuse:
    """Refuse the request: ``cap`` (of ``table``, whose ``downgrade_to`` and ``ttl`` the refusal's
    message and reset read) is reached."""

    cap: Cap
    table: Table


def caller_answer(judged: Sequence[Judged]) -> Downgrade | Refuse | None:
    """The answer for a request whose caps stand as ``judged`` (only caps past their limit need
    be given); ``None`` serves it as asked.

    A refusal wins over a downgrade; the first cap past its limit names the downgrade (the
    caller's table is judged before the session's).
    """
    downgrade: Downgrade | None = None
    for cap, level, table in judged:
        if level == REFUSED or (level == PAST and table.downgrade_to is None):
            return Refuse(cap, table)
        if level == PAST and downgrade is None and table.downgrade_to is not None:
            downgrade = Downgrade(cap, table.downgrade_to)
    return downgrade


# -- a committed stream that broke ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Continue:
    """Continue a committed stream that broke: ask these candidates in turn, each the way its
    ``resume`` says, until one commits."""

    order: tuple[tuple[Candidate, ResumeMode], ...]


# The breaks a stream may be continued after: a cut, or a stall past ``idle``.
_RESUMED: Final[frozenset[Reason]] = frozenset({"stream_interrupted", "timeout"})


def continuable(reason: Reason, resumes: int, max_resumes: int) -> bool:
    """Whether a break for ``reason`` may be continued at all, ``resumes`` of ``max_resumes``
    continuations having been made: a cut or a stall, and continuations left."""
    return reason in _RESUMED and resumes < max_resumes


def resume_order(
    candidates: Sequence[Candidate], modes: Sequence[ResumeMode], broken: Candidate, reason: Reason
) -> list[tuple[Candidate, ResumeMode]]:
    """The candidates to ask to continue, in order, with how each is asked.

    After a cut the candidate that was streaming is asked first: the connection broke, not
    necessarily the model, and the same model continues its own text best. After a stall the
    next resumable candidate in plan order is: a model that went quiet mid-answer may do so
    again, so the stalled one is not asked.
    """
    resumable: list[tuple[Candidate, ResumeMode]] = [
        (candidate, mode) for candidate, mode in zip(candidates, modes, strict=True) if mode != "none"
    ]
    same = [(candidate, mode) for candidate, mode in resumable if candidate == broken]
    others = [(candidate, mode) for candidate, mode in resumable if candidate != broken]
    if reason == "stream_interrupted":
        return same + others
    position = next((index for index, candidate in enumerate(candidates) if candidate == broken), -1)
    after = [(candidate, mode) for candidate, mode in others if candidates.index(candidate) > position]
    return after[:1] + [pair for pair in others if pair not in after[:1]]


def stalled(reason: Reason, silence: float, idle: float) -> bool:
    """Whether a break for ``reason`` after ``silence`` seconds without a byte is a stall: the
    ``idle`` timeout ran out, or the connection dropped after at least half of it (a model that
    went quiet, then was cut off, is as likely to go quiet again)."""
    return reason == "timeout" or (reason == "stream_interrupted" and silence >= idle / 2)


def continuation(
    candidates: Sequence[Candidate],
    modes: Sequence[ResumeMode],
    broken: Candidate,
    reason: Reason,
    resumes: int,
    max_resumes: int,
    broke: Collection[Candidate] = (),
    silence: float = 0.0,
    idle: float = math.inf,
) -> Continue | None:
    """Whether and on whom a stream that broke for ``reason`` after commit is continued;
    ``modes`` are the plan's candidates' ``resume`` in plan order, ``resumes`` the continuations
    made so far, ``broke`` the candidates whose stream broke earlier in the request, ``silence``
    the seconds the stream had been quiet when it broke (``idle``: the broken candidate's idle
    timeout)."""
    if not continuable(reason, resumes, max_resumes):
        return None
    order = resume_order(candidates, modes, broken, "timeout" if stalled(reason, silence, idle) else reason)
    if broke:  # those that broke before are asked again only when no other is left
        order = [pair for pair in order if pair[0] not in broke] + [pair for pair in order if pair[0] in broke]
    return Continue(tuple(order)) if order else None


def pinned_plan(plan: Plan, producer: str) -> Plan:
    """``plan`` for a follow-up of a response ``producer`` made: the plan's members on its
    provider, in plan order, else ``producer`` alone (the affinity table above)."""
    provider, _, model_id = producer.partition("/")
    members = tuple(candidate for candidate in plan.candidates if candidate.provider == provider)
    # A 404 there (``model_not_found``) says the provider no longer holds it: the client's to read.
    failover_on = plan.failover_on - {"model_not_found"}
    return replace(
        plan, candidates=members or (Candidate(provider, model_id),), failover_on=failover_on, pinned=producer
    )


def pinned_error(error: RouterError, producer: str) -> RouterError:
    """A pinned plan's walk that came to ``error``: a 429 stays one; anything else is a 503
    naming the candidate that holds the previous response."""
    if error.status == 429:
        return error
    message = (
        f"the previous response is held by {producer}, which cannot answer now (no other provider holds it); "
        "retry later, or start a new conversation without previous_response_id\n" + error.message
    )
    return RouterError(503, "previous_response_unavailable", message, error.attempts)


def stateless_error(attempts: Sequence[AttemptSummary]) -> RouterError:
    """The 400 for a request that continues a stored response (``previous_response_id``) when
    its plan has translated members only: none of them stores responses, so none can serve it."""
    message = (
        "previous_response_id continues a stored response, and this plan's members serve the Responses API "
        "translated (stateless: nothing is stored); send the whole conversation as input, or use a plan with a "
        "native Responses provider\n" + "\n".join(attempt.line() for attempt in attempts)
    )
    return RouterError(400, "unsupported_on_member", message, tuple(attempts))


def not_found(response_id: str) -> RouterError:
    """The 404 for a response id the router does not know for this caller (never told apart
    from one another caller produced)."""
    shown = response_id if len(response_id) <= 64 and response_id.isascii() and response_id.isprintable() else "?"
    return RouterError(404, "previous_response_not_found", f"Previous response with id '{shown}' not found.")
