"""``GET metrics_route``: the Prometheus text format of the router's metrics.

Counters and histograms are fed as requests finish (``observability/metrics.py``); the gauges
(breaker states, attempts in flight) and the dropped-records counter are read from the router's
state when a scrape asks (:meth:`MetricsEndpoint.refresh`), so they cost the request path
nothing. Under several workers in multiprocess mode a scrape reaches one worker, which cannot
read the others' state: each worker then also refreshes its own gauges every
:data:`REFRESH_EVERY` seconds, from lifespan startup to shutdown (:meth:`keep_fresh`).

Only the breakers of providers and of the models the configuration names are reported (a client's
own direct ``provider/model-id`` has a breaker too, but no label of its own).
"""

from __future__ import annotations

from typing import Final

import anyio

from asgi_router.observability.metrics import CONTENT_TYPE, RouterMetrics
from asgi_router.observability.sinks import EventBus
from asgi_router.resilience.overview import Overview

__all__ = ["REFRESH_EVERY", "MetricsEndpoint"]

#: Seconds between a worker's gauge refreshes in multiprocess mode.
REFRESH_EVERY: Final = 1.0


class MetricsEndpoint:
    """Serves the metrics and keeps their gauges current."""

    def __init__(self, metrics: RouterMetrics, overview: Overview, events: EventBus) -> None:
        self.metrics = metrics
        self._overview = overview
        self._events = events

    def refresh(self) -> None:
        """Set the gauges from the state as it is now."""
        overview, metrics = self._overview, self.metrics
        for provider in overview.provider_names:
            metrics.set_provider(provider, overview.breaker(provider).phase, overview.provider_in_flight(provider))
            for key in overview.models(provider):
                metrics.set_breaker(key, overview.breaker(key).phase)
        metrics.count_dropped(self._events.dropped)

    async def keep_fresh(self) -> None:
        """Refresh every :data:`REFRESH_EVERY` seconds (multiprocess mode: other workers are
        scraped through this one's files); on shutdown, take this process's gauges away."""
        if not self.metrics.multiprocess:
            return
        try:
            while True:
                self.refresh()
                await anyio.sleep(REFRESH_EVERY)
        finally:
            self.metrics.close()

    def render(self) -> tuple[bytes, bytes]:
        """The content type and the text of a scrape, gauges refreshed first."""
        self.refresh()
        return CONTENT_TYPE.encode(), self.metrics.exposition()
