"""asgi_router: mount an OpenAI-compatible LLM gateway inside any Starlette or FastAPI app.

``app.add_middleware(ModelRouter, settings=RouterSettings.from_toml("router.toml"))``. The manual
is the docs site (``docs/``); what is exported here is what a user of the library needs: the
middleware, its settings models, its errors, its events and sinks, the state it keeps, and the
transport seam. Everything else lives in the sub-packages by concern (``docs/layout.md``).
"""

from asgi_router.config.auth_settings import Authorize
from asgi_router.config.catalog_settings import ModelInfo
from asgi_router.config.config_error import ConfigError
from asgi_router.config.degraded_settings import DegradedSettings
from asgi_router.config.group_settings import GroupSettings, MemberSettings
from asgi_router.config.guardrail_settings import GuardrailSettings
from asgi_router.config.provider_settings import PoolSettings, ProviderSettings, Timeouts
from asgi_router.config.resilience_settings import (
    BackoffSettings,
    BreakerSettings,
    EventSettings,
    HealthSettings,
    RetryBudgetSettings,
)
from asgi_router.config.rules_settings import RuleSettings
from asgi_router.config.settings import RouterSettings
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import AttemptSummary, RouterError
from asgi_router.core.upstream_errors import UpstreamBroken, UpstreamConnectError, UpstreamError, UpstreamTimeout
from asgi_router.guardrails.guardrail_api import Allow, Block, Flag, GuardrailRequest, GuardrailResult, Mask
from asgi_router.inbound.auth import Forbidden
from asgi_router.middleware import ModelRouter
from asgi_router.observability.events import AttemptEvent, RequestRecord
from asgi_router.observability.jsonl import JsonlSink
from asgi_router.observability.sinks import RecentRequests, Sink
from asgi_router.resilience.router_state import InMemoryState, RouterState
from asgi_router.resilience.stats import InMemoryStats, RoutingStats
from asgi_router.transports.transport import Transport, UpstreamResponse

__all__ = [
    "Allow",
    "AttemptEvent",
    "AttemptSummary",
    "Authorize",
    "BackoffSettings",
    "Block",
    "BreakerSettings",
    "ConfigError",
    "DegradedSettings",
    "EventSettings",
    "Flag",
    "Forbidden",
    "GroupSettings",
    "GuardrailRequest",
    "GuardrailResult",
    "GuardrailSettings",
    "HealthSettings",
    "InMemoryState",
    "InMemoryStats",
    "JsonlSink",
    "Mask",
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
