"""Why a candidate is skipped without being called: one type for every admission check.

The attempt loop asks two checks before each attempt: the bookkeeper (``context_window``,
``over_budget``; see ``bookkeeping.py``) and the gate (``circuit_open``, ``saturated``; see
``gate.py``). Either answers ``None`` to go ahead or a :class:`Skip`, which becomes the
``skipped`` event and the line in an exhausted plan's error.
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
    #: ``circuit_open``: when the breaker opened (the all-open fallback tries the oldest).
    opened_at: float | None = None
    #: What the operator can fix, for the client's error line (``provider_not_configured``:
    #: which variable is unset).
    detail: str | None = None
