"""Waiting for capacity: one group's queue of requests that found every member full.

When a request of a group with ``queue`` finds no member it may call *only* because of
capacity (every candidate skipped ``over_budget`` or ``saturated``; a provider's rate-limit
headers count as budget), it joins its group's :class:`CapacityQueue` instead of being
answered at once. Only the request at the head re-checks capacity, so the group is served in
order: first in, first out within a priority, ``high`` before ``normal`` before ``low``. Each
re-check is a new plan (the ``model`` resolved again, the strategy's order afresh), not the
old plan walked again. A
waiting request holds no upstream connection and no gate lease; it is a task parked on an
event. It leaves the queue when it is served, when its wait (``max_wait``, and never past its
``deadline``) runs out, or when its client leaves (its task is cancelled).

Priorities can starve: while ``high`` requests keep arriving, a ``low`` one never reaches the
head, and leaves after ``max_wait`` with the answer it would have had without the queue. The
queue is per process; the capacity it waits for (budgets, rate limits) is counted fleet-wide
where the state is shared.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Final

from asgi_router.config.capacity_settings import PRIORITIES, Priority, QueueSettings
from asgi_router.resilience.caller_limits import caller_name

__all__ = ["RECENT_WAITS", "RECHECK", "CapacityQueue", "Ticket"]

#: Waits kept per queue for the status page, the oldest dropped first.
RECENT_WAITS: Final = 100

#: Seconds the request at the head of a queue pauses between two plans when no skip said when
#: capacity returns (a provider's concurrency frees up without notice), and the least it pauses
#: when they did (the decision point's ``Decisions.recheck``).
RECHECK: Final = 0.02


class Ticket:
    """One waiting request's place in its queue."""

    __slots__ = ("joined", "left", "priority", "turn")

    def __init__(self, priority: Priority, joined: float) -> None:
        self.priority = priority
        self.joined = joined
        #: When its request's wait ended with a candidate admitted (``None``: not yet, or never).
        self.left: float | None = None
        #: Set when the ticket becomes the head of its queue.
        self.turn = asyncio.Event()


class CapacityQueue:
    """One group's waiting requests, in order; one per group and router, one event loop."""

    __slots__ = ("_clock", "_lanes", "recent", "settings")

    def __init__(self, settings: QueueSettings, clock: Callable[[], float]) -> None:
        self.settings = settings
        self._clock = clock
        self._lanes: dict[Priority, deque[Ticket]] = {priority: deque() for priority in PRIORITIES}
        #: The latest waits' ``(outcome, seconds)``, newest last (the status page).
        self.recent: deque[tuple[str, float]] = deque(maxlen=RECENT_WAITS)

    def __len__(self) -> int:
        return sum(len(lane) for lane in self._lanes.values())

    def priority(self, header: str | None, principal: object) -> Priority:
        """The request's priority: its header's, if its caller may set one, else ``normal`` (a
        request without a principal is the caller ``anonymous``, as caps and metrics name it)."""
        if header is None or caller_name(principal) not in self.settings.priority_callers:
            return "normal"
        value = header.strip().lower()
        return value if value in ("high", "low") else "normal"  # type: ignore[return-value]

    def join(self, priority: Priority) -> Ticket | None:
        """A place in the queue, or ``None`` when it is full."""
        if len(self) >= self.settings.max_size:
            return None
        ticket = Ticket(priority, self._clock())
        self._lanes[priority].append(ticket)
        self._wake_head()
        return ticket

    def head(self) -> Ticket | None:
        for lane in self._lanes.values():
            if lane:
                return lane[0]
        return None

    async def my_turn(self, ticket: Ticket, within: float) -> bool:
        """Wait (at most ``within`` seconds) until ``ticket`` is the head; whether it is."""
        if self.head() is ticket:
            return True
        ticket.turn.clear()
        try:
            async with asyncio.timeout(within):
                await ticket.turn.wait()
        except TimeoutError:
            pass
        return self.head() is ticket

    def leave(self, ticket: Ticket) -> None:
        """``ticket`` is served, timed out or its client left: the next in line is woken."""
        lane = self._lanes[ticket.priority]
        try:
            lane.remove(ticket)
        except ValueError:
            return
        self._wake_head()

    def _wake_head(self) -> None:
        head = self.head()
        if head is not None:
            head.turn.set()
