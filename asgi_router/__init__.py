"""asgi_router: mount an OpenAI-compatible LLM gateway inside any Starlette or FastAPI app.

``app.add_middleware(ModelRouter, settings=RouterSettings(...))`` (or ``config="router.toml"``).
See README.rst for configuration and semantics, and DESIGN.md for the contract.
"""

from .auth import Authorize
from .catalog import ModelInfo
from .classify import Reason
from .degraded import DegradedSettings
from .errors import AttemptSummary, RouterError
from .events import AttemptEvent, RequestRecord
from .facts import RequestFacts
from .middleware import ModelRouter
from .plan import Candidate, Plan, ResolveError, Resolver
from .refs import InvalidRef, ModelRef, RefKind, parse_model_ref
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
from .stats import InMemoryStats, RoutingStats

__all__ = [
    "AttemptEvent",
    "AttemptSummary",
    "Authorize",
    "Candidate",
    "ConfigError",
    "DegradedSettings",
    "GroupSettings",
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
    "RefKind",
    "RequestFacts",
    "RequestRecord",
    "ResolveError",
    "Resolver",
    "RouterError",
    "RouterSettings",
    "RoutingStats",
    "RuleSettings",
    "Timeouts",
    "parse_model_ref",
]

__version__ = "0.1.0"
