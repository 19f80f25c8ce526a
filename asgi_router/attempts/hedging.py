"""Hedging: race the next candidate against one that has not committed after ``hedge_after``.

Opt-in per group (``hedge_after = 0.8``). A slow first byte is the commonest LLM failure that
is not an error: the request may well succeed, only late. Waiting out the first-byte timeout
before failing over costs the user that whole timeout; hedging starts the next candidate once
the current one has been silent for ``hedge_after`` seconds and lets both run. The first to
*commit* (DESIGN.md §5) wins; the other is cancelled, which closes its upstream response and
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
* both attempts are evented: the loser as ``aborted`` with reason ``hedge_lost``;
* every racer holds a gate lease (``gate.py``) from admission; a loser's is finished with
  ``hedge_lost`` (or ``client_disconnected``), which counts neither for nor against its
  breakers: losing a race says nothing about a provider's health;
* no same-candidate retries: the race is the group's second chance. The request's budgets
  (``max_attempts``, ``deadline``) still bound it, and when every candidate was skipped for an
  open breaker, :meth:`AttemptLoop.run` tries the oldest one after the race, as for any plan.

The steps themselves (admit, call, event, account) are :class:`RequestAttempts`' own, shared with
the plain loop; this module only decides *when* to start them and which result wins.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

from asgi_router.core.reasons import Reason
from asgi_router.resilience.stats import RoutingStats
from asgi_router.routing.policy import GroupPolicy

if TYPE_CHECKING:
    from asgi_router.attempts.outcomes import Attempted, Committed, Ready, Refused
    from asgi_router.attempts.steps import RequestAttempts
    from asgi_router.core.errors import RouterError

__all__ = ["race"]


class _Inbox:
    """Finished attempts, in order. A deque rather than a memory stream: a wait that is
    cancelled (the hedge timer, the client leaving) can never lose a result, so a committed
    response that nobody picked up is still there to be closed."""

    __slots__ = ("_wake", "items")

    def __init__(self) -> None:
        self.items: deque[tuple[Ready, Attempted]] = deque()
        self._wake = anyio.Event()

    def put(self, ready: Ready, result: Attempted) -> None:
        self.items.append((ready, result))
        self._wake.set()

    async def wait(self) -> None:
        """Return once an item is in (at once when one is)."""
        while not self.items:
            await self._wake.wait()
            self._wake = anyio.Event()


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
    waiting = list(attempts.plan.candidates)
    inbox = _Inbox()
    running: dict[Ready, anyio.CancelScope] = {}
    launched: dict[Ready, float] = {}
    decided: Committed | Refused | RouterError | None = None
    hedged = False

    async def run_one(ready: Ready, scope: anyio.CancelScope) -> None:
        with scope:
            inbox.put(ready, await attempts.attempt(ready))

    def start_next(tasks: TaskGroup) -> bool:
        while waiting:
            ready = attempts.prepare(waiting.pop(0))
            if ready is not None:
                running[ready] = anyio.CancelScope()
                launched[ready] = clock()
                tasks.start_soon(run_one, ready, running[ready])
                return True
        return False

    async def discard_all(reason: Reason) -> None:
        """Event every attempt still counted as running; close results that came in too late."""
        with anyio.CancelScope(shield=True):
            while inbox.items:
                ready, result = inbox.items.popleft()
                del running[ready]
                await attempts.discard(ready, result, reason)
            for ready in running:
                await attempts.discard(ready, None, reason)

    try:
        async with anyio.create_task_group() as tasks:
            start_next(tasks)
            while running:
                if not hedged and len(running) == 1 and waiting:
                    (current,) = running
                    with anyio.move_on_after(max(0.0, launched[current] + hedge_after - clock())):
                        await inbox.wait()
                    if not inbox.items:
                        hedged = True  # one chance per request, taken or refused by the budget
                        if policy.hedge_budget > 0 and stats.spend_hedge_credit(policy.name):
                            if not start_next(tasks):
                                stats.earn_hedge_credit(policy.name, 1.0)  # nothing left to race
                        continue
                else:
                    await inbox.wait()
                ready, result = inbox.items.popleft()
                del running[ready]
                decided = attempts.settle(ready, result)
                if decided is not None:
                    break
                if not running:
                    start_next(tasks)
            for ready, scope in running.items():
                ready.cancel_reason = "hedge_lost"
                scope.cancel()
            # leaving the task group waits for the losers' clean-up: their connections close
    except BaseException:
        # The client left (or the router failed): every attempt still running was cancelled,
        # and a winner chosen meanwhile will never be sent.
        await discard_all("client_disconnected")
        await attempts.abandon(decided)
        attempts.record.in_flight = None
        raise
    await discard_all("hedge_lost")
    return decided
