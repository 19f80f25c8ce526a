"""asgi_router: mount an OpenAI-compatible LLM gateway inside any Starlette or FastAPI app.

``app.add_middleware(ModelRouter, settings=RouterSettings(...))`` (or ``config="router.toml"``).
See README.rst for configuration and semantics, and DESIGN.md for the contract.
"""

from .auth import Authorize
from .classify import Reason
from .errors import AttemptSummary, RouterError
from .events import AttemptEvent, RequestRecord
from .middleware import ModelRouter
from .plan import Candidate, Plan, ResolveError, Resolver
from .refs import InvalidRef, ModelRef, RefKind, parse_model_ref
from .settings import (
    ConfigError,
    GroupSettings,
    PoolSettings,
    ProviderSettings,
    RouterSettings,
    Timeouts,
)

__all__ = [
    "AttemptEvent",
    "AttemptSummary",
    "Authorize",
    "Candidate",
    "ConfigError",
    "GroupSettings",
    "InvalidRef",
    "ModelRef",
    "ModelRouter",
    "Plan",
    "PoolSettings",
    "ProviderSettings",
    "Reason",
    "RefKind",
    "RequestRecord",
    "ResolveError",
    "Resolver",
    "RouterError",
    "RouterSettings",
    "Timeouts",
    "parse_model_ref",
]

__version__ = "0.1.0"
