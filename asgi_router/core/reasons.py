"""The bounded vocabulary of why an attempt ended: every event, error line and metric says one.

A reason is one of a fixed set of names, so that logs, events and error messages can be counted
and alerted on without parsing text, and a client can never add a value of its own. What each
status or failure *means* (which reason, and whether it fails over by default) is decided in
:mod:`asgi_router.core.classify`, what is done about it in ``asgi_router.attempts.decisions``
(whose unit tests fail when a reason is added here without a row); ``docs/errors-and-headers.md``
lists them all.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["Reason"]

Reason = Literal[
    "served",
    "connect_error",
    "timeout",
    "rate_limited",
    "upstream_5xx",
    "auth_error",
    "billing",
    "model_not_found",
    "client_error",
    "stream_interrupted",
    "provider_not_configured",
    "client_disconnected",
    "circuit_open",
    "recovering",
    "saturated",
    "budget_exhausted",
    "over_budget",
    "context_window",
    "hedge_lost",
    "router_error",
    "protocol_mismatch",
    "guardrail_failed",
]
