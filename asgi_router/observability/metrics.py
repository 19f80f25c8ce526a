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
    asgi_router_ramp_share{candidate}                   gauge: the share of its traffic a recovering
                                                        candidate takes (1.0 when not ramping)
    asgi_router_slow_requests_total{candidate}          streamed calls whose first byte came later
                                                        than the candidate's latency_target
    asgi_router_tokens_total{candidate, kind}           kind: prompt | completion (reported usage only)
    asgi_router_prompt_cache_tokens_total{candidate, kind}
                                                        kind: read | write, prompt tokens the
                                                        provider's prompt cache served or stored
    asgi_router_cost_usd_total{candidate}               where the catalog has prices
    asgi_router_in_flight{provider}                     gauge
    asgi_router_hedges_total{outcome}                   won | lost | failed | denied
    asgi_router_resumes_total{candidate, outcome}       served | failed (a broken stream continued)
    asgi_router_events_dropped_total                    records event sinks' full queues turned away
    asgi_router_sticky_total{group, outcome}            hit | miss | moved (sticky groups' keyed requests)
    asgi_router_queue_depth{group}                      gauge: requests waiting for capacity
    asgi_router_queue_wait_seconds{group, outcome}      histogram; served | timed_out | full | left
    asgi_router_cache_requests_total{group, outcome}    hit | semantic_hit | miss | bypass (cached groups)
    asgi_router_cache_saved_usd_total{group}            what answers served from the cache first cost
    asgi_router_cache_bytes                             gauge: the response cache's entries
    asgi_router_ledger_rows_total{outcome}              spend rows: written | dropped (with a ledger)
    asgi_router_ledger_buffered_rows                    gauge: spend rows waiting to be written
    asgi_router_ledger_lag_seconds                      gauge: age of the oldest unwritten row (0: none)
    asgi_router_guardrail_total{guardrail, stage, outcome}  pass | block | mask | flag | fail_over

Every label value comes from configuration or from a fixed vocabulary, never from what a client
sent: a candidate the configuration does not name (a client's direct ``provider/model-id``) is
folded into ``provider/*``, so no client can make the label sets grow. ``path`` is one of the
configured routes, ``status`` an HTTP status, ``group`` a configured group, ``guardrail`` a
configured guardrail.

A finished request adds to a :class:`~asgi_router.observability.metrics_tally.Tally` of plain
numbers on its own task (``metrics_tally.py``). A scrape turns the tally into metric families (the
router's registry has the router as its one collector), and reads the gauges (breaker states,
attempts in flight) and the dropped-records count from the router's state through ``readings``:
between scrapes they cost nothing. Each router owns its registry, so two routers in one process
do not collide.

Under several worker processes (``uvicorn --workers N``) each would count only its own requests,
so when ``PROMETHEUS_MULTIPROC_DIR`` is set (before the process starts) ``prometheus_client``'s
multiprocess mode is used: :meth:`RouterMetrics.flush` moves the tally into ``prometheus_client``
metrics, which write to files in that directory (the worker does it every second, and before it
answers a scrape), and a scrape of any worker reads every worker's files. Gauges then need a rule
to combine the workers' values: breaker states report the worst worker's (``livemax``), ramp
shares the lowest (``livemin``), in-flight counts the sum (``livesum``), all over live processes
only; a worker that stops takes its gauge files with it (:meth:`RouterMetrics.close`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
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
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from asgi_router.observability.cache_metrics import CacheCounts
from asgi_router.observability.caller_metrics import CallerCounts
from asgi_router.observability.events import RequestRecord
from asgi_router.observability.metrics_tally import (
    DURATION_BUCKETS,
    QUEUE_WAIT_BUCKETS,
    TTFB_BUCKETS,
    Buckets,
    CandidateCounts,
    CandidateLabels,
    Tally,
)

__all__ = ["BREAKER_VALUES", "CONTENT_TYPE", "Readings", "RouterMetrics", "multiprocess_dir"]

#: The Prometheus text format's media type.
CONTENT_TYPE: Final = CONTENT_TYPE_LATEST
#: A breaker's phase as the gauges report it.
BREAKER_VALUES: Final = {"closed": 0, "half_open": 1, "open": 2}

_REQUESTS = ("asgi_router_requests", "Chat requests answered, by route and status.")
_DURATION = ("asgi_router_request_duration_seconds", "Seconds from a request's arrival to its last byte.")
_ATTEMPTS = ("asgi_router_attempts", "Attempts and skips, by candidate, outcome and reason.")
_TTFB = ("asgi_router_time_to_first_byte_seconds", "Seconds from sending an attempt to its first body byte.")
_BREAKER = ("asgi_router_breaker_state", "A candidate's circuit breaker: 0 closed, 1 half-open, 2 open.")
_PROVIDER_BREAKER = ("asgi_router_provider_breaker_state", "A provider's breaker: 0 closed, 1 half-open, 2 open.")
_RAMP = ("asgi_router_ramp_share", "The share of its traffic a candidate takes: below 1 while it recovers.")
_SLOW = ("asgi_router_slow_requests", "Streamed calls whose first byte came later than the latency target.")
_TOKENS = ("asgi_router_tokens", "Tokens served responses used, as their upstream reported.")
_PROMPT_CACHE = (
    "asgi_router_prompt_cache_tokens",
    "Prompt tokens served responses read from (read) or wrote to (write) their provider's prompt cache.",
)
_COST = ("asgi_router_cost_usd", "USD served responses cost, for models with catalog prices.")
_IN_FLIGHT = ("asgi_router_in_flight", "Attempts in flight to a provider.")
_HEDGES = ("asgi_router_hedges", "Hedges of hedging groups: won, lost, failed, or denied by the budget.")
_RESUMES = ("asgi_router_resumes", "Broken streams the router tried to continue, by candidate: served or failed.")
_DROPPED = ("asgi_router_events_dropped", "Finished requests an event sink's full queue turned away.")
_STICKY = ("asgi_router_sticky", "Sticky groups' requests with a key: hit, miss or moved.")
_QUEUE_DEPTH = ("asgi_router_queue_depth", "Requests waiting for capacity, by group (this process).")
_QUEUE_WAIT = ("asgi_router_queue_wait_seconds", "Seconds requests waited for capacity, by group and outcome.")
_GUARDRAIL = ("asgi_router_guardrail", "Guardrails' runs, by guardrail, stage and outcome.")

_LEDGER_ROWS = ("asgi_router_ledger_rows", "Spend rows of the ledger: written, or dropped (its buffer full).")
_LEDGER_BUFFERED = ("asgi_router_ledger_buffered_rows", "Spend rows waiting in memory to be written to the ledger.")
_LEDGER_LAG = ("asgi_router_ledger_lag_seconds", "Age of the oldest spend row not yet written (0 when none).")

#: The ledger's figures for a scrape: rows written, rows dropped, rows waiting, lag in seconds.
LedgerReadings = tuple[int, int, int, float]


def multiprocess_dir() -> str | None:
    """The directory ``prometheus_client`` shares values through, when multiprocess mode is on."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir")


@dataclass(frozen=True, slots=True)
class Readings:
    """What the gauges say, read from the router's state when asked."""

    #: ``(candidate, phase)`` per model the configuration names; phase as in :data:`BREAKER_VALUES`.
    breakers: Sequence[tuple[str, str]]
    #: ``(provider, phase, attempts in flight)`` per provider.
    providers: Sequence[tuple[str, str, int]]
    #: Records the event bus dropped so far.
    dropped: int
    #: ``(candidate, share of its traffic)`` per model the configuration names.
    ramps: Sequence[tuple[str, float]] = ()


def _histogram(
    name: str, doc: str, label: str | list[str], table: Iterable[tuple[str | tuple[str, ...], Buckets]]
) -> Metric:
    labels = [label] if isinstance(label, str) else label
    family = HistogramMetricFamily(name, doc, labels=labels)
    for key, buckets in table:
        edges = [str(float(bound)) for bound in buckets.bounds] + ["+Inf"]
        running, cumulative = 0, []
        for edge, count in zip(edges, buckets.counts, strict=True):
            running += count
            cumulative.append((edge, float(running)))
        family.add_metric([key] if isinstance(key, str) else list(key), cumulative, sum(buckets.sums))
    return family


class RouterMetrics:
    """One router's metrics: its tally, and its registry (or multiprocess files).

    ``named`` is the configuration's ``provider/model-id`` set (every other candidate is folded
    into ``provider/*``); ``readings`` reads the gauges from the router's state; ``callers``, when
    callers or sessions are capped, the callers with a table of their own (``caller_metrics.py``);
    ``targets`` is each candidate label's latency target, where it has one (its slow requests are
    counted).
    """

    def __init__(
        self,
        named: Iterable[str],
        readings: Callable[[], Readings],
        callers: Iterable[str] | None = None,
        targets: Mapping[str, float] | None = None,
    ) -> None:
        self.multiprocess = multiprocess_dir() is not None
        self._readings = readings
        self._labels = CandidateLabels(frozenset(named), targets or {})
        #: Each group queue's depth now (the router sets it when a group has a ``queue``).
        self.queue_depths: Callable[[], Sequence[tuple[str, int]]] = tuple
        #: The response cache's counts, once the router has a cache (``cache_bytes`` set).
        self.cache: CacheCounts | None = None
        #: The ledger's figures (``None``: no ledger).
        self.ledger_readings: Callable[[], LedgerReadings] | None = None
        #: Requests, tokens and cost per caller, when caps are configured.
        self.callers = CallerCounts(callers) if callers is not None else None
        #: What requests added (since the last flush, in multiprocess mode).
        self.tally = Tally(self._labels, self.callers)
        self.registry: CollectorRegistry | None = None
        if self.multiprocess:
            self._files = _Files()
            self._dropped_seen = 0
            self._ledger_seen = (0, 0)
        else:
            self.registry = CollectorRegistry(auto_describe=True)
            self.registry.register(self)

    @property
    def cache_bytes(self) -> Callable[[], int]:
        """The response cache's size in bytes, read when scraped (the router sets it)."""
        return self.cache.size if self.cache is not None else int

    @cache_bytes.setter
    def cache_bytes(self, size: Callable[[], int]) -> None:
        self.cache = CacheCounts(size)

    def observe(self, record: RequestRecord, path: str) -> None:
        """Count one finished request on ``path`` and each of its attempts."""
        self.tally.observe(record, path)
        if record.cache is not None and self.cache is not None:
            self.cache.observe(record.cache)

    # --- one process: the router is its registry's collector ------------------------------------

    def collect(self) -> Iterator[Metric]:
        """Every family, from the tally and fresh readings (``prometheus_client``'s collector)."""
        tally, readings = self.tally, self._readings()
        routes, candidates = tally.routes.items(), tally.candidates.items()
        requests = [((path, str(status)), count) for path, route in routes for status, count in route.statuses.items()]
        attempts = [
            ((label, *outcome), n) for label, candidate in candidates for outcome, n in candidate.attempts.items()
        ]
        tokens = [((label, kind), value) for label, c in candidates if c.counted for kind, value in _kinds(c)]
        cached = [((label, kind), value) for label, c in candidates if _cached(c) for kind, value in _cache_kinds(c)]
        breakers = GaugeMetricFamily(*_BREAKER, labels=["candidate"])
        for candidate_label, phase in readings.breakers:
            breakers.add_metric([candidate_label], BREAKER_VALUES[phase])
        ramps = GaugeMetricFamily(*_RAMP, labels=["candidate"])
        for candidate_label, share in readings.ramps:
            ramps.add_metric([candidate_label], share)
        providers = GaugeMetricFamily(*_PROVIDER_BREAKER, labels=["provider"])
        in_flight = GaugeMetricFamily(*_IN_FLIGHT, labels=["provider"])
        for provider, phase, count in readings.providers:
            providers.add_metric([provider], BREAKER_VALUES[phase])
            in_flight.add_metric([provider], count)
        queue_depth = GaugeMetricFamily(*_QUEUE_DEPTH, labels=["group"])
        for group, depth in self.queue_depths():
            queue_depth.add_metric([group], depth)
        return iter(
            [
                self._counter(_REQUESTS, ["path", "status"], requests),
                _histogram(*_DURATION, "path", [(path, route.duration) for path, route in routes]),
                self._counter(_ATTEMPTS, ["candidate", "outcome", "reason"], attempts),
                _histogram(*_TTFB, "candidate", [(label, c.ttfb) for label, c in candidates if any(c.ttfb.counts)]),
                breakers,
                providers,
                ramps,
                self._counter(_SLOW, ["candidate"], [((label,), c.slow) for label, c in candidates if c.slow]),
                self._counter(_TOKENS, ["candidate", "kind"], tokens),
                self._counter(_PROMPT_CACHE, ["candidate", "kind"], cached),
                self._counter(_COST, ["candidate"], [((label,), c.cost) for label, c in candidates if c.cost]),
                in_flight,
                self._counter(_HEDGES, ["outcome"], [((outcome,), n) for outcome, n in tally.hedges.items()]),
                self._counter(_RESUMES, ["candidate", "outcome"], list(tally.resumes.items())),
                CounterMetricFamily(*_DROPPED, value=readings.dropped),
                *(self.callers.families() if self.callers is not None else ()),
                self._counter(_STICKY, ["group", "outcome"], tally.sticky.items()),
                queue_depth,
                _histogram(*_QUEUE_WAIT, ["group", "outcome"], tally.queued.items()),
                *(self.cache.families() if self.cache is not None else ()),
                *self._ledger_families(),
                self._counter(_GUARDRAIL, ["guardrail", "stage", "outcome"], tally.guardrails.items()),
            ]
        )

    def _ledger_families(self) -> list[Metric]:
        if self.ledger_readings is None:
            return []
        written, dropped, buffered, lag = self.ledger_readings()
        rows = self._counter(_LEDGER_ROWS, ["outcome"], [(("written",), written), (("dropped",), dropped)])
        return [rows, GaugeMetricFamily(*_LEDGER_BUFFERED, value=buffered), GaugeMetricFamily(*_LEDGER_LAG, value=lag)]

    @staticmethod
    def _counter(
        described: tuple[str, str], labels: list[str], values: Iterable[tuple[tuple[str, ...], float]]
    ) -> Metric:
        family = CounterMetricFamily(*described, labels=labels)
        for key, value in values:
            family.add_metric(list(key), value)
        return family

    # --- several processes: the tally moves into prometheus_client's files ----------------------

    def flush(self) -> None:
        """Multiprocess mode: move the tally and fresh readings into this process's files."""
        if not self.multiprocess:
            return
        tally, self.tally = self.tally, Tally(self._labels, self.callers)
        files, readings = self._files, self._readings()
        for path, route in tally.routes.items():
            for status, count in route.statuses.items():
                files.requests.labels(path, str(status)).inc(count)
            _replay(files.duration.labels(path), route.duration)
        for label, candidate in tally.candidates.items():
            for (outcome, reason), count in candidate.attempts.items():
                files.attempts.labels(label, outcome, reason).inc(count)
            if any(candidate.ttfb.counts):
                _replay(files.ttfb.labels(label), candidate.ttfb)
            if candidate.counted:
                for kind, value in _kinds(candidate):
                    files.tokens.labels(label, kind).inc(value)
            if _cached(candidate):
                for kind, value in _cache_kinds(candidate):
                    files.prompt_cache.labels(label, kind).inc(value)
            if candidate.cost:
                files.cost.labels(label).inc(candidate.cost)
            if candidate.slow:
                files.slow.labels(label).inc(candidate.slow)
        for outcome, count in tally.hedges.items():
            files.hedges.labels(outcome).inc(count)
        for (label, outcome), count in tally.resumes.items():
            files.resumes.labels(label, outcome).inc(count)
        for (group, outcome), count in tally.sticky.items():
            files.sticky.labels(group, outcome).inc(count)
        for (group, outcome), buckets in tally.queued.items():
            _replay(files.queue_wait.labels(group, outcome), buckets)
        for (name, stage, outcome), count in tally.guardrails.items():
            files.guardrails.labels(name, stage, outcome).inc(count)
        for group, depth in self.queue_depths():
            files.queue_depth.labels(group).set(depth)
        for key, phase in readings.breakers:
            files.breaker_state.labels(key).set(BREAKER_VALUES[phase])
        for key, share in readings.ramps:
            files.ramp_share.labels(key).set(share)
        for provider, phase, attempts in readings.providers:
            files.provider_breaker_state.labels(provider).set(BREAKER_VALUES[phase])
            files.in_flight.labels(provider).set(attempts)
        if self.callers is not None:
            self.callers.flush()
        if self.cache is not None:
            self.cache.flush()
        if self.ledger_readings is not None:
            written, dropped, buffered, lag = self.ledger_readings()
            ledger = files.ledger = files.ledger or _LedgerFiles()
            ledger.rows.labels("written").inc(written - self._ledger_seen[0])
            ledger.rows.labels("dropped").inc(dropped - self._ledger_seen[1])
            self._ledger_seen = (written, dropped)
            ledger.buffered.set(buffered)
            ledger.lag.set(lag)
        if readings.dropped > self._dropped_seen:
            files.events_dropped.inc(readings.dropped - self._dropped_seen)
            self._dropped_seen = readings.dropped

    def exposition(self) -> bytes:
        """The text format of every family (in multiprocess mode: of every worker, and of every
        other metric written to the directory, the host app's own included)."""
        if self.registry is not None:
            return generate_latest(self.registry)
        self.flush()
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)

    def close(self) -> None:
        """This process stops: in multiprocess mode its last counts are written and its gauges
        are not counted any more."""
        if self.multiprocess:
            self.flush()
            multiprocess.mark_process_dead(os.getpid())  # type: ignore[no-untyped-call]


def _kinds(candidate: CandidateCounts) -> tuple[tuple[str, int], tuple[str, int]]:
    return ("prompt", candidate.prompt), ("completion", candidate.completion)


def _cached(candidate: CandidateCounts) -> bool:
    """Whether any of ``candidate``'s prompts met its provider's prompt cache (its series exist)."""
    return bool(candidate.cache_read or candidate.cache_write)


def _cache_kinds(candidate: CandidateCounts) -> tuple[tuple[str, int], tuple[str, int]]:
    return ("read", candidate.cache_read), ("write", candidate.cache_write)


def _replay(histogram: Histogram, buckets: Buckets) -> None:
    """Add a histogram's tally to ``prometheus_client``'s: each bucket's observations as as many
    observations of their mean, which lies in that bucket, so that counts and sum stay exact."""
    for index, count in enumerate(buckets.counts):
        if count:
            mean = buckets.sums[index] / count
            if index < len(buckets.bounds):
                mean = min(mean, buckets.bounds[index])  # rounding must not carry it into the next bucket
            for _ in range(count):
                histogram.observe(mean)


class _Files:
    """``prometheus_client``'s own metrics, for multiprocess mode (their values live in files)."""

    def __init__(self) -> None:
        self.requests = Counter(*_REQUESTS, ["path", "status"], registry=None)
        self.duration = Histogram(*_DURATION, ["path"], buckets=DURATION_BUCKETS, registry=None)
        self.attempts = Counter(*_ATTEMPTS, ["candidate", "outcome", "reason"], registry=None)
        self.ttfb = Histogram(*_TTFB, ["candidate"], buckets=TTFB_BUCKETS, registry=None)
        self.breaker_state = Gauge(*_BREAKER, ["candidate"], registry=None, multiprocess_mode="livemax")
        self.provider_breaker_state = Gauge(
            *_PROVIDER_BREAKER, ["provider"], registry=None, multiprocess_mode="livemax"
        )
        self.ramp_share = Gauge(*_RAMP, ["candidate"], registry=None, multiprocess_mode="livemin")
        self.slow = Counter(*_SLOW, ["candidate"], registry=None)
        self.tokens = Counter(*_TOKENS, ["candidate", "kind"], registry=None)
        self.prompt_cache = Counter(*_PROMPT_CACHE, ["candidate", "kind"], registry=None)
        self.cost = Counter(*_COST, ["candidate"], registry=None)
        self.in_flight = Gauge(*_IN_FLIGHT, ["provider"], registry=None, multiprocess_mode="livesum")
        self.hedges = Counter(*_HEDGES, ["outcome"], registry=None)
        self.resumes = Counter(*_RESUMES, ["candidate", "outcome"], registry=None)
        self.events_dropped = Counter(*_DROPPED, registry=None)
        self.sticky = Counter(*_STICKY, ["group", "outcome"], registry=None)
        self.queue_depth = Gauge(*_QUEUE_DEPTH, ["group"], registry=None, multiprocess_mode="livesum")
        self.queue_wait = Histogram(*_QUEUE_WAIT, ["group", "outcome"], buckets=QUEUE_WAIT_BUCKETS, registry=None)
        self.guardrails = Counter(*_GUARDRAIL, ["guardrail", "stage", "outcome"], registry=None)
        #: Made for a router with a ledger only (an unlabelled gauge shows once it exists).
        self.ledger: _LedgerFiles | None = None


class _LedgerFiles:
    """The ledger's metrics in multiprocess mode."""

    def __init__(self) -> None:
        self.rows = Counter(*_LEDGER_ROWS, ["outcome"], registry=None)
        self.buffered = Gauge(*_LEDGER_BUFFERED, registry=None, multiprocess_mode="livesum")
        self.lag = Gauge(*_LEDGER_LAG, registry=None, multiprocess_mode="livemax")
