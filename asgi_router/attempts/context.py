"""What every attempt of a router needs besides its request: built once per router.

The attempt loop (``loop.py``), one request's steps (``steps.py``) and a single upstream call
(``call.py``) all read these. They are one public, frozen record, so that each of those modules
reads the router's parts by name instead of reaching into another class's private attributes.
The record builds the router's decision point (``decisions.py``) from its parts, so whoever
wires a router passes the parts only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from asgi_router.attempts.bookkeeping import Bookkeeper
from asgi_router.attempts.decisions import Decisions
from asgi_router.resilience.gate import Gate
from asgi_router.resilience.retry import RetryPolicy
from asgi_router.transports.provider import ProviderRuntime
from asgi_router.transports.transport import Transport

__all__ = ["AttemptContext"]


@dataclass(frozen=True, slots=True)
class AttemptContext:
    """A router's attempt machinery: where requests go and what keeps count of them."""

    #: Sends every upstream request.
    transport: Transport
    #: Each provider's per-request constants (URLs, header block with its key, timeouts).
    providers: Mapping[str, ProviderRuntime]
    #: Largest non-streaming upstream body read before answering (a larger one fails over).
    max_response_bytes: int
    #: Largest stream event parsed (an Anthropic member's, translated); a larger one fails.
    max_event_bytes: int
    #: The longest upstream wait hint believed (``max_rate_limit_reset``): a longer one is cut to it.
    max_rate_limit_reset: float
    #: Monotonic seconds (tests move it by hand).
    clock: Callable[[], float]
    #: Statistics upkeep and the context-window and rpm/tpm admission checks.
    book: Bookkeeper
    #: Breakers and concurrency caps.
    gate: Gate
    #: Retries in place, backoff, ``max_attempts`` and the request ``deadline``.
    policy: RetryPolicy
    #: Uniform in [0, 1), for the backoff jitter.
    random: Callable[[], float]
    #: The largest request body accepted from a client: no continuation request is larger.
    max_body_bytes: int = 10 * 1024 * 1024
    #: Every admission and every "what next" of the attempt policy, made from the parts above.
    decisions: Decisions = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        decisions = Decisions(self.book, self.gate, self.policy, self.clock, self.random)
        object.__setattr__(self, "decisions", decisions)  # frozen: set once, here
