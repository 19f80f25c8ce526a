"""Hedging: race the next candidate against one that has not committed after ``hedge_after``.

Opt-in per group (``hedge_after = 0.8``). A slow first byte is the commonest LLM failure that
is not an error: the request may well succeed, only late. Waiting out the first-byte timeout
before failing over costs the user that whole timeout; hedging starts the next candidate once
the current one has been silent for ``hedge_after`` seconds and lets both run. The first to
*commit* (``docs/errors-and-headers.md``) wins; the other is cancelled, which closes its upstream response and
releases its connection, so the upstream sees the disconnect and stops generating. Nothing has
been sent to the client until a winner is chosen, so hedging can never splice two answers:
there is no hedging after commit.

Rules, all chosen for predictable cost:

* at most two attempts run at once, and at most one hedge is started per request;
* a failure while the other still runs starts nothing new (the survivor carries on); when
  nothing runs, the next candidate starts at once, as in the plain loop;
* a hedge costs a credit from the group's bucket (:meth:`RoutingStats.spend_hedge_credit`):
  each request earns ``hedge_budget`` of one (default 0.1), so at most about that share of the
  group's traffic is ever doubled, however slow its upstreams get;
* both attempts are evented: the loser as ``aborted`` with reason ``hedge_lost``; the request's
  record says what became of the hedge (``hedge`` on the record: ``won``, ``lost``, ``failed``,
  or ``denied`` when one was due but the budget had no credit);
* every racer holds a gate lease (``gate.py``) from admission; a loser's is finished with
  ``hedge_lost`` (or ``client_disconnected``), which counts neither for nor against its
  breakers: losing a race says nothing about a provider's health;
* no same-candidate retries: the race is the group's second chance. The request's budgets
  (``max_attempts``, ``deadline``) still bound it, and when every candidate was skipped for an
  open breaker, :meth:`AttemptLoop.run` tries the oldest one after the race, as for any plan.

The steps themselves (admit, call, event, account) are :class:`RequestAttempts`' own, shared with
the plain loop, and what each result means is the decision point's (``decisions.py``); this
module only decides *when* to start them and which result wins. Each racer
is an asyncio task of its own, so that a loser can be cancelled alone; every racer is waited for
before the race returns (or re-raises, when the client left), so none outlives its request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from asgi_router.attempts.outcomes import Attempted, Committed, Ready, Refused
from asgi_router.attempts.steps import RequestAttempts
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import RouterError
from asgi_router.resilience.stats import RoutingStats
from asgi_router.routing.policy import GroupPolicy

__all__ = ["race"]


async def race(
    attempts: RequestAttempts,
    policy: GroupPolicy,
    stats: RoutingStats,
    clock: Callable[[], float],
) -> Committed | Refused | RouterError | None:
    """Run the plan with one hedge allowed; ``None`` when every candidate failed or was skipped."""
    assert policy.hedge_after is not None
    hedge_after = policy.hedge_after
    stats.earn_hedge_credit(policy.name, policy.hedge_budget)
    waiting = list(attempts.candidates())
    running: dict[asyncio.Task[Attempted], Ready] = {}
    launched: dict[Ready, float] = {}
    decided: Committed | Refused | RouterError | None = None
    hedged = False
    state = attempts.state
    hedge: Ready | None = None  # the attempt started as the hedge, once one is

    def start_next() -> Ready | None:
        while waiting:
            ready = attempts.prepare(waiting.pop(0))
            if ready is not None:
                launched[ready] = clock()
                running[asyncio.ensure_future(attempts.attempt(ready))] = ready
                return ready
        return None

    try:
        start_next()
        while running:
            timeout: float | None = None
            if not hedged and len(running) == 1 and waiting:
                (current,) = running.values()
                timeout = max(0.0, launched[current] + hedge_after - clock())
            done, _ = await asyncio.wait(running, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if not done:
                hedged = True  # one chance per request, taken or refused by the budget
                if policy.hedge_budget > 0 and stats.spend_hedge_credit(policy.name):
                    hedge = start_next()
                    if hedge is None:
                        stats.earn_hedge_credit(policy.name, 1.0)  # nothing left to race
                else:
                    state.hedge = "denied"
                continue
            for task in _in_launch_order(done, running):
                ready = running.pop(task)
                result = task.result()
                if decided is not None:  # finished in the same turn as the winner: it lost
                    await attempts.discard(ready, result, "hedge_lost")
                    continue
                decided = attempts.outcome(attempts.settle(ready, result), result)
                if ready is hedge:
                    state.hedge = "won" if decided is not None else "failed"
            if decided is not None:
                break
            if not running:
                start_next()
        await _stop(attempts, running, "hedge_lost")
    except BaseException:
        # The client left (or the router failed): every racer is cancelled and waited for, and
        # a winner chosen meanwhile will never be sent.
        await _stop(attempts, running, "client_disconnected")
        await attempts.abandon(decided)
        attempts.state.in_flight = None
        raise
    finally:
        if hedge is not None and state.hedge is None:
            state.hedge = "lost"  # stopped while another attempt decided (or the client left)
    return decided


def _in_launch_order(
    done: set[asyncio.Task[Attempted]], running: dict[asyncio.Task[Attempted], Ready]
) -> list[asyncio.Task[Attempted]]:
    """The finished racers in the order they were started (``running`` keeps that order)."""
    return [task for task in running if task in done]


async def _stop(attempts: RequestAttempts, running: dict[asyncio.Task[Attempted], Ready], reason: Reason) -> None:
    """Cancel every racer still running, wait for each to end (its response closed, its
    connection released), and event it as given up with ``reason``: one that finished anyway
    before its cancellation landed is discarded with its result (a committed response closed).
    A racer is forgotten only once discarded, so a second call (the client left while the first
    waited) finishes the job."""
    if not running:
        return
    for task, ready in running.items():
        if not task.cancelling():  # a first call cancelled it already: let its clean-up finish
            ready.cancel_reason = reason
            task.cancel()
    # Shielded: the racers' clean-up must finish even if this task is cancelled once more.
    await asyncio.shield(asyncio.wait(list(running)))
    for task, ready in list(running.items()):
        del running[task]
        await attempts.discard(ready, None if task.cancelled() else task.result(), reason)
