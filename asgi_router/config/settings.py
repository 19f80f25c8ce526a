"""Configuration: one ``RouterSettings`` built from keywords, a TOML file or the environment.

``pydantic-settings`` gives the three spellings one schema. Precedence, highest first: keyword
arguments, ``ASGI_ROUTER_...`` environment variables (nested with ``__``), the TOML file.
Everything that can be checked without I/O is checked here, at load, so that a bad config fails
the app's start-up with a message naming the key rather than failing a request at 3 a.m.:
a provider named ``group``, a group member naming an unknown provider or group, an empty group,
a nesting cycle (spelled out), nesting deeper than :data:`MAX_GROUP_DEPTH`, a dangling alias,
a catalog key or rule route that names nothing configured, and inbound auth chosen not exactly
once. Settings are built before the app serves anything (typically at import, as
``settings = RouterSettings.from_toml(...)``), whereas an ASGI server may only build the
middleware on the first request and then answer 500 to every route: every refusal that can be
decided from the settings alone belongs here, not in ``ModelRouter``.

Errors say where the bad value came from: the environment variable that set it, or the TOML
file; never the value itself (it may be a key).

Group members are written as plain ``"provider/model-id"`` strings or as tables carrying a
``weight`` (``weighted``) and ``rpm``/``tpm`` limits (``usage``, and budget checks everywhere).
Nested groups flatten at load, first occurrence kept; a nested group's weights are multiplied by
the weight of the member that names it, so proportions inside the inner group survive.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Self

import httpx2
from pydantic import (
    Field,
    ImportString,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)
from starlette.datastructures import Headers
from starlette.types import Scope

from asgi_router.config.catalog import ModelInfo
from asgi_router.config.degraded import DegradedSettings
from asgi_router.config.errors import ENV_DELIMITER, ENV_PREFIX, describe_refusal, describe_undecodable
from asgi_router.config.resilience import (
    DEFAULT_RETRY_ON,
    BackoffSettings,
    BreakerSettings,
    EventSettings,
    HealthSettings,
    RetryBudgetSettings,
    StrictSettings,
)
from asgi_router.config.rules import RuleSettings
from asgi_router.core.classify import DEFAULT_FAILOVER
from asgi_router.core.header_names import never_forwarded, never_sent
from asgi_router.core.reasons import Reason
from asgi_router.core.refs import GROUP_NAMESPACE, InvalidRef, RefKind, is_valid_name, parse_model_ref

__all__ = [
    "Authorize",
    "ConfigError",
    "GroupSettings",
    "MAX_GROUP_DEPTH",
    "MIN_INBOUND_KEY_LENGTH",
    "MemberSettings",
    "NO_INBOUND_AUTH",
    "PoolSettings",
    "ProviderSettings",
    "RouterSettings",
    "Strategy",
    "Timeouts",
    "load_settings",
]

#: How deep ``group/a -> group/b -> ...`` may nest before config is refused.
MAX_GROUP_DEPTH: Final = 8
#: Shortest inbound API key accepted: constant-time comparison does not help a guessable key.
MIN_INBOUND_KEY_LENGTH: Final = 16

_toml_path: ContextVar[Path | None] = ContextVar("asgi_router_toml_path", default=None)

#: The host app's check: ``(scope, headers) -> bool | principal``, or an awaitable of that.
Authorize = Callable[[Scope, Headers], object | Awaitable[object]]

#: Why settings without inbound auth are refused, and the choices.
NO_INBOUND_AUTH: Final = (
    "inbound auth is required: the router is a middleware and runs before the host app's own "
    "auth, so anyone who can reach it would spend the providers' keys. Choose exactly one of: "
    "authorize=<callable (scope, headers) -> bool | principal, or its import string "
    "'package.module:function' (TOML, or ASGI_ROUTER_AUTHORIZE)>; "
    "api_keys=[...] (or ASGI_ROUTER_API_KEYS=key1,key2); "
    "allow_unauthenticated=True (development only). "
    "ModelRouter(app, authorize=fn) supplies authorize= when the router builds the settings "
    "itself (from config= or the environment); settings you build yourself take "
    "RouterSettings(authorize=fn)."
)


class ConfigError(ValueError):
    """The router's configuration cannot be used; the message names the offending key."""


class Timeouts(StrictSettings):
    """Per-provider time limits, in seconds.

    ``first_byte`` runs from sending the request to the first body byte: a 200 that then stays
    silent is a timeout and fails over. For a non-streaming request the first byte only comes
    once the whole completion is generated, so it bounds generation time there.
    ``idle`` is the largest gap allowed between chunks after commit; ``total`` bounds one
    attempt end to end (connect, wait, and relay).
    """

    connect: PositiveFloat = 5.0
    first_byte: PositiveFloat = 60.0
    idle: PositiveFloat = 60.0
    total: PositiveFloat = 600.0


class ProviderSettings(StrictSettings):
    """An OpenAI-compatible upstream: a base URL and, usually, an API key."""

    base_url: str
    #: The key itself (kept as a secret: never printed, never logged).
    api_key: SecretStr | None = None
    #: Or the name of an environment variable holding the key, read once at start-up.
    api_key_env: str | None = None
    timeouts: Timeouts = Timeouts()
    #: Extra headers sent upstream with every request (e.g. OpenRouter's ``HTTP-Referer``).
    headers: dict[str, str] = Field(default_factory=dict)
    #: Attempts in flight to this provider at once; over it, candidates are skipped (``saturated``).
    max_concurrent: PositiveInt | None = None
    #: Opt-in active health probes (e.g. ``{interval = 5, path = "/models"}``).
    health: HealthSettings | None = None
    #: Inbound headers copied to this provider on top of the fixed allowlist (content-type,
    #: accept, user-agent, x-request-id), e.g. ``["traceparent"]``. Credentials, cookies,
    #: ``proxy-*`` and hop-by-hop headers can never be named here.
    forward_headers: list[str] = Field(default_factory=list)

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str) -> str:
        value = value.strip()
        if not value.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        if any(ch in value for ch in "\r\n\t ?#") or any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise ValueError("base_url must not contain whitespace, control characters, a query or a fragment")
        # Parse it the way the transport will, so that a URL that can never be sent (no host,
        # a bad port, broken brackets) fails the config load rather than every request.
        try:
            url = httpx2.URL(value)
            url.port  # noqa: B018 - validates the port
        except Exception as exc:
            raise ValueError(f"base_url is not a usable URL ({type(exc).__name__})") from None
        if not url.host:
            raise ValueError("base_url has no host")
        return value.rstrip("/")

    @field_validator("api_key")
    @classmethod
    def _check_api_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("api_key is empty; leave it out for a provider that needs no key")
        return value

    @field_validator("headers")
    @classmethod
    def _check_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, header_value in value.items():
            if not name or any(not (33 <= ord(ch) < 127) or ch == ":" for ch in name):
                raise ValueError(f"header name {name!r} is not a valid HTTP token")
            if any(ord(ch) < 32 or ord(ch) == 127 for ch in header_value):
                raise ValueError(f"header {name!r} has a control character in its value")
            if never_sent(name.lower().encode()):
                # A configured Transfer-Encoding or Connection would change the request's framing.
                raise ValueError(f"header {name!r} is hop-by-hop or framing; the transport sets it")
        return {name.lower(): header_value for name, header_value in value.items()}

    @field_validator("forward_headers")
    @classmethod
    def _check_forward_headers(cls, value: list[str]) -> list[str]:
        names: list[str] = []
        for name in value:
            if not name or any(not (33 <= ord(ch) < 127) or ch == ":" for ch in name):
                raise ValueError(f"forward_headers: {name!r} is not a valid HTTP token")
            lowered = name.lower()
            if never_forwarded(lowered.encode()):
                raise ValueError(
                    f"forward_headers: {lowered!r} is never forwarded "
                    "(credentials, cookies, proxy-* and hop-by-hop headers stay with the router)"
                )
            names.append(lowered)
        return names

    def key(self) -> SecretStr | None:
        """The configured key: ``api_key`` if set, else the named environment variable."""
        if self.api_key is not None:
            return self.api_key
        if self.api_key_env:
            found = os.environ.get(self.api_key_env)
            return SecretStr(found) if found else None
        return None

    @property
    def is_configured(self) -> bool:
        """False when an ``api_key_env`` is named but unset: such a provider is skipped."""
        return self.api_key is not None or not self.api_key_env or bool(os.environ.get(self.api_key_env))


Strategy = Literal["order", "rotate", "weighted", "least_busy", "latency", "cost", "usage"]


class MemberSettings(StrictSettings):
    """A group member in table form: ``{ref = "openai/gpt-4o", weight = 3, rpm = 500}``."""

    ref: str
    #: Share of first picks under ``weighted`` (relative to the other members' weights).
    weight: PositiveFloat = 1.0
    #: Requests per rolling minute this member may take (budget; ``usage`` orders by it).
    rpm: PositiveInt | None = None
    #: Tokens per rolling minute this member may take.
    tpm: PositiveInt | None = None


class GroupSettings(StrictSettings):
    """A routing group: ordered members and how to order them per request."""

    strategy: Strategy = "order"
    members: list[str | MemberSettings] = Field(min_length=1)
    #: Which failure reasons move on to the next member; the rest stop the loop.
    failover_on: frozenset[Reason] = DEFAULT_FAILOVER
    #: Same-candidate retries per member; unset: ``retries`` for a one-member group, else 0.
    retries: NonNegativeInt | None = None
    #: Run ``[[rules]]`` first; the members are the plan when no rule matches.
    rules: bool = False
    #: ``latency``: share of requests that try a random other member first.
    explore: float = Field(default=0.05, ge=0.0, le=1.0)
    #: Seconds after which a second candidate is raced against an uncommitted first one.
    hedge_after: PositiveFloat | None = None
    #: Largest share of this group's requests that may add a hedged request.
    hedge_budget: float = Field(default=0.1, ge=0.0, le=1.0)
    #: A canned reply sent (marked ``x-router-degraded: 1``) when every candidate fails.
    degraded: DegradedSettings | None = None

    @model_validator(mode="after")
    def _check_hedging_retries(self) -> Self:
        # A hedged group's second chance is the race, not a retry in place: a retries value
        # there would be silently ignored, so it is refused instead.
        if self.hedge_after is not None and self.retries:
            raise ValueError("retries does not apply to a group with hedge_after (the race is its second chance)")
        return self

    def member_settings(self) -> tuple[MemberSettings, ...]:
        """Every member in table form (a plain string is a member with weight 1, no limits)."""
        return tuple(MemberSettings(ref=m) if isinstance(m, str) else m for m in self.members)


class PoolSettings(StrictSettings):
    """The shared upstream connection pool (one per router)."""

    max_connections: PositiveInt = 512
    max_keepalive_connections: PositiveInt = 128
    keepalive_expiry: PositiveFloat = 30.0


class RouterSettings(BaseSettings):
    """Everything the router needs; see README.rst "Configuration reference" for each field."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_DELIMITER,
        extra="forbid",
        frozen=True,
        hide_input_in_errors=True,
    )

    providers: dict[str, ProviderSettings] = Field(default_factory=dict)
    groups: dict[str, GroupSettings] = Field(default_factory=dict)
    #: Bare names that stand for a full ref, e.g. ``{"fast": "group/coder"}``.
    aliases: dict[str, str] = Field(default_factory=dict)
    #: Inbound paths (POST) the router answers; everything else goes to the host app.
    routes: list[str] = Field(default_factory=lambda: ["/v1/chat/completions"])
    #: Largest request body accepted (413 above it).
    max_body_bytes: PositiveInt = 10 * 1024 * 1024
    #: Largest non-streaming upstream body read before answering (a larger one fails over).
    max_response_bytes: PositiveInt = 64 * 1024 * 1024
    pool: PoolSettings = PoolSettings()
    #: The upstream HTTP client: ``aiohttp`` (the default: the faster, see docs/performance.rst)
    #: or ``httpx`` (httpx2). Passing ``http_client=`` to ``ModelRouter`` implies ``httpx``.
    transport: Literal["aiohttp", "httpx"] = "aiohttp"
    #: Once the host app has started, collect garbage and ``gc.freeze()`` what is left, so that
    #: the collector stops re-scanning the import-time heap (~50k objects for a FastAPI app)
    #: on every full collection. Process-wide, hence off unless asked (docs/performance.rst).
    gc_freeze: bool = False

    # Resilience (README.rst "Resilience"): retries, budgets, breakers, event sinks.
    #: Same-candidate retries for a plan of one candidate (none for a client that retries on its
    #: own: see ``headers.client_retries``).
    retries: NonNegativeInt = 2
    #: Failure reasons that may be retried on the same candidate.
    retry_on: frozenset[Reason] = DEFAULT_RETRY_ON
    backoff: BackoffSettings = BackoffSettings()
    #: Longest rate-limit hint (Retry-After, ...) waited out; a longer one is not waited.
    max_retry_wait: NonNegativeFloat = 10.0
    #: Attempts per request, retries included.
    max_attempts: PositiveInt = 10
    #: Seconds from the start of the first attempt to commit, backoff included.
    deadline: PositiveFloat = 300.0
    retry_budget: RetryBudgetSettings = RetryBudgetSettings()
    breaker: BreakerSettings = BreakerSettings()
    events: EventSettings = EventSettings()
    #: What the router knows per ``provider/model-id``: context window, output cap, prices.
    catalog: dict[str, ModelInfo] = Field(default_factory=dict)
    #: Evaluated in order for requests to groups with ``rules = true``.
    rules: list[RuleSettings] = Field(default_factory=list)
    #: Half-life (seconds) of the time-to-first-byte moving average the ``latency`` strategy reads.
    latency_half_life: PositiveFloat = 60.0
    #: ``GET`` path listing groups, aliases and models (OpenAI list shape); ``None`` or ``""`` leaves it to the app.
    models_route: str | None = "/v1/models"
    #: Seconds the whole request body may take to arrive (408 after): a client trickling a
    #: body byte by byte must not hold a request open for ever.
    body_timeout: PositiveFloat = 30.0
    # Inbound auth: exactly one of these three is required (NO_INBOUND_AUTH says why).
    #: Inbound API keys a client must present (``Authorization: Bearer`` or ``x-api-key``).
    #: A list, or a mapping ``name -> key`` whose names become the request's principal. From
    #: the environment: comma-separated, or JSON (a list, or an object for names).
    api_keys: Annotated[list[SecretStr] | dict[str, SecretStr] | None, NoDecode] = None
    #: The host app's own check ``(scope, headers) -> bool | principal`` (sync or async), or
    #: its import string ``"package.module:function"`` (how TOML and the environment name it).
    authorize: ImportString[Authorize] | None = None
    #: Serve anyone who can reach the router, spending the providers' keys. Development only:
    #: the router logs a warning at start-up.
    allow_unauthenticated: bool = False

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
        path = _toml_path.get()
        if path is None:
            return (init_settings, env_settings)
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=path))

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str], **overrides: Any) -> Self:
        """Load from a TOML file; environment variables and ``overrides`` take precedence.

        Any refusal is a :class:`ConfigError` naming the key and where its value came from (an
        environment variable or the file), so a module-level ``settings = from_toml(...)``
        stops the app's import with a message an operator can act on.
        """
        file = Path(path)
        if not file.is_file():
            raise ConfigError(f"config file not found: {file}")
        try:
            with file.open("rb") as handle:
                tomllib.load(handle)  # surface syntax errors with the file's name
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{file}: invalid TOML: {exc}") from exc
        token = _toml_path.set(file)
        try:
            return cls._built(file, overrides)
        finally:
            _toml_path.reset(token)

    @classmethod
    def _built(cls, file: Path | None, overrides: dict[str, Any]) -> Self:
        """``cls(**overrides)``, its refusals as one :class:`ConfigError` that says where each
        bad value came from."""
        # ``from None``: the message says it all, and pydantic's own rendering of the error (a
        # page of its schema's internals) would otherwise follow it in every traceback.
        try:
            return cls(**overrides)
        except ValidationError as exc:
            raise ConfigError(describe_refusal(exc, cls, file, overrides)) from None
        except SettingsError as exc:
            raise ConfigError(describe_undecodable(exc)) from None

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_api_keys(cls, value: Any) -> Any:
        # A string is how the environment gives it: JSON, or keys separated by commas (a key
        # never holds a space; a key with a comma in it takes the JSON form).
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith(("[", "{")):
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:  # its message gives a position, never the text
                raise ValueError(f"api_keys is neither JSON nor comma-separated keys ({exc.msg})") from None
        return [key.strip() for key in text.split(",") if key.strip()]

    @field_validator("routes")
    @classmethod
    def _check_routes(cls, value: list[str]) -> list[str]:
        for route in value:
            if not route.startswith("/"):
                raise ValueError(f"route {route!r} must start with '/'")
        return value

    @field_validator("models_route")
    @classmethod
    def _check_models_route(cls, value: str | None) -> str | None:
        if value == "":  # TOML and environment variables cannot say None
            return None
        if value is not None and not value.startswith("/"):
            raise ValueError(f"models_route {value!r} must start with '/'")
        return value

    @field_validator("api_keys")
    @classmethod
    def _check_api_keys(
        cls, value: list[SecretStr] | dict[str, SecretStr] | None
    ) -> list[SecretStr] | dict[str, SecretStr] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("api_keys is empty; list at least one key, or leave it out")
        keys = list(value.values()) if isinstance(value, dict) else value
        for name in value if isinstance(value, dict) else ():
            if not is_valid_name(name):
                raise ValueError(f"api_keys.{name}: names are letters, digits, '_', '.', '-'")
        for index, key in enumerate(keys):
            secret = key.get_secret_value()
            if len(secret) < MIN_INBOUND_KEY_LENGTH:
                raise ValueError(f"api_keys[{index}] is shorter than {MIN_INBOUND_KEY_LENGTH} characters")
            if any(not (33 <= ord(ch) < 127) for ch in secret):
                raise ValueError(f"api_keys[{index}] must be printable ASCII without spaces (it travels in a header)")
        if len({key.get_secret_value() for key in keys}) != len(keys):
            raise ValueError("api_keys lists the same key twice")
        return value

    @model_validator(mode="after")
    def _check_references(self) -> Self:
        for name in self.providers:
            if name == GROUP_NAMESPACE:
                raise ValueError(f"providers.{name}: 'group' is reserved for routing groups")
            if not is_valid_name(name):
                raise ValueError(f"providers.{name}: names are letters, digits, '_', '.', '-'")
        for name, group in self.groups.items():
            if not is_valid_name(name):
                raise ValueError(f"groups.{name}: names are letters, digits, '_', '.', '-'")
            for index, member in enumerate(group.member_settings()):
                key = f"groups.{name}.members[{index}]"
                self._check_member(key, member.ref)
                if member.ref.startswith(f"{GROUP_NAMESPACE}/") and (member.rpm or member.tpm):
                    raise ValueError(f"{key}: rpm/tpm belong on 'provider/model-id' members, not on a group")
        for name, target in self.aliases.items():
            if not is_valid_name(name):
                raise ValueError(f"aliases.{name}: an alias is a bare name (no '/')")
            self._check_member(f"aliases.{name}", target)
        for key in self.catalog:
            ref = parse_model_ref(key)
            if isinstance(ref, InvalidRef) or ref.kind is not RefKind.DIRECT:
                raise ValueError(f"catalog.{key}: keys are 'provider/model-id'")
            if ref.name not in self.providers:
                raise ValueError(f"catalog.{key}: names unknown provider {ref.name!r}")
        self._check_rules()
        self._flat = {name: self._flatten(name, (name,)) for name in self.groups}
        return self

    @model_validator(mode="after")
    def _check_auth(self) -> Self:
        # Defined after _check_references: a config with a bad reference says so first.
        chosen = [
            name
            for name, on in (
                ("authorize=", self.authorize is not None),
                ("api_keys", self.api_keys is not None),
                ("allow_unauthenticated=True", self.allow_unauthenticated),
            )
            if on
        ]
        if not chosen:
            raise ValueError(NO_INBOUND_AUTH)
        if chosen == ["api_keys", "allow_unauthenticated=True"]:
            raise ValueError("allow_unauthenticated=True contradicts api_keys; choose one")
        if len(chosen) > 1:
            raise ValueError(f"inbound auth is configured twice ({' and '.join(chosen)}); choose one")
        return self

    def _check_rules(self) -> None:
        seen: set[str] = set()
        for index, rule in enumerate(self.rules):
            key = f"rules[{index}]"
            if rule.name in seen:
                raise ValueError(f"{key}: rule name {rule.name!r} is used twice")
            seen.add(rule.name)
            self._check_member(f"{key}.route", rule.route)
            target = parse_model_ref(rule.route)
            if isinstance(target, InvalidRef):  # pragma: no cover - rejected by _check_member
                raise ValueError(f"{key}.route: {target.message}")
            if target.kind is RefKind.GROUP and self.groups[target.name].rules:
                raise ValueError(f"{key}.route: {rule.route!r} has rules itself; rules apply once per request")
            for group in rule.applies_to or ():
                if group not in self.groups or not self.groups[group].rules:
                    raise ValueError(f"{key}.applies_to: {group!r} is not a group with rules = true")

    def _check_member(self, key: str, member: str) -> None:
        ref = parse_model_ref(member)
        if isinstance(ref, InvalidRef):
            raise ValueError(f"{key}: {member!r} is not a valid reference ({ref.message})")
        if ref.kind is RefKind.ALIAS:
            raise ValueError(f"{key}: {member!r} must be 'provider/model-id' or 'group/<id>'")
        if ref.kind is RefKind.DIRECT and ref.name not in self.providers:
            raise ValueError(f"{key}: {member!r} names unknown provider {ref.name!r}")
        if ref.kind is RefKind.GROUP and ref.name not in self.groups:
            raise ValueError(f"{key}: {member!r} names unknown group {ref.name!r}")

    def _flatten(self, name: str, path: tuple[str, ...]) -> tuple[MemberSettings, ...]:
        """Members of group ``name`` with nested groups expanded in place, first occurrence kept."""
        if len(path) > MAX_GROUP_DEPTH:
            chain = " -> ".join(f"group/{step}" for step in path)
            raise ValueError(f"groups.{path[0]}: nesting deeper than {MAX_GROUP_DEPTH} ({chain})")
        flat: dict[str, MemberSettings] = {}
        for member in self.groups[name].member_settings():
            ref = parse_model_ref(member.ref)
            if isinstance(ref, InvalidRef):  # pragma: no cover - rejected by _check_member
                raise ValueError(f"groups.{name}: {member.ref!r}: {ref.message}")
            if ref.kind is RefKind.GROUP:
                if ref.name in path:
                    chain = " -> ".join(f"group/{step}" for step in (*path, ref.name))
                    raise ValueError(f"groups.{path[0]}: nesting cycle {chain}")
                nested: tuple[MemberSettings, ...] = tuple(
                    inner.model_copy(update={"weight": inner.weight * member.weight})
                    for inner in self._flatten(ref.name, (*path, ref.name))
                )
            else:
                nested = (member,)
            for item in nested:
                flat.setdefault(item.ref, item)
        return tuple(flat.values())

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
    return RouterSettings._built(None, overrides)
