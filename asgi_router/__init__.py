"""asgi_router: mount an OpenAI-compatible LLM gateway inside any Starlette or FastAPI app.

``app.add_middleware(ModelRouter, settings=RouterSettings(...))`` (or ``config="router.toml"``).
See README.rst for configuration and semantics, and DESIGN.md for the contract.
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
from asgi_router.core.candidate import Candidate
from asgi_router.core.errors import AttemptSummary, RouterError
from asgi_router.core.reasons import Reason
from asgi_router.core.refs import InvalidRef, ModelRef, RefKind, parse_model_ref
from asgi_router.inbound.auth import Forbidden
from asgi_router.middleware import ModelRouter
from asgi_router.observability.events import AttemptEvent, RequestRecord
from asgi_router.observability.sinks import RecentRequests, Sink
from asgi_router.resilience.state import InMemoryState, RouterState
from asgi_router.resilience.stats import InMemoryStats, RoutingStats
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan, ResolveError, Resolver

__all__ = [
    "AttemptEvent",
    "AttemptSummary",
    "Authorize",
    "BackoffSettings",
    "BreakerSettings",
    "Candidate",
    "ConfigError",
    "DegradedSettings",
    "EventSettings",
    "Forbidden",
    "GroupSettings",
    "HealthSettings",
    "InMemoryState",
    "InMemoryStats",
    "InvalidRef",
    "MemberSettings",
    "ModelInfo",
    "ModelRef",
    "ModelRouter",
    "Plan",
    "PoolSettings",
    "ProviderSettings",
    "Reason",
    "RecentRequests",
    "RefKind",
    "RequestFacts",
    "RequestRecord",
    "ResolveError",
    "Resolver",
    "RetryBudgetSettings",
    "RouterError",
    "RouterSettings",
    "RouterState",
    "RoutingStats",
    "RuleSettings",
    "Sink",
    "Timeouts",
    "parse_model_ref",
]
