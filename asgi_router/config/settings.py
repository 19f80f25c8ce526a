"""``RouterSettings``: the one object keywords, a TOML file and the environment all build.

``pydantic-settings`` gives the three spellings one schema. Precedence, highest first: keyword
arguments, ``ASGI_ROUTER_...`` environment variables (nested with ``__``), the TOML file.
Everything that can be checked without I/O is checked when the settings are built, so that a
bad config fails the app's start-up with a message naming the key rather than failing a request
at 3 a.m. The tables it is made of check themselves (``provider_settings.py``, ``group_settings.py``,
``resilience_settings.py``, ...); what only the whole can check is here: a provider named
``group``, a group member, alias, catalog key or rule route that names nothing configured
(``cross_checks.py``), nesting cycles and depth (``group_settings.py`` flattens), a pool setting
the chosen transport cannot honour, and inbound auth chosen not exactly once
(``auth_settings.py``). Settings are built before the app
serves anything (typically at import, as ``settings = RouterSettings.from_toml(...)``), whereas
an ASGI server may only build the middleware on its first event and then answer 500 to every
route: every refusal that can be decided from the settings alone belongs here, not in
``ModelRouter``.

Errors say where the bad value came from: the environment variable that set it, or the TOML
file; never the value itself (it may be a key), but for a mistyped fixed word or name. Every
problem is reported at once: the checks across tables run on whatever did parse
(``cross_checks.py``), and all of them run rather than the first refusal hiding the next.
"""

from __future__ import annotations

import os
from typing import Annotated, Any, Final, Literal, Self

from pydantic import (
    Field,
    ImportString,
    ModelWrapValidatorHandler,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from asgi_router.config import loading
from asgi_router.config.admin_settings import DEFAULT_ADMIN_ROUTE, check_admin_route
from asgi_router.config.auth_settings import (
    Authorize,
    check_api_keys,
    check_inbound_auth,
    keys_variable,
    split_api_keys,
)
from asgi_router.config.cache_settings import DEFAULT_CACHE_MAX_BYTES
from asgi_router.config.caller_settings import CallerCaps, SessionCaps, check_callers, check_session_header
from asgi_router.config.catalog_settings import ModelInfo
from asgi_router.config.config_error import ENV_DELIMITER, ENV_PREFIX, ConfigError
from asgi_router.config.cross_checks import Problem, reference_problems, refusal
from asgi_router.config.group_settings import GroupSettings, MemberSettings, flatten_groups
from asgi_router.config.guardrail_settings import GuardrailSettings
from asgi_router.config.ledger_settings import check_admin_keys_apart, check_ledger_url
from asgi_router.config.pages_settings import check_page_route, check_pages
from asgi_router.config.provider_settings import PoolSettings, ProviderSettings
from asgi_router.config.resilience_settings import (
    DEFAULT_RETRY_ON,
    BackoffSettings,
    BreakerSettings,
    EventSettings,
    RetryBudgetSettings,
)
from asgi_router.config.responses_settings import RESPONSES_MAX, RESPONSES_TTL, ResponsesMax, ResponsesTtl
from asgi_router.config.rules_settings import RuleSettings
from asgi_router.config.state_settings import check_key_prefix, check_state_url
from asgi_router.core.reasons import Reason

__all__ = ["RouterSettings", "load_settings"]

#: Why an idle-connection cap is refused on aiohttp, and what to do instead.
_AIOHTTP_IDLE_CAP = (
    "pool.max_keepalive_connections: the aiohttp transport cannot honour an idle-connection cap (its "
    "public API keeps every released connection until pool.keepalive_expiry); leave it unset, lower "
    'pool.keepalive_expiry to close idle connections sooner, or choose transport = "httpx", which caps them'
)

#: The inbound auth settings, of which exactly one is chosen.
_AUTH_CHOICES: Final = ("authorize", "api_keys", "allow_unauthenticated")


class RouterSettings(BaseSettings):
    """Everything the router needs: providers, groups, routing, resilience and inbound auth.

    Unknown keys are refused everywhere. Durations are in seconds and sizes in bytes. Exactly
    one of `api_keys`, `authorize` or `allow_unauthenticated` is required.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,
    )

    providers: dict[str, ProviderSettings] = Field(
        default_factory=dict, description="The upstreams, by name (asked for as `<name>/<model-id>`)."
    )
    groups: dict[str, GroupSettings] = Field(
        default_factory=dict, description="Routing groups, by name (asked for as `group/<name>`)."
    )
    guardrails: dict[str, GuardrailSettings] = Field(
        default_factory=dict,
        description="Named checks on prompts and answers (`[guardrails.<name>]`), run where "
        "`guardrails_default` or a group's `guardrails` names them.",
    )
    guardrails_default: list[str] = Field(
        default_factory=list,
        description="The guardrails every request runs (direct `provider/model-id` refs included); a group's "
        "`guardrails` add to them. A name must be a `[guardrails]` table or a `ModelRouter(guardrails=...)` key.",
    )
    aliases: dict[str, str] = Field(
        default_factory=dict,
        description='Bare names that stand for a `provider/model-id` or `group/<id>`, e.g. `fast = "group/coder"`.',
    )
    routes: list[str] = Field(
        default_factory=lambda: ["/v1/chat/completions", "/v1/responses"],
        description="Paths the router answers (`POST` only; below the app's `root_path`); each starts with `/`. "
        "A path ending in `/chat/completions` is OpenAI chat, one ending in `/messages` Anthropic's Messages API, "
        "one ending in `/responses` OpenAI's Responses API (see [Protocols](protocols.md)). Everything else goes to "
        "the host app.",
    )
    max_body_bytes: PositiveInt = Field(
        default=10 * 1024 * 1024,
        description="The largest request body accepted (413 above it); also the largest continuation request "
        "sent for a broken stream (one whose text so far would make it larger is not continued: the client gets "
        "the in-band error).",
    )
    max_response_bytes: PositiveInt = Field(
        default=64 * 1024 * 1024,
        description="The largest non-streaming upstream body read before answering; a larger one counts as "
        "`upstream_5xx` and fails over. Also the most of a stream's events kept to continue it after a break "
        "(past it, a break is not continued).",
    )
    max_event_bytes: PositiveInt = Field(
        default=1024 * 1024,
        description="The largest single server-sent event of an upstream stream the router parses or holds (an "
        "Anthropic member's stream, translated for an OpenAI client; an unfinished event held on a plan that may "
        "continue a broken stream); a larger one fails the attempt as `upstream_5xx` before anything was sent, and "
        "ends the stream with an in-band error after (`upstream_5xx`, not continued).",
    )
    cache_max_bytes: PositiveInt = Field(
        default=DEFAULT_CACHE_MAX_BYTES,
        description="The response cache's size across every group (least recently used evicted; with a Redis "
        "`state_url`, across the fleet, oldest evicted).",
    )
    pool: PoolSettings = Field(default=PoolSettings(), description="The shared upstream connection pool.")
    transport: Literal["aiohttp", "httpx"] = Field(
        default="aiohttp",
        description='The upstream HTTP client: `"aiohttp"` (the default; the Performance page compares the two) '
        'or `"httpx"` (httpx2). '
        "Passing `http_client=` to `ModelRouter` selects httpx whatever this says.",
    )
    gc_freeze: bool = Field(
        default=False,
        description="After the host app's startup, `gc.collect()` then `gc.freeze()`, so the collector stops "
        "re-scanning the import-time heap on every full collection (a lower p99). Process-wide, hence off "
        "unless asked; recommended in production.",
    )

    # Resilience: retries, budgets, breakers, event sinks.
    retries: NonNegativeInt = Field(
        default=2,
        description="Same-candidate retries for a plan of one candidate (none for a client that retries on its "
        "own: one that sends `x-stainless-retry-count`).",
    )
    retry_on: frozenset[Reason] = Field(
        default=DEFAULT_RETRY_ON, description="The failure reasons that may be retried on the same candidate."
    )
    backoff: BackoffSettings = Field(default=BackoffSettings(), description="Full-jitter backoff between retries.")
    max_retry_wait: NonNegativeFloat = Field(
        default=10.0,
        description="The longest upstream wait hint (`Retry-After`, ...) waited out, in seconds; past it the "
        "router fails over at once (or answers 429).",
    )
    max_rate_limit_reset: PositiveFloat = Field(
        default=300.0,
        description="The longest wait an upstream's rate-limit answer is believed for, in seconds: a `Retry-After`, "
        "`x-ratelimit-reset-*` or `anthropic-ratelimit-*-reset` longer than this is cut to it, and so is the "
        "router's own `Retry-After`. Providers' limits are per minute or per day and refill as they go: a few "
        "minutes covers every honest answer, while one absurd header (a reset in year 9999) would otherwise keep "
        "a member out for as long as it says, in every process of a fleet.",
    )
    max_resumes: NonNegativeInt = Field(
        default=2,
        description='Continuations of a broken stream per request, on candidates whose `resume` is not `"none"` '
        "(a group may override it); independent of `retries`.",
    )
    max_attempts: PositiveInt = Field(default=10, description="Attempts per request, retries and hedges included.")
    deadline: PositiveFloat = Field(
        default=300.0, description="Seconds from the start of the first attempt to commit, backoff included."
    )
    retry_budget: RetryBudgetSettings = Field(
        default=RetryBudgetSettings(), description="The per-provider cap on retries in flight."
    )
    breaker: BreakerSettings = Field(
        default=BreakerSettings(), description="Circuit breakers per candidate and provider."
    )
    events: EventSettings = Field(
        default=EventSettings(), description="Event sink queues and the ring of recent requests."
    )
    catalog: dict[str, ModelInfo] = Field(
        default_factory=dict,
        description="What the router knows per `provider/model-id`: context window, output cap, prices.",
    )
    rules: list[RuleSettings] = Field(
        default_factory=list, description="Evaluated in order for requests to groups with `rules = true`."
    )
    latency_half_life: PositiveFloat = Field(
        default=60.0,
        description="Half-life, in seconds, of the time-to-first-byte average the `latency` strategy reads.",
    )
    models_route: str | None = Field(
        default="/v1/models",
        description='The `GET` path listing groups, aliases and models in OpenAI\'s list shape; `""` (or `None` '
        "in Python) leaves the path to the host app.",
    )
    metrics_route: str | None = Field(
        default=None,
        description='The `GET` path serving Prometheus metrics, e.g. `"/metrics"` (unset: off). Needs the '
        "`metrics` extra (`prometheus_client`): settings that set it without are refused.",
    )
    metrics_public: bool = Field(
        default=False,
        description="Serve `metrics_route` without inbound auth (a scraper on a private network); by default "
        "it asks for the same credentials as `/v1/models`.",
    )
    status_route: str | None = Field(
        default=None,
        description='The `GET` path of the live status page, e.g. `"/router/status"` (unset: off); '
        "`status_route` + `.json` serves its data as JSON. Behind inbound auth, HTTP Basic accepted.",
    )
    usage_route: str | None = Field(
        default=None,
        description="The `GET` path where a caller reads its own spend, caps and reset times as JSON, e.g. "
        '`"/v1/router/usage"` (unset: off); behind inbound auth, each caller sees only its own figures.',
    )
    body_timeout: PositiveFloat = Field(
        default=30.0,
        description="Seconds the whole request body may take to arrive (408 after): a client trickling a body "
        "must not hold a request open for ever.",
    )

    # Shared state (``config/state_settings.py``): breakers, rotation and budgets across a fleet.
    state_url: SecretStr | None = Field(
        default=None,
        description="Where breakers, `rotate` counters and rpm/tpm budgets live: absent or `memory://` keeps them "
        "in this process; `redis://[user:password@]host:6379/0` (or `rediss://`, `unix://`, "
        "`redis+sentinel://host:26379,host2:26379/primary-name/0`) shares them with every process naming the "
        "same store and prefix (needs the `redis` extra). A secret: never shown.",
    )
    state_key_prefix: str = Field(
        default="asgi_router",
        description="The first segment of every Redis key the router writes, so that two gateways can share one "
        "Redis without sharing state.",
    )

    # The Responses API's stored responses (``config/responses_settings.py``).
    responses_max: ResponsesMax = RESPONSES_MAX
    responses_ttl: ResponsesTtl = RESPONSES_TTL

    # Caps per caller and per session (``config/caller_settings.py``; see the Callers page).
    session_header: str = Field(
        default="x-session-id",
        description="The request header naming a session: `[sessions]` caps count per (caller, session), and "
        "sticky routing keeps a session on one member.",
    )
    callers: dict[str, CallerCaps] = Field(
        default_factory=dict,
        description='Caps per caller (a principal\'s name; `"*"`: every caller without a table of its own, '
        "each counted alone).",
    )
    sessions: SessionCaps | None = Field(
        default=None, description="Caps per (caller, session) for requests that carry `session_header`."
    )
    max_callers: PositiveInt = Field(
        default=100_000,
        description='Tallies kept per process for `callers."*"` callers and for sessions; past it the least '
        "recently seen is forgotten first.",
    )

    # Inbound auth: exactly one of these three (``auth_settings.NO_INBOUND_AUTH`` says why).
    api_keys: Annotated[list[SecretStr] | dict[str, SecretStr] | None, NoDecode] = Field(
        default=None,
        description="Inbound keys clients present as `Authorization: Bearer <key>` (or `x-api-key`): a list, or "
        "a table `name = key` whose names become principals; each at least 16 printable ASCII characters, "
        "no two alike. In the environment: comma-separated, or JSON.",
    )
    authorize: ImportString[Authorize] | None = Field(
        default=None,
        description="The host app's check `(scope, headers) -> bool | principal` (sync or async), or its import "
        'string `"package.module:function"` (how TOML and the environment name it).',
    )
    allow_unauthenticated: bool = Field(
        default=False,
        description="Serve anyone who can reach the router, spending the providers' keys: local development "
        "only (a warning at start-up).",
    )

    # The ledger (``config/ledger_settings.py``): keys and spend that outlast the process.
    ledger_url: SecretStr | None = Field(
        default=None,
        description="Where spend rows and virtual keys last: `sqlite:///path/file.db` (one host; its workers share "
        "the file), `postgresql://user:password@host:5432/db` (a fleet; needs the `postgres` extra) or `memory://` "
        "(nothing lasts). Unset: no ledger, unless `admin_keys` is set (then `sqlite:///asgi_router.sqlite3` in "
        "the working directory). A secret: shown masked.",
    )
    ledger_buffer: PositiveInt = Field(
        default=100_000,
        description="Spend rows kept in memory while the ledger's database is unreachable; past it rows are "
        "dropped and counted (the requests still succeed).",
    )
    ledger_flush_interval: PositiveFloat = Field(
        default=1.0,
        description="Seconds between the background writes of spend rows: a crash loses at most this much.",
    )
    ledger_retention_days: PositiveInt | None = Field(
        default=None,
        description="Days spend rows are kept; older rows are pruned in the background. Unset: kept for ever.",
    )
    admin_keys: Annotated[list[SecretStr] | None, NoDecode] = Field(
        default=None,
        description="Keys that open the admin routes (`admin_route`), each at least 16 printable ASCII characters; "
        "never the same string as an `api_keys` key. In the environment: comma-separated, or JSON.",
    )
    admin_route: str = Field(
        default=DEFAULT_ADMIN_ROUTE,
        description="Where the admin API and page answer (`{admin_route}/keys`, `{admin_route}/spend`, the page at "
        "`{admin_route}/`), only when `admin_keys` is set; opened by admin keys alone.",
    )

    _flat: dict[str, tuple[MemberSettings, ...]] = PrivateAttr(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return loading.sources(settings_cls, init_settings, env_settings)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str], **overrides: Any) -> Self:
        """Load from a TOML file; environment variables and ``overrides`` take precedence.

        Any refusal is a :class:`ConfigError` naming the key and where its value came from (an
        environment variable or the file), so a module-level ``settings = from_toml(...)``
        stops the app's import with a message an operator can act on.
        """
        return loading.from_toml(cls, path, overrides)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_api_keys(cls, value: Any) -> Any:
        return split_api_keys(value)

    @field_validator("api_keys")
    @classmethod
    def _check_api_keys(
        cls, value: list[SecretStr] | dict[str, SecretStr] | None
    ) -> list[SecretStr] | dict[str, SecretStr] | None:
        return check_api_keys(value)

    @field_validator("admin_keys", mode="before")
    @classmethod
    def _split_admin_keys(cls, value: Any) -> Any:
        return split_api_keys(value)

    @field_validator("admin_keys")
    @classmethod
    def _check_admin_keys(cls, value: list[SecretStr] | None) -> list[SecretStr] | None:
        checked = check_api_keys(value, "admin_keys")
        return checked if isinstance(checked, list) or checked is None else None

    @field_validator("ledger_url")
    @classmethod
    def _check_ledger_url(cls, value: SecretStr | None) -> SecretStr | None:
        return check_ledger_url(value)

    @field_validator("state_url")
    @classmethod
    def _check_state_url(cls, value: SecretStr | None) -> SecretStr | None:
        return check_state_url(value)

    @field_validator("state_key_prefix")
    @classmethod
    def _check_state_key_prefix(cls, value: str) -> str:
        return check_key_prefix(value)

    @field_validator("admin_route")
    @classmethod
    def _check_admin_route(cls, value: str) -> str:
        return check_admin_route(value)

    @field_validator("routes")
    @classmethod
    def _check_routes(cls, value: list[str]) -> list[str]:
        for route in value:
            if not route.startswith("/"):
                raise ValueError(f"route {route!r} must start with '/'")
            if route.rstrip("/").endswith("/messages/count_tokens"):
                raise ValueError(
                    f"route {route!r}: Anthropic's token counting is not supported (see Protocols); the router "
                    "answers it with a not_found_error below each /messages route it serves"
                )
        return value

    @field_validator("session_header")
    @classmethod
    def _check_session_header(cls, value: str) -> str:
        return check_session_header(value)

    @field_validator("models_route", "metrics_route", "status_route", "usage_route")
    @classmethod
    def _check_page_routes(cls, value: str | None, info: ValidationInfo) -> str | None:
        return check_page_route(str(info.field_name), value)  # "" is off: TOML and the environment cannot say None

    @model_validator(mode="wrap")
    @classmethod
    def _check_whole(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        # One refusal for everything wrong: when some fields are refused, the names the rest of
        # the configuration uses are still checked (on the raw tables), and every check across
        # tables runs, rather than the first failing check hiding the next.
        try:
            settings = handler(data)
        except ValidationError as exc:
            problems = reference_problems(data)
            if not problems:
                raise
            raise refusal(exc.title, exc.errors(), problems) from None
        problems = settings._problems()
        if problems:
            raise refusal(cls.__name__, [], problems)
        return settings

    def _problems(self) -> list[Problem]:
        """What only the whole can refuse: pages, references, the transport's pool, inbound auth."""
        problems: list[Problem] = []
        try:
            check_pages(self.routes, self.models_route, self.metrics_route, self.status_route, self.usage_route)
        except ValueError as exc:
            problems.append(Problem((), str(exc)))
        references = reference_problems(self)
        problems += references
        if not references:
            try:
                self._flat = flatten_groups(self.groups)
            except ValueError as exc:
                problems.append(Problem((), str(exc)))
            try:
                named_keys = frozenset(self.api_keys) if isinstance(self.api_keys, dict) else None
                check_callers(self.callers, self.sessions, named_keys, self.aliases, self.providers, self.groups)
            except ValueError as exc:
                problems.append(Problem((), str(exc)))
        try:
            check_admin_keys_apart(self.admin_keys, self.api_keys)
        except ValueError as exc:
            problems.append(Problem((), str(exc)))
        # Refused rather than ignored: an operator who set the cap expects it to hold.
        if self.transport == "aiohttp" and self.pool.max_keepalive_connections is not None:
            problems.append(Problem((), _AIOHTTP_IDLE_CAP))
        try:
            check_inbound_auth(
                authorize=self.authorize is not None,
                api_keys=self.api_keys is not None,
                allow_unauthenticated=self.allow_unauthenticated,
                virtual_keys=self.admin_keys is not None,
            )
        except ValueError as exc:
            chosen = tuple(name for name in _AUTH_CHOICES if name in self.model_fields_set)
            variable = keys_variable(self.api_keys, f"{ENV_PREFIX}API_KEYS") if len(chosen) > 1 else None
            said = f"{exc} (api_keys from the environment variable {variable})" if variable else str(exc)
            problems.append(Problem((), said, sources=chosen if len(chosen) > 1 else (), plain=str(exc)))
        return problems

    def flat_members(self, group: str) -> tuple[str, ...]:
        """The group's concrete ``provider/model-id`` members, nested groups expanded."""
        return tuple(member.ref for member in self._flat[group])

    def flat_member_settings(self, group: str) -> tuple[MemberSettings, ...]:
        """Like :meth:`flat_members`, with each member's weight (multiplied through nesting) and limits."""
        return self._flat[group]


def load_settings(
    settings: RouterSettings | None = None,
    config: str | os.PathLike[str] | None = None,
    authorize: Authorize | None = None,
) -> RouterSettings:
    """Build settings from the one source given (or the environment), as :class:`ConfigError`.

    ``authorize`` is ``ModelRouter``'s keyword: a keyword override of the file and the
    environment when the settings are built here. Settings built already cannot take it (they
    had to choose their inbound auth when they were built): the error says how to pass it.
    """
    if settings is not None and config is not None:
        raise ConfigError("pass either settings= or config=, not both")
    if settings is not None:
        if authorize is not None:
            raise ConfigError(
                "authorize= cannot be added to settings built already (they chose their inbound auth "
                "when they were built): pass RouterSettings(authorize=fn) (or from_toml(path, authorize=fn)) "
                "instead of ModelRouter(authorize=fn)"
            )
        return settings
    overrides: dict[str, Any] = {} if authorize is None else {"authorize": authorize}
    if config is not None:
        return RouterSettings.from_toml(config, **overrides)
    return loading.build(RouterSettings, None, overrides)
