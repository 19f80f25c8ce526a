"""``ModelRouter``: the pure-ASGI middleware that turns a host app into an LLM gateway.

Scopes it does not handle (other paths and methods, websockets) go straight to the host app in
the first lines of ``__call__``; ``lifespan`` goes to the host app with the router's own start-up
and shut-down around it (``runtime/lifespan.py``). A chat request flows: inbound auth → screen
headers → read body → parse → resolve plan (strategy, rules) → attempt loop (with hedging for
groups that hedge) → respond or relay, then count tokens and cost (``responses/answer.py``).
Auth and the header screen run before a byte of the body is read, so a refused client cannot make
the router buffer anything.
When every candidate failed, a group with a canned reply answers with it
(``responses/degraded.py``). The router's own ``GET`` routes (``/v1/models``, the Prometheus
``metrics_route``, the ``status_route`` page) are answered behind its inbound auth
(``endpoints/router_pages.py``). Per-request state lives in an
:class:`~asgi_router.responses.exchange.Exchange`, never on the middleware.

From the moment upstreams are involved, the request runs in a
:class:`~asgi_router.inbound.disconnect.ListeningScope`: a client that leaves cancels the
attempt or the relay at once, which closes the upstream response and releases its connection.
The listener only starts 10 ms into the upstream work: a fast answer never needs one. Any
unexpected error is logged and, if nothing has been sent yet, answered with an OpenAI-shaped
500: the router never takes the host app down with it.

Each finished request is counted in the metrics and its spans ended (when those are on), then
published to the event sinks (the log line among them) without waiting for them. Routes are
matched on the path below ``root_path`` (``inbound/mounting.py``), so the router works in a
sub-app mounted under a prefix too. A route's path says its protocol (``protocols/routes.py``):
on Anthropic's ``.../messages`` every error the router makes, in-band stream errors and the
canned reply included, is shaped as Anthropic's API shapes it.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any

import httpx2
from starlette.types import ASGIApp, Receive, Scope, Send

from asgi_router.attempts.bookkeeping import Bookkeeper
from asgi_router.attempts.context import AttemptContext
from asgi_router.attempts.loop import AttemptLoop
from asgi_router.attempts.outcomes import Committed, Refused
from asgi_router.config.advisories import kind_mismatches
from asgi_router.config.auth_settings import Authorize
from asgi_router.config.config_error import ConfigError
from asgi_router.config.settings import RouterSettings, load_settings
from asgi_router.core.router_errors import RouterError
from asgi_router.endpoints.count_tokens import count_tokens_routes, refuse_count_tokens
from asgi_router.endpoints.router_pages import build_pages
from asgi_router.fleet.state_factory import make_state
from asgi_router.inbound.auth import Admitted, build_guard
from asgi_router.inbound.body import ClientGone, InboundRequest, parse_request, read_body, request_id_for
from asgi_router.inbound.disconnect import ListeningScope
from asgi_router.inbound.mounting import route_path
from asgi_router.inbound.screen import screen_headers
from asgi_router.observability.events import AttemptEvent, RequestRecord, logger
from asgi_router.observability.optional import tracing_for
from asgi_router.observability.redaction import scrub_while_alive, secrets_of
from asgi_router.observability.sinks import EventBus, RecentRequests, Sink, default_sinks
from asgi_router.protocols.routes import is_anthropic, route_kind
from asgi_router.resilience.gate import Gate
from asgi_router.resilience.overview import Overview
from asgi_router.resilience.retry import RetryPolicy
from asgi_router.resilience.router_state import RouterState
from asgi_router.resilience.stats import RoutingStats
from asgi_router.responses.answer import Answer
from asgi_router.responses.exchange import Exchange
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan, ResolveError, Resolver
from asgi_router.routing.recorded import FactRecorder
from asgi_router.runtime.health import HealthProber
from asgi_router.runtime.lifespan import Connected, Lifespan
from asgi_router.transports.provider import ProviderRuntime
from asgi_router.transports.transport import Transport
from asgi_router.transports.transport_factory import make_transport

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ["ModelRouter"]


class ModelRouter:
    """Pure-ASGI middleware: ``app.add_middleware(ModelRouter, settings=...)`` or ``config=...``.

    Inbound auth is required (see :mod:`asgi_router.inbound.auth`): ``authorize``, ``api_keys`` or
    ``allow_unauthenticated`` in the settings, which refuse to be built without one.
    ``authorize=`` here is that setting, for the settings the router builds itself (from
    ``config=`` or the environment). A constructor that fails logs why on the ``asgi_router``
    logger at ERROR before raising (:class:`ConfigError` for configuration).
    ``transport`` injects the upstream :class:`~asgi_router.transports.transport.Transport` itself (a
    test's in-memory one, say); it is the caller's, started and closed by the router's lifespan
    like its own. ``http_client`` injects an ``httpx2.AsyncClient`` (e.g. over ``httpx2.MockTransport``) and so
    selects the httpx transport whatever ``settings.transport`` says; it stays the caller's to
    close. ``clock`` (monotonic seconds) and ``random`` (uniform in
    [0, 1), for backoff jitter) are injectable for tests of timing logic. ``state`` holds
    breakers, rotation counters, budgets and routing statistics (default: in memory, this
    process only, or shared by a fleet when ``settings.state_url`` names a Redis store); ``stats``
    replaces just the routing statistics (tests read them) and ``rng``
    is the randomness of ``weighted`` and ``latency``. ``sinks`` receive every finished request
    (see :mod:`asgi_router.observability.sinks`), after the built-in log line; the ring of :attr:`recent`
    requests is filled in place, lifespan or not. ``tracer_provider`` is the OpenTelemetry tracer
    provider the router's spans go to (default: the global one, once the host app sets it; see
    :mod:`asgi_router.observability.tracing`).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        settings: RouterSettings | None = None,
        config: str | os.PathLike[str] | None = None,
        http_client: httpx2.AsyncClient | None = None,
        transport: Transport | None = None,
        clock: Callable[[], float] = time.monotonic,
        random: Callable[[], float] = random.random,
        state: RouterState | None = None,
        sinks: Sequence[Sink] = (),
        stats: RoutingStats | None = None,
        rng: random.Random | None = None,
        authorize: Authorize | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        # Starlette builds its middleware on the app's first event, and an ASGI server whose
        # lifespan is "auto" swallows a failure there: the operator must see it in the log.
        try:
            self.app = app
            self.settings = load_settings(settings, config, authorize)
            self._guard = build_guard(self.settings)
            scrub_while_alive(self, secrets_of(self.settings))
            if self.settings.allow_unauthenticated:
                logger.warning(
                    "allow_unauthenticated=True: anyone who can reach %s spends the configured "
                    "providers' keys; use api_keys or authorize= outside local development",
                    ", ".join(self.settings.routes),
                )
            self.state: RouterState = state if state is not None else make_state(self.settings, clock)
            #: Each route, and whether it speaks Anthropic's protocol.
            self._routes = {route: is_anthropic(route_kind(route)) for route in self.settings.routes}
            #: Anthropic's token counting below each Messages route: refused (``endpoints/count_tokens.py``).
            self._count_tokens = count_tokens_routes(self._routes)
            self._resolver = Resolver(self.settings, self.state, stats=stats, rng=rng)
            self._book = Bookkeeper.from_settings(self.settings, self._resolver.stats)
            #: Sends what the attempts came to and counts what it used (``responses/answer.py``).
            self._answer = Answer(self._book, clock)
            self._providers = {
                name: ProviderRuntime.build(name, provider, self.settings.routes)
                for name, provider in self.settings.providers.items()
            }
            for runtime in self._providers.values():
                if runtime.missing_key_env is not None:  # said once, here, rather than per request
                    logger.warning(
                        "provider %r is skipped (provider_not_configured): its api_key_env %s is not set",
                        runtime.name,
                        runtime.missing_key_env,
                    )
            for advice in kind_mismatches(self.settings):  # accepted, but every Messages request would fail
                logger.warning(advice)
            if transport is not None and http_client is not None:
                raise ConfigError("pass either transport= or http_client=, not both")
            self._transport = (
                transport
                if transport is not None
                else make_transport(self.settings.transport, self.settings.pool, http_client)
            )
            self._gate = Gate(self.settings, self.state, clock)
            self._loop = AttemptLoop(
                AttemptContext(
                    transport=self._transport,
                    providers=self._providers,
                    max_response_bytes=self.settings.max_response_bytes,
                    clock=clock,
                    book=self._book,
                    gate=self._gate,
                    policy=RetryPolicy.from_settings(self.settings),
                    random=random,
                )
            )
            self._clock = clock
            #: The most recent finished requests, newest last.
            self.recent = RecentRequests(self.settings.events.recent)
            #: Where finished requests go; ``events.dropped`` counts what full queues turned away.
            self.events = EventBus(default_sinks(sinks), self.settings.events.queue_size)
            # What operators see: facts for a sink that records them, metrics, traces, the pages.
            records_facts = any(getattr(sink, "records_facts", False) is True for sink in sinks)
            self._recorder = FactRecorder(self.settings.rules) if records_facts else None
            overview = Overview(self.settings, self.state, self._resolver.stats, clock)
            self._metrics, self._pages, background = build_pages(
                self.settings, self._guard, overview, self.recent, self.events
            )
            self._tracing = tracing_for(tracer_provider)
            self._health = HealthProber(self.settings, self._providers, self._gate)
            connected = (self.state,) if isinstance(self.state, Connected) else ()
            self._lifespan = Lifespan(
                app, self.settings, self._transport, self.events, self._health, connected, background
            )
        except Exception as exc:
            logger.error("ModelRouter could not start: %s", exc)
            raise

    @property
    def transport(self) -> Transport:
        """The upstream transport every attempt goes through: the one passed as ``transport=``,
        else the one built from ``settings.transport`` (tests read its :meth:`~Transport.is_quiet`
        to check that no upstream connection was left open)."""
        return self._transport

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a chat request in this very frame (a coroutine fewer for every request, held for
        as long as it is open); hand everything else on: ``lifespan`` and ``GET /v1/models`` to
        the router's own handlers, the rest to the host app."""
        if scope["type"] != "http" or scope["method"] != "POST" or (path := route_path(scope)) not in self._routes:
            kind = scope["type"]
            if kind == "lifespan":
                await self._lifespan(scope, receive, send)
            elif kind == "http" and scope["method"] in ("GET", "HEAD") and self._pages.handles(route_path(scope)):
                await self._pages(scope, receive, send)
            elif kind == "http" and scope["method"] == "POST" and route_path(scope) in self._count_tokens:
                await refuse_count_tokens(send)
            else:
                await self.app(scope, receive, send)
            return
        started = self._clock()
        exchange = Exchange(scope, receive, send, request_id_for(scope), path, self._routes[path])
        exchange.record.started_at = time.time()
        if self._tracing is not None:
            exchange.trace = self._tracing.begin(scope["headers"])
        try:
            # Auth and the header screen, then the body, then its parse and plan: each refusal is
            # answered here (the steps themselves are plain functions: no coroutine per step).
            admitted = self._guard.verdict(scope)
            if not isinstance(admitted, (Admitted, RouterError)):
                admitted = await admitted
            refused = self._admit(exchange, admitted)
            prepared: tuple[Plan, InboundRequest, RequestFacts] | RouterError | None = None
            if refused is None:
                try:
                    body = await read_body(scope, receive, self.settings.max_body_bytes, self.settings.body_timeout)
                except ClientGone:
                    exchange.record.status = 499
                else:
                    prepared = self._prepare(exchange, body)
                    del body  # the parsed request holds it, until request.release() at commit
            if isinstance(prepared, RouterError):
                refused, prepared = prepared, None
            if refused is not None:
                await exchange.send_error(refused)
            elif prepared is not None:
                plan, request, facts = prepared
                del prepared
                if plan.rotation is not None:  # a rotate group's fleet-wide counter: one awaited step
                    plan = await plan.settle()
                    exchange.record.plan = plan.labels
                # From here upstreams are involved: a client that leaves cancels the work. The
                # listener starts only if the request is still going after WATCH_AFTER
                # (disconnect.py). The attempts are awaited from this frame, the answer only once
                # they are decided: one coroutine frame fewer held while an upstream is awaited.
                with ListeningScope(exchange):
                    result = await self._attempts(exchange, plan, request, facts)
                    await self._answer(exchange, plan, request, facts, result)
                if exchange.disconnected:
                    exchange.record.status = 499
                    self._note_abort(exchange.record)
        except Exception:
            await exchange.failed()
        finally:
            if exchange.lease is not None:  # the relay never reported: cancelled or crashed
                exchange.lease.finish("client_disconnected")
            exchange.record.latency = self._clock() - started
            self.recent.add(exchange.record)
            if self._metrics is not None or exchange.trace is not None:
                self._observe(exchange)
            self._lifespan.warn_if_missing()
            self.events.publish(exchange.record)

    def _observe(self, exchange: Exchange) -> None:
        """Count the finished request in the metrics and end its spans; a failure here is logged,
        never the client's problem (the response is complete)."""
        try:
            if self._metrics is not None:
                self._metrics.observe(exchange.record, exchange.path)
            if exchange.trace is not None:
                exchange.trace.finish(exchange.record)
        except Exception:
            logger.exception("recording request %s for metrics or traces failed", exchange.record.request_id)

    def _admit(self, exchange: Exchange, admitted: Admitted | RouterError) -> RouterError | None:
        """Inbound auth's verdict and the header screen, before a byte of the body is read."""
        if isinstance(admitted, RouterError):
            return admitted
        exchange.record.principal = admitted.principal
        return screen_headers(exchange.scope)

    def _prepare(
        self, exchange: Exchange, body: bytes | RouterError
    ) -> tuple[Plan, InboundRequest, RequestFacts] | RouterError:
        """The body parsed and its plan resolved, or why not."""
        if isinstance(body, RouterError):
            return body
        request = parse_request(body)
        if isinstance(request, RouterError):
            return request
        record = exchange.record
        record.stream = request.stream
        facts = RequestFacts(request.payload, exchange.scope["headers"])
        if self._recorder is not None:
            record.facts = self._recorder(facts)
        plan = self._resolver.resolve_string(request.payload["model"], facts)
        if isinstance(plan, ResolveError):
            if plan.code == "model_not_found":  # it parsed, so its characters are safe to log
                record.ref = request.payload["model"]
            return RouterError(plan.status, plan.code, plan.message)
        record.ref = request.payload["model"]  # validated by the parser: safe to log
        record.route = exchange.route = plan.route
        record.plan = plan.labels
        return plan, request, facts

    def _note_abort(self, record: RequestRecord) -> None:
        if record.in_flight is not None:
            candidate, since = record.in_flight
            record.events.append(
                AttemptEvent(
                    record.request_id,
                    len(record.events),
                    candidate,
                    "aborted",
                    "client_disconnected",
                    None,
                    self._clock() - since,
                    principal=record.principal,
                )
            )
            record.in_flight = None

    def _attempts(
        self, exchange: Exchange, plan: Plan, request: InboundRequest, facts: RequestFacts
    ) -> Coroutine[Any, Any, Committed | Refused | RouterError]:
        """The attempt loop's pass over ``plan`` (the call itself, to await)."""
        return self._loop.run(
            plan, request, exchange.path, exchange.scope["headers"], exchange.record, facts, exchange.trace
        )
