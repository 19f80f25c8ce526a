"""asgi_router: mount an OpenAI-compatible LLM gateway inside any Starlette or FastAPI app.

``app.add_middleware(ModelRouter, settings=RouterSettings(...))`` (or ``config="router.toml"``).
See README.rst for configuration and semantics, and DESIGN.md for the contract.
"""

from .auth import Authorize, Forbidden
from .catalog import ModelInfo
from .classify import Reason
from .degraded import DegradedSettings
from .errors import AttemptSummary, RouterError
from .events import AttemptEvent, RequestRecord
from .facts import RequestFacts
from .middleware import ModelRouter
from .plan import Candidate, Plan, ResolveError, Resolver
from .refs import InvalidRef, ModelRef, RefKind, parse_model_ref
from .resilience_settings import (
    BackoffSettings,
    BreakerSettings,
    EventSettings,
    HealthSettings,
    RetryBudgetSettings,
)
from .rules import RuleSettings
from .settings import (
    ConfigError,
    GroupSettings,
    MemberSettings,
    PoolSettings,
    ProviderSettings,
    RouterSettings,
    Timeouts,
)
from .sinks import RecentRequests, Sink
from .state import InMemoryState, RouterState
from .stats import InMemoryStats, RoutingStats

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
