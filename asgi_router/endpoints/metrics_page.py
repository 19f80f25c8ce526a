"""``GET metrics_route``: the Prometheus text format of the router's metrics.

Counters and histograms add up as requests finish (``observability/metrics.py``); the gauges
(breaker states, attempts in flight) and the dropped-records count are read from the router's
state when a scrape asks (:func:`readings_of`), so they cost the request path nothing. Under
several workers in multiprocess mode a scrape reaches one worker, which reads every worker's
files: each worker therefore writes its numbers there every :data:`REFRESH_EVERY` seconds, from
lifespan startup to shutdown (:meth:`MetricsEndpoint.keep_fresh`).

Only the breakers of providers and of the models the configuration names are reported (a client's
own direct ``provider/model-id`` has a breaker too, but no label of its own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import anyio

from asgi_router.observability.events import logger
from asgi_router.observability.metrics import CONTENT_TYPE, Readings, RouterMetrics
from asgi_router.observability.sinks import EventBus
from asgi_router.resilience.overview import Overview

__all__ = ["REFRESH_EVERY", "MetricsEndpoint", "readings_of"]

#: Seconds between a worker's writes of its numbers in multiprocess mode.
REFRESH_EVERY: Final = 1.0


def readings_of(overview: Overview, events: EventBus) -> Callable[[], Readings]:
    """What the gauges say now, read from the router's state and its event bus."""

    def read() -> Readings:
        providers = overview.provider_names
        return Readings(
            breakers=[(key, overview.breaker(key).phase) for name in providers for key in overview.models(name)],
            providers=[(name, overview.breaker(name).phase, overview.provider_in_flight(name)) for name in providers],
            dropped=events.dropped,
            ramps=[(key, overview.ramp_share(key)) for name in providers for key in overview.models(name)],
        )

    return read


class MetricsEndpoint:
    """Serves the metrics and, in multiprocess mode, writes this worker's numbers out."""

    def __init__(self, metrics: RouterMetrics) -> None:
        self.metrics = metrics

    async def keep_fresh(self) -> None:
        """Multiprocess mode: write this worker's numbers every :data:`REFRESH_EVERY` seconds
        (other workers' scrapes read them), and on shutdown take its gauges away."""
        if not self.metrics.multiprocess:
            return
        try:
            while True:
                try:
                    self.metrics.flush()
                except Exception:  # never the end of this task: the next flush tries again
                    logger.exception("asgi_router: writing this worker's metrics failed")
                await anyio.sleep(REFRESH_EVERY)
        finally:
            self.metrics.close()

    def render(self) -> tuple[bytes, bytes]:
        """The content type and the text of a scrape."""
        return CONTENT_TYPE.encode(), self.metrics.exposition()
