"""The response cache's families of the Prometheus metrics, when a group caches::

    asgi_router_cache_requests_total{group, outcome}   outcome: hit | semantic_hit | miss | bypass
    asgi_router_cache_saved_usd_total{group}            what hits would have cost upstream
    asgi_router_cache_bytes                             gauge: the bytes of entries held

``group`` is a configured group (only a group's plan asks its cache). The bytes are this
process's entries, or with a Redis ``state_url`` the fleet's total as this process last saw it
(the workers' largest, in multiprocess mode).

Only ``metrics.py`` imports this module. As for the rest of the metrics, a finished request adds
plain numbers here and a scrape (or, in multiprocess mode, a flush) turns them into families.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from asgi_router.observability.events import CacheOutcome

__all__ = ["CacheCounts"]

_REQUESTS = ("asgi_router_cache_requests", "Cached groups' requests: hit, semantic_hit, miss or bypass.")
_SAVED = ("asgi_router_cache_saved_usd", "USD the answers served from the response cache cost when first made.")
_BYTES = ("asgi_router_cache_bytes", "Bytes of entries the response cache holds.")


class CacheCounts:
    """Requests and savings per group and outcome, as plain numbers; ``size`` reads the gauge."""

    __slots__ = ("_files", "requests", "saved", "size")

    def __init__(self, size: Callable[[], int]) -> None:
        self.size = size
        self.requests: dict[tuple[str, str], int] = {}
        self.saved: dict[str, float] = {}
        self._files: _Files | None = None

    def observe(self, cache: CacheOutcome) -> None:
        key = (cache.group, cache.outcome)
        self.requests[key] = self.requests.get(key, 0) + 1
        if cache.saved_usd:
            self.saved[cache.group] = self.saved.get(cache.group, 0.0) + cache.saved_usd

    def families(self) -> list[Metric]:
        requests = CounterMetricFamily(*_REQUESTS, labels=["group", "outcome"])
        for (group, outcome), count in self.requests.items():
            requests.add_metric([group, outcome], count)
        saved = CounterMetricFamily(*_SAVED, labels=["group"])
        for group, value in self.saved.items():
            saved.add_metric([group], value)
        return [requests, saved, GaugeMetricFamily(*_BYTES, value=self.size())]

    def flush(self) -> None:
        """Multiprocess mode: move the counts into ``prometheus_client``'s files and start again."""
        files = self._files
        if files is None:
            files = self._files = _Files()
        for (group, outcome), count in self.requests.items():
            files.requests.labels(group, outcome).inc(count)
        for group, value in self.saved.items():
            files.saved.labels(group).inc(value)
        files.size.set(self.size())
        self.requests, self.saved = {}, {}


class _Files:
    """``prometheus_client``'s own metrics, for multiprocess mode (their values live in files)."""

    def __init__(self) -> None:
        self.requests = Counter(*_REQUESTS, ["group", "outcome"], registry=None)
        self.saved = Counter(*_SAVED, ["group"], registry=None)
        self.size = Gauge(*_BYTES, registry=None, multiprocess_mode="livemax")
