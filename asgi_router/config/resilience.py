"""Settings for retries, budgets, circuit breakers, health probes and event sinks.

They live apart from :mod:`asgi_router.config.settings` so that each reads as one table of defaults
(README.rst "Resilience" explains every key). The defaults and why:

* ``retries = 2`` with full-jitter backoff (base 250 ms, cap 4 s): AWS's "Exponential Backoff
  and Jitter" result; two retries turn a typical transient 5xx into a success while at most
  tripling the load one request puts on a provider.
* ``max_retry_wait = 10``: a rate-limit hint longer than that is better answered at once (fail
  over, or a 429 that tells the client how long) than by holding its connection.
* ``deadline = 300``: below the official ``openai`` SDK's 600 s timeout, so the client gets the
  router's 504 with every attempt listed rather than timing out itself.
* ``max_attempts = 10``: a runaway guard for long nested groups, never reached by a sane plan.
* retry budget 20 % of active requests, minimum 3: Envoy's defaults; an outage cannot
  multiply traffic, while a lone failing request still gets its retries.
* breaker: 5 consecutive failures (Envoy's ``consecutive_5xx``), or >= 50 % of >= 20 calls in
  60 s (resilience4j's rate threshold; fewer calls than its 100, as LLM traffic per model is
  low); open 30 s doubling to 5 min (Envoy's base and max ejection times).
"""

from __future__ import annotations

from typing import Annotated, Final, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from asgi_router.core.reasons import Reason

__all__ = [
    "BackoffSettings",
    "BreakerSettings",
    "DEFAULT_BREAKER_FAILURES",
    "DEFAULT_RETRY_ON",
    "EventSettings",
    "Fraction",
    "HealthSettings",
    "RetryBudgetSettings",
    "StrictSettings",
]

#: Reasons worth asking the *same* candidate again. Auth, billing and unknown-model failures are
#: absent: the same key and model id would hit the same wall.
DEFAULT_RETRY_ON: Final[frozenset[Reason]] = frozenset(
    {"connect_error", "timeout", "rate_limited", "upstream_5xx", "stream_interrupted"}
)

#: Reasons that count against a candidate's breaker. A 429 is absent on purpose: it says "not
#: now, for this long", which Retry-After handling already honours, not "unhealthy".
DEFAULT_BREAKER_FAILURES: Final[frozenset[Reason]] = frozenset(
    {"connect_error", "timeout", "upstream_5xx", "stream_interrupted"}
)

Fraction = Annotated[float, Field(gt=0.0, le=1.0)]


class StrictSettings(BaseModel):
    """Base of every settings model: unknown keys refused, immutable once loaded."""

    # hide_input_in_errors: a validation error must never echo a raw api_key back.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class BackoffSettings(StrictSettings):
    """Full-jitter exponential backoff between same-candidate retries, in seconds."""

    base: PositiveFloat = 0.25
    cap: PositiveFloat = 4.0

    @model_validator(mode="after")
    def _check_order(self) -> Self:
        if self.cap < self.base:
            raise ValueError("backoff.cap must be at least backoff.base")
        return self


class RetryBudgetSettings(StrictSettings):
    """Per provider: concurrent retries <= max(min_concurrent, ratio * active attempts)."""

    ratio: Fraction = 0.2
    min_concurrent: NonNegativeInt = 3


class BreakerSettings(StrictSettings):
    """One breaker per candidate (and one per provider for connect errors and timeouts)."""

    enabled: bool = True
    #: Open after this many failures in a row ...
    consecutive_failures: PositiveInt = 5
    #: ... or when at least this share of the calls in the window failed ...
    failure_rate: Fraction = 0.5
    #: ... once the window holds at least this many calls.
    min_requests: PositiveInt = 20
    #: Length of the sliding window, in seconds.
    window: PositiveFloat = 60.0
    #: How long a breaker stays open the first time; doubled on each re-open.
    open_for: PositiveFloat = 30.0
    max_open_for: PositiveFloat = 300.0
    #: Probe requests admitted at once while half-open; that many successes close it.
    half_open_probes: PositiveInt = 1
    #: A probe with no result after this long is forgotten, so a stuck one cannot wedge it.
    probe_timeout: PositiveFloat = 30.0
    failure_reasons: frozenset[Reason] = DEFAULT_BREAKER_FAILURES

    @model_validator(mode="after")
    def _check_order(self) -> Self:
        if self.max_open_for < self.open_for:
            raise ValueError("breaker.max_open_for must be at least breaker.open_for")
        return self


class HealthSettings(StrictSettings):
    """Active health probes for one provider: ``GET base_url + path`` every ``interval`` s."""

    interval: PositiveFloat = 5.0
    path: str = "/models"
    timeout: PositiveFloat = 2.0
    #: Probe failures in a row that open the provider's breaker.
    unhealthy_threshold: PositiveInt = 2

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        if not value.startswith("/") or any(ch in value for ch in "\r\n\t ?#") or any(ord(ch) < 32 for ch in value):
            raise ValueError("health.path must start with '/' and hold no whitespace, query or fragment")
        return value


class EventSettings(StrictSettings):
    """Where attempt events go: bounded per-sink queues and the ring of recent requests."""

    #: Requests queued per sink before new ones are dropped (and counted).
    queue_size: PositiveInt = 1024
    #: Finished requests kept in memory for status pages (``ModelRouter.recent``).
    recent: NonNegativeInt = 100
    #: On shutdown, how long queued records may take to reach their sinks.
    shutdown_grace: NonNegativeFloat = 2.0
