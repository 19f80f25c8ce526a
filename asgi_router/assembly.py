"""Building a router's parts from its settings: the wiring ``ModelRouter`` runs on.

``ModelRouter.__init__`` takes a dozen keywords, each a seam for a test or a host (a transport,
a clock, a state store, sinks, a tracer provider); this module turns them and the settings into
the collaborators the request pipeline uses, so that the middleware holds parts and runs
requests, and the order in which parts depend on one another is read in one function,
:func:`assemble`. It sits between the middleware and the layers it wires (``endpoints`` and
``runtime`` among them, which may not import each other), as its own import-linter layer.
"""

from __future__ import annotations

import os
import random as random_module
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import httpx2
from starlette.types import ASGIApp

from asgi_router.attempts.bookkeeping import Bookkeeper
from asgi_router.attempts.capacity import Capacity
from asgi_router.attempts.context import AttemptContext
from asgi_router.attempts.loop import AttemptLoop
from asgi_router.attempts.plan_phase import PlanPhase
from asgi_router.attempts.response_affinity import ResponseAffinity
from asgi_router.caching.cache_factory import response_cache_for
from asgi_router.caching.response_cache import ResponseCache
from asgi_router.config.advisories import downgrade_mismatches, kind_mismatches
from asgi_router.config.auth_settings import Authorize
from asgi_router.config.config_error import ConfigError
from asgi_router.config.ledger_settings import (
    CAPS_WITHOUT_LEDGER,
    DEFAULT_LEDGER_URL,
    DEFAULT_LEDGER_VARIABLE,
    effective_ledger_url,
)
from asgi_router.config.settings import RouterSettings, load_settings
from asgi_router.core.route_paths import RouteKind, route_kind
from asgi_router.endpoints.admin_api import AdminApi
from asgi_router.endpoints.admin_surface import AdminSurface, build_admin
from asgi_router.endpoints.count_tokens import count_tokens_routes
from asgi_router.endpoints.router_pages import Pages, build_pages
from asgi_router.endpoints.stored_responses import StoredResponses
from asgi_router.fleet.caller_budgets import caller_tallies_for
from asgi_router.fleet.state_factory import make_state
from asgi_router.guardrails.guardrail_api import GuardrailFunction
from asgi_router.guardrails.guardrail_run import Guardrails
from asgi_router.inbound.auth import Guard, build_guard, chose_inbound_auth
from asgi_router.ledger.start_tallies import StartTallies
from asgi_router.observability.events import logger
from asgi_router.observability.optional import tracing_for
from asgi_router.observability.redaction import scrub_while_alive, secrets_of
from asgi_router.observability.sinks import EventBus, RecentRequests, Sink, default_sinks
from asgi_router.resilience.caller_limits import CallerLimits
from asgi_router.resilience.gate import Gate
from asgi_router.resilience.key_caps import KeyCaps
from asgi_router.resilience.overview import Overview
from asgi_router.resilience.retry import RetryPolicy
from asgi_router.resilience.router_state import RouterState
from asgi_router.resilience.stats import RoutingStats
from asgi_router.responses.answer import Answer
from asgi_router.routing.plan import Resolver
from asgi_router.routing.recorded import FactRecorder
from asgi_router.routing.resumable import ResumeTable
from asgi_router.runtime.health import HealthProber
from asgi_router.runtime.lifespan import Connected, Lifespan
from asgi_router.transports.provider import ProviderRuntime
from asgi_router.transports.transport import Transport
from asgi_router.transports.transport_factory import make_transport

if TYPE_CHECKING:  # the optional extras: imported only by a router that uses them
    from opentelemetry.trace import TracerProvider

    from asgi_router.ledger.service import Ledger
    from asgi_router.observability.metrics import RouterMetrics
    from asgi_router.observability.tracing import Tracing

__all__ = ["RouterKeywords", "RouterParts", "assemble", "ledger_for"]


class RouterKeywords(TypedDict, total=False):
    """``ModelRouter``'s keywords, each optional (what each means, and its default, is documented
    on ``ModelRouter``): the one list of them, which the middleware's signature and
    :func:`assemble` both take."""

    settings: RouterSettings | None
    config: str | os.PathLike[str] | None
    http_client: httpx2.AsyncClient | None
    transport: Transport | None
    clock: Callable[[], float]
    random: Callable[[], float]
    state: RouterState | None
    sinks: Sequence[Sink]
    stats: RoutingStats | None
    rng: random_module.Random | None
    authorize: Authorize | None
    tracer_provider: TracerProvider | None
    guardrails: Mapping[str, GuardrailFunction] | None


@dataclass(frozen=True, slots=True)
class RouterParts:
    """Everything a router's requests run on, built once per router by :func:`assemble`."""

    settings: RouterSettings
    #: Inbound auth: each request's first phase.
    guard: Guard
    state: RouterState
    #: Each chat route, and whether it speaks Anthropic's protocol.
    routes: dict[str, RouteKind]
    #: Anthropic's token counting below each Messages route: refused (``endpoints/count_tokens.py``).
    count_tokens: frozenset[str]
    resolver: Resolver
    #: The plan phase: rules, strategy, a sticky group's member first (asked again by the wait
    #: for capacity).
    plan_phase: PlanPhase
    #: Records the facts the rules read, for a sink that asks for them (``None``: none does).
    recorder: FactRecorder | None
    loop: AttemptLoop
    #: Sends what the attempts came to and counts what it used.
    answer: Answer
    transport: Transport
    clock: Callable[[], float]
    recent: RecentRequests
    events: EventBus
    metrics: RouterMetrics | None
    pages: Pages
    tracing: Tracing | None
    lifespan: Lifespan
    #: Caps per caller and per session (``resilience/caller_limits.py``); ``None``: none set.
    callers: CallerLimits | None = None
    #: The response cache (``caching/``); ``None``: no group configures one.
    cache: ResponseCache | None = None
    #: The admin API and page, and virtual keys' own caps (``None``: no ``admin_keys``).
    admin: AdminApi | None = None
    key_caps: KeyCaps | None = None
    #: Keys and spend that last (``ledger/service.py``); ``None``: no ledger configured.
    ledger: Ledger | None = None
    #: The guardrails (``asgi_router/guardrails``); ``None``: none configured.
    guardrails: Guardrails | None = None
    #: A stored response's calls below the Responses routes (``None``: no Responses route).
    stored: StoredResponses | None = None


def assemble(owner: object, app: ASGIApp, **keywords: Unpack[RouterKeywords]) -> RouterParts:
    """A router's parts from ``ModelRouter``'s keywords (documented there); raises
    :class:`~asgi_router.config.config_error.ConfigError` for a configuration that cannot run,
    and ``TypeError`` for a keyword ``ModelRouter`` does not take.

    The configured keys are scrubbed from the router's logs for as long as ``owner`` (the
    router) lives.
    """
    unknown = keywords.keys() - RouterKeywords.__optional_keys__
    if unknown:
        raise TypeError(f"ModelRouter got unexpected keyword arguments: {', '.join(sorted(unknown))}")
    clock = keywords.get("clock", time.monotonic)
    sinks = keywords.get("sinks", ())
    transport, http_client = keywords.get("transport"), keywords.get("http_client")
    state = keywords.get("state")
    resolved = load_settings(keywords.get("settings"), keywords.get("config"), keywords.get("authorize"))
    guard: Guard | None = build_guard(resolved) if chose_inbound_auth(resolved) or not resolved.admin_keys else None
    scrub_while_alive(owner, secrets_of(resolved))
    if resolved.allow_unauthenticated:
        logger.warning(
            "allow_unauthenticated=True: anyone who can reach %s spends the configured "
            "providers' keys; use api_keys or authorize= outside local development",
            ", ".join(resolved.routes),
        )
    functions = dict(keywords.get("guardrails") or {})
    checks = Guardrails(resolved, functions) if Guardrails.needed(resolved, functions) else None
    router_state: RouterState = state if state is not None else make_state(resolved, clock)
    resolver = Resolver(resolved, router_state, stats=keywords.get("stats"), rng=keywords.get("rng"))
    book = Bookkeeper.from_settings(resolved, resolver.stats, clock)
    book.rate_limits.share(router_state)  # a fleet shares providers' stated limits
    providers = {
        name: ProviderRuntime.build(name, provider, resolved.routes, resolved.session_header)
        for name, provider in resolved.providers.items()
    }
    for runtime in providers.values():
        if runtime.missing_key_env is not None:  # said once, here, rather than per request
            logger.warning(
                "provider %r is skipped (provider_not_configured): its api_key_env %s is not set",
                runtime.name,
                runtime.missing_key_env,
            )
    # Accepted, but some requests would fail: every Messages request to a provider of the wrong
    # kind; a route's clients past a cap whose downgrade_to cannot serve that route.
    for advice in kind_mismatches(resolved) + downgrade_mismatches(resolved):
        logger.warning(advice)
    if transport is not None and http_client is not None:
        raise ConfigError("pass either transport= or http_client=, not both")
    upstream = transport if transport is not None else make_transport(resolved.transport, resolved.pool, http_client)
    gate = Gate(resolved, router_state, clock)
    capacity = Capacity.for_settings(resolved, clock, router_state)
    # A Responses route's follow-ups go back to the provider that holds their previous response.
    responses = ResponseAffinity.for_settings(resolved, router_state)
    plan_phase = PlanPhase(resolver, capacity, responses)
    loop = AttemptLoop(
        AttemptContext(
            transport=upstream,
            providers=providers,
            max_response_bytes=resolved.max_response_bytes,
            max_event_bytes=resolved.max_event_bytes,
            max_rate_limit_reset=resolved.max_rate_limit_reset,
            clock=clock,
            book=book,
            gate=gate,
            policy=RetryPolicy.from_settings(resolved),
            random=keywords.get("random", random_module.random),
            max_body_bytes=resolved.max_body_bytes,
        ),
        plan_phase,
        capacity,
        # A stream that breaks is continued there, on candidates whose ``resume`` allows it.
        ResumeTable(resolved),
    )
    recent = RecentRequests(resolved.events.recent)
    events = EventBus(default_sinks(sinks), resolved.events.queue_size)
    # What operators see: facts for a sink that records them, metrics, traces, the pages.
    records_facts = any(getattr(sink, "records_facts", False) is True for sink in sinks)
    overview = Overview(resolved, router_state, resolver.stats, clock)
    callers = (
        CallerLimits(resolved, caller_tallies_for(resolved, router_state, clock))
        if resolved.callers or resolved.sessions is not None
        else None
    )
    ledger = ledger_for(resolved, callers is not None)
    admin: AdminSurface | None = None
    if resolved.admin_keys and ledger is not None:  # virtual keys in front of the configured inbound auth
        admin = build_admin(resolved, guard, ledger, caller_tallies_for(resolved, router_state, clock), clock=clock)
        guard = admin.guard
    assert guard is not None
    metrics, pages, background = build_pages(
        resolved,
        guard,
        overview,
        recent,
        events,
        callers,
        loop.capacity,
        book.rate_limits,
        ledger.status if ledger is not None else None,
        checks.blocks if checks is not None else None,
    )
    if admin is not None:
        background.append(admin.ring.keep_fresh)
        if metrics is not None and metrics.callers is not None:  # callers named by keys count as configured
            admin.ring.on_caller = metrics.callers.name
    if metrics is not None and ledger is not None:
        metrics.ledger_readings = ledger.readings
    if metrics is not None and loop.capacity is not None:
        metrics.queue_depths = loop.capacity.depths
    health = HealthProber(resolved, providers, gate)
    cache = response_cache_for(resolved, router_state, clock, resolver, providers, upstream)
    if metrics is not None and cache is not None:
        metrics.cache_bytes = cache.store.size
    connected = (router_state,) if isinstance(router_state, Connected) else ()
    routes = {route: route_kind(route) for route in resolved.routes}
    stored = None
    if responses is not None:  # the calls about a stored response go where it was produced
        stored = StoredResponses(
            [route for route, kind in routes.items() if kind == "responses"],
            guard,
            responses,
            providers,
            gate,
            upstream,
            clock,
            resolved.max_response_bytes,
            recent,
            events,
            metrics,
        )
    return RouterParts(
        settings=resolved,
        guard=guard,
        state=router_state,
        routes=routes,
        count_tokens=count_tokens_routes(routes),
        resolver=resolver,
        plan_phase=plan_phase,
        recorder=FactRecorder(resolved.rules) if records_facts else None,
        loop=loop,
        answer=Answer(book, clock, responses),
        transport=upstream,
        clock=clock,
        recent=recent,
        events=events,
        metrics=metrics,
        pages=pages,
        tracing=tracing_for(keywords.get("tracer_provider")),
        lifespan=Lifespan(
            app,
            resolved,
            upstream,
            events,
            health,
            connected,
            background,
            ledger=ledger,
            seed=start_seed(callers, admin.key_caps if admin is not None else None),
        ),
        callers=callers,
        cache=cache,
        admin=admin.api if admin is not None else None,
        key_caps=admin.key_caps if admin is not None else None,
        ledger=ledger,
        guardrails=checks,
        stored=stored,
    )


def start_seed(
    callers: CallerLimits | None, key_caps: KeyCaps | None
) -> Callable[[StartTallies], Coroutine[Any, Any, None] | None] | None:
    """What the ledger's tallies at start seed: the callers' and sessions' caps, and the virtual
    keys' own (each only where the router has them)."""
    if key_caps is None:
        return callers.seed if callers is not None else None

    def seed(found: StartTallies) -> Coroutine[Any, Any, None] | None:
        key_caps.seed(found)
        return callers.seed(found) if callers is not None else None

    return seed


def ledger_for(settings: RouterSettings, capped: bool) -> Ledger | None:
    """The router's ledger, if it has one; the warning that caps without one reset on restart."""
    url = effective_ledger_url(settings.ledger_url, settings.admin_keys)
    if url is None:
        if capped:
            logger.warning(CAPS_WITHOUT_LEDGER)
        return None
    if settings.ledger_url is None and url == DEFAULT_LEDGER_URL:
        logger.info("admin_keys is set and ledger_url is not: the ledger is %s in %s", url, os.getcwd())
    elif settings.ledger_url is None:
        logger.info("admin_keys is set and ledger_url is not: the ledger is %s (%s)", url, DEFAULT_LEDGER_VARIABLE)
    from asgi_router.ledger.service import Ledger  # only a router with a ledger loads it

    session_ttl = settings.sessions.ttl if settings.sessions is not None else None
    return Ledger(
        url, settings.ledger_buffer, settings.ledger_flush_interval, settings.ledger_retention_days, session_ttl
    )
