"""Prometheus metrics: the ``asgi_router_*`` families, fed from each finished request.

Needs ``prometheus_client`` (the ``metrics`` extra); settings with a ``metrics_route`` are
refused without it, and nothing imports this module otherwise. The names and labels are a
contract (dashboards and alerts are built on them)::

    asgi_router_requests_total{path, status}            counter
    asgi_router_request_duration_seconds{path}          histogram
    asgi_router_attempts_total{candidate, outcome, reason}
    asgi_router_time_to_first_byte_seconds{candidate}   histogram, buckets up to 60 s
    asgi_router_breaker_state{candidate}                gauge: 0 closed, 1 half-open, 2 open
    asgi_router_provider_breaker_state{provider}        gauge, the same values
    asgi_router_tokens_total{candidate, kind}           kind: prompt | completion (reported usage only)
    asgi_router_cost_usd_total{candidate}               where the catalog has prices
    asgi_router_in_flight{provider}                     gauge
    asgi_router_hedges_total{outcome}                   won | lost | failed | denied
    asgi_router_events_dropped_total                    records event sinks' full queues turned away

Every label value comes from configuration or from a fixed vocabulary, never from what a client
sent: a candidate the configuration does not name (a client's direct ``provider/model-id``) is
folded into ``provider/*``, so no client can make the label sets grow. ``path`` is one of the
configured routes, ``status`` an HTTP status.

Each router owns a registry of its own, so two routers in one process do not collide. Under
several worker processes (``uvicorn --workers N``) each would count only its own requests, so
when ``PROMETHEUS_MULTIPROC_DIR`` is set (before the process starts) ``prometheus_client``'s
multiprocess mode is used: every worker writes its values to files in that directory, and a
scrape of any worker reads them all. Gauges then need a rule to combine the workers' values:
breaker states report the worst worker's (``livemax``), in-flight counts the sum (``livesum``),
both over live processes only; a worker that stops takes its gauge files with it
(:meth:`RouterMetrics.close`).

Counters and histograms are fed on the request's own task when it ends (:meth:`observe`): a few
dictionary lookups and increments, cheaper than handing the record to a queue. The children
for each label set are looked up once and kept.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from asgi_router.observability.events import RequestRecord

__all__ = ["BREAKER_VALUES", "CONTENT_TYPE", "DURATION_BUCKETS", "TTFB_BUCKETS", "RouterMetrics", "multiprocess_dir"]

#: The Prometheus text format's media type.
CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
#: Seconds; chat requests run from well under a second to minutes of streaming.
DURATION_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
#: Seconds to the first body byte: a streamed token within a second, a whole answer within a minute.
TTFB_BUCKETS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0)
#: A breaker's phase as the gauges report it.
BREAKER_VALUES: Final = {"closed": 0, "half_open": 1, "open": 2}


def multiprocess_dir() -> str | None:
    """The directory ``prometheus_client`` shares values through, when multiprocess mode is on."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir")


class RouterMetrics:
    """One router's metric families and the children it has used, by label values.

    ``named`` is the configuration's ``provider/model-id`` set (every other candidate is folded
    into ``provider/*``).
    """

    def __init__(self, named: Iterable[str]) -> None:
        self.multiprocess = multiprocess_dir() is not None
        # In multiprocess mode the values live in files; a scrape collects them all afresh.
        registry = None if self.multiprocess else CollectorRegistry()
        self.registry = registry
        self._named = frozenset(named)
        self.requests = Counter(
            "asgi_router_requests_total", "Chat requests answered, by route and status.", ["path", "status"],
            registry=registry,
        )  # fmt: skip
        self.duration = Histogram(
            "asgi_router_request_duration_seconds", "Seconds from a request's arrival to its last byte.", ["path"],
            buckets=DURATION_BUCKETS, registry=registry,
        )  # fmt: skip
        self.attempts = Counter(
            "asgi_router_attempts_total", "Attempts and skips, by candidate, outcome and reason.",
            ["candidate", "outcome", "reason"], registry=registry,
        )  # fmt: skip
        self.ttfb = Histogram(
            "asgi_router_time_to_first_byte_seconds", "Seconds from sending an attempt to its first body byte.",
            ["candidate"], buckets=TTFB_BUCKETS, registry=registry,
        )  # fmt: skip
        self.breaker_state = Gauge(
            "asgi_router_breaker_state", "A candidate's circuit breaker: 0 closed, 1 half-open, 2 open.",
            ["candidate"], registry=registry, multiprocess_mode="livemax",
        )  # fmt: skip
        self.provider_breaker_state = Gauge(
            "asgi_router_provider_breaker_state", "A provider's circuit breaker: 0 closed, 1 half-open, 2 open.",
            ["provider"], registry=registry, multiprocess_mode="livemax",
        )  # fmt: skip
        self.tokens = Counter(
            "asgi_router_tokens_total", "Tokens served responses used, as their upstream reported.",
            ["candidate", "kind"], registry=registry,
        )  # fmt: skip
        self.cost = Counter(
            "asgi_router_cost_usd_total", "USD served responses cost, for models with catalog prices.",
            ["candidate"], registry=registry,
        )  # fmt: skip
        self.in_flight = Gauge(
            "asgi_router_in_flight", "Attempts in flight to a provider.", ["provider"],
            registry=registry, multiprocess_mode="livesum",
        )  # fmt: skip
        self.hedges = Counter(
            "asgi_router_hedges_total", "Hedges of hedging groups: won, lost, failed, or denied by the budget.",
            ["outcome"], registry=registry,
        )  # fmt: skip
        self.events_dropped = Counter(
            "asgi_router_events_dropped_total", "Finished requests an event sink's full queue turned away.",
            registry=registry,
        )  # fmt: skip
        self._dropped_seen = 0
        # Children by label values: bounded, since every label value is bounded (module docstring).
        self._requests: dict[tuple[str, int], Counter] = {}
        self._durations: dict[str, Histogram] = {}
        self._attempts: dict[tuple[str, str, str], Counter] = {}
        self._ttfbs: dict[str, Histogram] = {}
        self._labels: dict[str, str] = {}

    def candidate_label(self, key: str) -> str:
        """``key`` if the configuration names it, else ``provider/*``."""
        label = self._labels.get(key)
        if label is None:
            label = key if key in self._named else key.split("/", 1)[0] + "/*"
            if len(self._labels) < 4096:  # keys a client chose are folded again next time, not kept
                self._labels[key] = label
        return label

    def observe(self, record: RequestRecord, path: str) -> None:
        """Count one finished request on ``path`` and each of its attempts."""
        status = record.status
        counter = self._requests.get((path, status))
        if counter is None:
            counter = self._requests[(path, status)] = self.requests.labels(path, str(status))
        counter.inc()
        histogram = self._durations.get(path)
        if histogram is None:
            histogram = self._durations[path] = self.duration.labels(path)
        histogram.observe(record.latency)
        for event in record.events:
            candidate = self.candidate_label(event.candidate)
            key = (candidate, event.outcome, event.reason)
            counter = self._attempts.get(key)
            if counter is None:
                counter = self._attempts[key] = self.attempts.labels(*key)
            counter.inc()
            if event.ttfb is not None:
                histogram = self._ttfbs.get(candidate)
                if histogram is None:
                    histogram = self._ttfbs[candidate] = self.ttfb.labels(candidate)
                histogram.observe(event.ttfb)
        winner = record.winner
        if winner is not None:
            if record.tokens_measured and record.prompt_tokens is not None and record.completion_tokens is not None:
                candidate = self.candidate_label(winner)
                self.tokens.labels(candidate, "prompt").inc(record.prompt_tokens)
                self.tokens.labels(candidate, "completion").inc(record.completion_tokens)
            if record.cost_usd:
                self.cost.labels(self.candidate_label(winner)).inc(record.cost_usd)
        if record.hedge is not None:
            self.hedges.labels(record.hedge).inc()

    def set_breaker(self, candidate: str, phase: str) -> None:
        self.breaker_state.labels(candidate).set(BREAKER_VALUES[phase])

    def set_provider(self, provider: str, phase: str, in_flight: int) -> None:
        self.provider_breaker_state.labels(provider).set(BREAKER_VALUES[phase])
        self.in_flight.labels(provider).set(in_flight)

    def count_dropped(self, total: int) -> None:
        """Bring ``asgi_router_events_dropped_total`` up to ``total`` (the event bus's own count)."""
        if total > self._dropped_seen:
            self.events_dropped.inc(total - self._dropped_seen)
            self._dropped_seen = total

    def exposition(self) -> bytes:
        """The text format of every family (in multiprocess mode: of every worker, and of every
        other metric written to the directory, the host app's own included)."""
        if self.multiprocess:
            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
            return generate_latest(registry)
        assert self.registry is not None
        return generate_latest(self.registry)

    def close(self) -> None:
        """This process stops: in multiprocess mode its gauges must not be counted any more."""
        if self.multiprocess:
            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]
