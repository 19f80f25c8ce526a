"""Settings for retries, budgets, circuit breakers, health probes and event sinks.

They live apart from the routing settings so that each reads as one table of defaults (the
docs' "Resilience" page explains every key). The defaults and why:

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
  low); open 30 s (Envoy's base ejection time), then a real request probes every 5 s
  (``probe_interval``): a failed probe no longer doubles the wait, so a recovered upstream is back
  within ``open_for`` of its recovery whatever the outage did (``max_open_for`` is still accepted).
* ramp 10 % → 50 % → 100 %, a step per 5 successes in a row or 10 s without a failure: Envoy's
  slow start; a barely recovered service is not knocked over again by its whole share at once.
* slowness (opt-in, ``latency_target``): p90 time to first byte above twice the target *and* more
  than 5 % errors opens the breaker; slow alone only demotes.
"""

from __future__ import annotations

from typing import Annotated, Final, Self

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from asgi_router.config.strict_settings import StrictSettings
from asgi_router.core.reasons import Reason

__all__ = [
    "BackoffSettings",
    "BreakerSettings",
    "DEFAULT_BREAKER_FAILURES",
    "DEFAULT_RETRY_ON",
    "EventSettings",
    "Fraction",
    "Ramp",
    "HealthSettings",
    "RetryBudgetSettings",
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
#: Traffic shares a recovering breaker steps through before full traffic (each above 0, below 1).
Ramp = list[Annotated[float, Field(gt=0.0, lt=1.0)]]


class BackoffSettings(StrictSettings):
    """Full-jitter exponential backoff between retries of the same candidate, in seconds: retry
    *n* (from 0) waits a uniform random time in ``[0, min(cap, base * 2**n))``, so clients that
    failed together do not retry together."""

    base: PositiveFloat = Field(default=0.25, description="Retry *n* waits up to `min(cap, base * 2**n)` seconds.")
    cap: PositiveFloat = Field(default=4.0, description="The longest backoff, in seconds; at least `base`.")

    @model_validator(mode="after")
    def _check_order(self) -> Self:
        if self.cap < self.base:
            raise ValueError("backoff.cap must be at least backoff.base")
        return self


class RetryBudgetSettings(StrictSettings):
    """Per provider, retries in flight may not exceed ``max(min_concurrent, ratio * attempts in
    flight)``: during an outage retries add at most that share to the traffic instead of
    multiplying it, while a lone failing request still gets its retries."""

    ratio: Fraction = Field(
        default=0.2,
        description="Retries in flight per provider, as a share (above 0, at most 1) of its attempts in flight ...",
    )
    min_concurrent: NonNegativeInt = Field(default=3, description="... but always at least this many.")


class BreakerSettings(StrictSettings):
    """Circuit breakers: one per candidate (``provider/model-id``), counting the reasons in
    ``failure_reasons``, and one per provider, counting connect errors and timeouts before any
    response. An open breaker skips its candidate (reason ``circuit_open``) without a connection."""

    enabled: bool = Field(
        default=True, description="Breakers on; `false` turns them off (health probes then act on nothing)."
    )
    consecutive_failures: PositiveInt = Field(default=5, description="Open after this many failures in a row ...")
    failure_rate: Fraction = Field(
        default=0.5, description="... or when at least this share (above 0, at most 1) of the window's calls failed ..."
    )
    min_requests: PositiveInt = Field(default=20, description="... once the window holds at least this many calls.")
    window: PositiveFloat = Field(
        default=60.0, description="The sliding window the failure rate is counted over, in seconds."
    )
    open_for: PositiveFloat = Field(
        default=30.0,
        description="How long a breaker stays open before its first probe, in seconds; after that a real "
        "request probes every `probe_interval`.",
    )
    probe_interval: PositiveFloat = Field(
        default=5.0,
        description="While open after the first `open_for`: at most one real request every this many seconds "
        "is admitted as a probe (a failed probe waits this long again, never longer).",
    )
    max_open_for: PositiveFloat = Field(
        default=300.0,
        description="Accepted so that older files load; unused (a failed probe no longer doubles the wait: "
        "see `probe_interval`).",
    )
    half_open_probes: PositiveInt = Field(
        default=1, description="Requests admitted at once as probes while half-open; that many successes close it."
    )
    probe_timeout: PositiveFloat = Field(
        default=30.0,
        description="Seconds after which a probe with no result frees its slot, so a stuck probe cannot "
        "keep the breaker half-open.",
    )
    failure_reasons: frozenset[Reason] = Field(
        default=DEFAULT_BREAKER_FAILURES,
        description="The reasons that count against a candidate's breaker: the ones that mean "
        '"unhealthy", not "refused" (a 429 is not among them by default).',
    )
    ramp: Ramp = Field(
        default_factory=lambda: [0.1, 0.5],
        description="Shares of traffic (each above 0, below 1, rising) a breaker that closes after an outage "
        "takes, step by step, before all of it; requests beyond the share skip it as `recovering`. `[]`: "
        "close at once.",
    )
    ramp_successes: PositiveInt = Field(
        default=5, description="Successes in a row that advance a recovering breaker one step ..."
    )
    ramp_step: PositiveFloat = Field(
        default=10.0, description="... or seconds without a failure, whichever comes first; a failure re-opens it."
    )
    latency_target: PositiveFloat | None = Field(
        default=None,
        description="Seconds to the first byte of a streamed answer each candidate should meet (unset: "
        "slowness is not judged); providers and member tables may set their own.",
    )
    slow_factor: float = Field(
        default=2.0,
        gt=1.0,
        description="A candidate whose p90 time to first byte over `window` exceeds this many times its "
        "target (once the window holds `min_requests` streamed calls) is slow: tried after the others ...",
    )
    slow_error_rate: Fraction = Field(
        default=0.05,
        description="... and opened (open cause `slow`) if more than this share of those calls failed too.",
    )

    @model_validator(mode="after")
    def _check_order(self) -> Self:
        if self.max_open_for < self.open_for:
            raise ValueError("breaker.max_open_for must be at least breaker.open_for")
        return self

    @model_validator(mode="after")
    def _check_ramp(self) -> Self:
        if any(later <= earlier for earlier, later in zip(self.ramp, self.ramp[1:], strict=False)):
            raise ValueError("breaker.ramp must rise: each share above the one before it")
        return self


class HealthSettings(StrictSettings):
    """Active health probes for one provider: ``GET base_url + path`` every ``interval`` seconds,
    from lifespan startup to shutdown, on a client of their own. They act through the provider's
    breaker, so they do nothing while breakers are off."""

    interval: PositiveFloat = Field(default=5.0, description="Seconds between probes.")
    path: str = Field(
        default="/models", description="Below `base_url`; starts with `/`, without whitespace, query or fragment."
    )
    timeout: PositiveFloat = Field(default=2.0, description="Seconds a probe may take; a slower answer is a failure.")
    unhealthy_threshold: PositiveInt = Field(
        default=2, description="Probe failures in a row that open the provider's breaker."
    )

    @field_validator("path")
    @classmethod
    def _check_path(cls, value: str) -> str:
        if not value.startswith("/") or any(ch in value for ch in "\r\n\t ?#") or any(ord(ch) < 32 for ch in value):
            raise ValueError("health.path must start with '/' and hold no whitespace, query or fragment")
        return value


class EventSettings(StrictSettings):
    """Where finished requests go: a bounded queue per event sink, and the ring of recent
    requests that ``router.recent`` reads."""

    queue_size: PositiveInt = Field(
        default=1024,
        description="Records queued per sink before new ones are dropped (and counted); a request never waits.",
    )
    recent: NonNegativeInt = Field(default=100, description="Finished requests kept for `router.recent` (`0`: none).")
    shutdown_grace: NonNegativeFloat = Field(
        default=2.0, description="Seconds queued records may take to reach their sinks at shutdown."
    )
