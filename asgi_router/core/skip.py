"""Why a candidate is skipped without being called: one type for every admission check.

Before each attempt the decision point (``asgi_router.attempts.decisions``) answers admit or
:class:`Skip`, with the reason (``provider_not_configured``, ``protocol_mismatch``,
``budget_exhausted``, ``context_window``, ``over_budget``, ``circuit_open``, ``recovering``, ``saturated``). A
skip becomes the ``skipped`` event and the line in an exhausted plan's error.
"""

from __future__ import annotations

from dataclasses import dataclass

from asgi_router.core.reasons import Reason

__all__ = ["Skip"]


@dataclass(frozen=True, slots=True)
class Skip:
    """A candidate not tried, and why."""

    reason: Reason
    #: ``over_budget``: seconds until the member's rpm/tpm usage frees up (a Retry-After).
    retry_after: float | None = None
    #: ``circuit_open`` / ``recovering``: when the breaker opened, or its ramp began (the
    #: all-open fallback tries the oldest).
    opened_at: float | None = None
    #: ``circuit_open``: why the breaker opened (``failures`` or ``slow``), for the event.
    cause: str | None = None
    #: What the operator can fix, for the client's error line (``provider_not_configured``:
    #: which variable is unset).
    detail: str | None = None
    #: Nothing after this candidate is tried either (``max_attempts`` or the deadline reached).
    stops: bool = False
