"""asgi_router: mount an OpenAI-compatible LLM gateway inside any Starlette or FastAPI app.

``app.add_middleware(ModelRouter, settings=RouterSettings.from_toml("router.toml"))``. The manual
is the docs site (``docs/``); what is exported here is what a user of the library needs: the
middleware, its settings models, its errors, its events and sinks, the state it keeps, and the
transport seam. Everything else lives in the sub-packages by concern (``docs/layout.md``).
"""

from asgi_router.config.catalog import ModelInfo
from asgi_router.config.degraded import DegradedSettings
from asgi_router.config.errors import ConfigError
from asgi_router.config.groups import GroupSettings, MemberSettings
from asgi_router.config.inbound_auth import Authorize
from asgi_router.config.providers import PoolSettings, ProviderSettings, Timeouts
from asgi_router.config.resilience import (
    BackoffSettings,
    BreakerSettings,
    EventSettings,
    HealthSettings,
    RetryBudgetSettings,
)
from asgi_router.config.rules import RuleSettings
from asgi_router.config.settings import RouterSettings
from asgi_router.core.errors import AttemptSummary, RouterError
from asgi_router.core.reasons import Reason
from asgi_router.core.upstream_errors import UpstreamBroken, UpstreamConnectError, UpstreamError, UpstreamTimeout
from asgi_router.inbound.auth import Forbidden
from asgi_router.middleware import ModelRouter
from asgi_router.observability.events import AttemptEvent, RequestRecord
from asgi_router.observability.jsonl import JsonlSink
from asgi_router.observability.sinks import RecentRequests, Sink
from asgi_router.resilience.state import InMemoryState, RouterState
from asgi_router.resilience.stats import InMemoryStats, RoutingStats
from asgi_router.transports.base import Transport, UpstreamResponse

__all__ = [
    "AttemptEvent",
    "AttemptSummary",
    "Authorize",
    "BackoffSettings",
    "BreakerSettings",
    "ConfigError",
    "DegradedSettings",
    "EventSettings",
    "Forbidden",
    "GroupSettings",
    "HealthSettings",
    "InMemoryState",
    "InMemoryStats",
    "JsonlSink",
    "MemberSettings",
    "ModelInfo",
    "ModelRouter",
    "PoolSettings",
    "ProviderSettings",
    "Reason",
    "RecentRequests",
    "RequestRecord",
    "RetryBudgetSettings",
    "RouterError",
    "RouterSettings",
    "RouterState",
    "RoutingStats",
    "RuleSettings",
    "Sink",
    "Timeouts",
    "Transport",
    "UpstreamBroken",
    "UpstreamConnectError",
    "UpstreamError",
    "UpstreamResponse",
    "UpstreamTimeout",
]
