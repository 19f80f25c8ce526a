"""asgi_router: mount an OpenAI-compatible LLM gateway inside any Starlette or FastAPI app.

``app.add_middleware(ModelRouter, settings=RouterSettings(...))`` (or ``config="router.toml"``).
See README.rst for configuration and semantics, and DESIGN.md for the contract.
"""

from .classify import Reason
from .errors import AttemptSummary, RouterError
from .events import AttemptEvent, RequestRecord
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
from .settings import (
    ConfigError,
    GroupSettings,
    PoolSettings,
    ProviderSettings,
    RouterSettings,
    Timeouts,
)
from .sinks import RecentRequests, Sink
from .state import InMemoryState, RouterState

__all__ = [
    "AttemptEvent",
    "AttemptSummary",
    "BackoffSettings",
    "BreakerSettings",
    "Candidate",
    "ConfigError",
    "EventSettings",
    "GroupSettings",
    "HealthSettings",
    "InMemoryState",
    "InvalidRef",
    "ModelRef",
    "ModelRouter",
    "Plan",
    "PoolSettings",
    "ProviderSettings",
    "Reason",
    "RecentRequests",
    "RefKind",
    "RequestRecord",
    "ResolveError",
    "Resolver",
    "RetryBudgetSettings",
    "RouterError",
    "RouterSettings",
    "RouterState",
    "Sink",
    "Timeouts",
    "parse_model_ref",
]

__version__ = "0.1.0"
