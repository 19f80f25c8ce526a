"""The optional extras, imported only by a router that uses them.

``prometheus_client`` (the ``metrics`` extra) is imported when the settings have a
``metrics_route`` (settings refuse one without it); ``opentelemetry-api`` (the ``otel`` extra)
when it is installed at all, since whether a tracer provider is set is only known per request.
A router without either imports neither, and its requests pay one ``is None`` test each.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from asgi_router.observability.metrics import Readings, RouterMetrics
    from asgi_router.observability.tracing import Tracing

__all__ = ["metrics_for", "tracing_for"]


def _version() -> str:
    try:
        return version("asgi-router")
    except PackageNotFoundError:  # pragma: no cover - run from a checkout that is not installed
        return "0"


def tracing_for(provider: TracerProvider | None) -> Tracing | None:
    """A router's tracing (its spans start once a tracer provider is set), or ``None`` without
    ``opentelemetry-api``."""
    try:
        from asgi_router.observability.tracing import Tracing
    except ImportError:
        return None
    return Tracing(provider, _version())


def metrics_for(
    named: frozenset[str],
    readings: Callable[[], Readings],
    callers: frozenset[str] | None = None,
    targets: Mapping[str, float] | None = None,
) -> RouterMetrics:
    """A router's metrics (``named``: the configuration's models, the only candidate labels;
    ``readings``: the gauges, read when asked; ``callers``: the named callers, when capped;
    ``targets``: latency targets by candidate label)."""
    from asgi_router.observability.metrics import RouterMetrics

    return RouterMetrics(named, readings, callers, targets)
