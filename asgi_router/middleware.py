"""``ModelRouter``: the pure-ASGI middleware that turns a host app into an LLM gateway.

Scopes it does not handle (other paths and methods, websockets) go straight to the host app in
the first lines of ``__call__``; ``lifespan`` goes to the host app with the router's own start-up
and shut-down around it (``runtime/lifespan.py``); the router's own ``GET`` routes
(``/v1/models``, the Prometheus ``metrics_route``, the ``status_route`` page) are answered behind
its inbound auth (``endpoints/router_pages.py``), and so are the calls about a stored Responses API response
below a Responses route (``endpoints/stored_responses.py``). The router's parts are built once, from its
keywords and settings, by :func:`~asgi_router.assembly.assemble`.

A chat request runs as a pipeline of named phases, in this order, each a method or a part with a
typed result; a phase that refuses ends the request with the router's error:

1. **admit** (:meth:`ModelRouter._admit`): inbound auth, the header screen and the caller's caps
   (admitted in ``resilience/caller_limits.py``; for a cap past its limit the decision point's
   ``Decisions.caller`` answers serve, downgrade to another ref, or refuse), before a byte of
   the body is read, so a refused client cannot make the router buffer anything;
2. **read** (:meth:`ModelRouter._read`): the bounded body read and its one JSON parse;
3. **plan** (:class:`~asgi_router.attempts.plan_phase.PlanPhase`): the request facts, the
   ``model`` resolved to a plan (rules, strategy; a ``rotate`` group's fleet counter settled), a
   sticky group's member first; then, for a group with a ``cache``, its response cache asked
   (:meth:`~asgi_router.caching.response_cache.ResponseCache.lookup`): a hit is answered there,
   with no attempt;
4. **wait for capacity** (:class:`~asgi_router.attempts.capacity_wait.CapacityWait`), for a
   queued group's request that found no capacity: its turn, then the plan phase again (the same
   object: no call back into this middleware); and **attempt**
   (:meth:`~asgi_router.attempts.loop.AttemptLoop.run`): the candidates tried until one commits
   (hedged for groups that hedge), every verdict from the request's retry state;
5. **answer** (:class:`~asgi_router.responses.answer.Answer`): the response sent or relayed, a
   group's canned reply when every candidate failed (``responses/degraded.py``), then tokens and
   cost counted; a cached group's complete answer stored
   (:meth:`~asgi_router.caching.response_cache.ResponseCache.keep`);
6. **record** (:meth:`ModelRouter._record`): the record built once, from the request's state,
   then counted in the metrics, its spans ended, and published to the ring of recent requests
   and the event sinks (the log line among them) without waiting for them.

Every phase shares one per-request object, a
:class:`~asgi_router.request.request_state.RequestState`: no per-request state lives on the
middleware, and what the request is and what happened to it so far (the attempts' events, the
attempt in flight, whether the client left) lives there; the published record is built from it
when the request is over.

The request runs in a :class:`~asgi_router.inbound.disconnect.ListeningScope`, whose one loop
timer times every limit of the request (the body read's, the attempts', the relay's). From
the attempt phase on, upstreams are involved and it listens: a client that leaves cancels the
attempt or the relay at once, which closes the upstream response and releases its connection.
The listener only starts 10 ms into the request, and not before the attempt phase: a fast
answer never needs one. Any
unexpected error is logged and, if nothing has been sent yet, answered with an OpenAI-shaped
500: the router never takes the host app down with it.

Routes are matched on the path below ``root_path`` (``inbound/mounting.py``), so the router
works in a sub-app mounted under a prefix too. A route's path says its protocol
(``protocols/routes.py``): on Anthropic's ``.../messages`` every error the router makes, in-band
stream errors and the canned reply included, is shaped as Anthropic's API shapes it.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Unpack

from starlette.types import ASGIApp, Receive, Scope, Send

from asgi_router.assembly import RouterKeywords, assemble
from asgi_router.attempts.request_answers import Downgrade
from asgi_router.caching.response_cache import Pending
from asgi_router.core.router_errors import RouterError
from asgi_router.endpoints.count_tokens import refuse_count_tokens
from asgi_router.guardrails.guardrail_run import caller_name
from asgi_router.inbound.auth import Admitted
from asgi_router.inbound.body import ClientGone, InboundRequest, parse_request, read_body, request_id_for
from asgi_router.inbound.disconnect import ListeningScope
from asgi_router.inbound.key_auth import model_refusal
from asgi_router.inbound.mounting import route_path
from asgi_router.inbound.screen import screen_headers
from asgi_router.inbound.session_id import read_session_header, session_refusal
from asgi_router.keys.virtual_key import VirtualKey
from asgi_router.observability.events import logger
from asgi_router.request.request_state import RequestState
from asgi_router.resilience.caller_limits import CallerTicket
from asgi_router.resilience.router_state import RouterState
from asgi_router.responses.client_gone import close_for_gone_client, owes_gone_response
from asgi_router.responses.error_reply import send_error, send_failure
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.plan import Plan
from asgi_router.transports.transport import Transport

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
    close. ``clock`` (monotonic seconds; default ``time.monotonic``) and ``random`` (uniform in
    [0, 1), for backoff jitter; default ``random.random``) are injectable for tests of timing logic. ``state`` holds
    breakers, rotation counters, budgets and routing statistics (default: in memory, this
    process only, or shared by a fleet when ``settings.state_url`` names a Redis store); ``stats``
    replaces just the routing statistics (tests read them) and ``rng``
    is the randomness of ``weighted`` and ``latency``. ``sinks`` receive every finished request
    (see :mod:`asgi_router.observability.sinks`), after the built-in log line; the ring of :attr:`recent`
    requests is filled in place, lifespan or not. ``tracer_provider`` is the OpenTelemetry tracer
    provider the router's spans go to (default: the global one, once the host app sets it; see
    :mod:`asgi_router.observability.tracing`). ``guardrails`` names your own checks (functions of
    an :class:`~asgi_router.guardrails.guardrail_api.GuardrailRequest`, sync or async), used by
    name in ``guardrails_default`` and groups' ``guardrails`` like the built-in ones. Every
    keyword is optional; their types are listed once, in
    :class:`~asgi_router.assembly.RouterKeywords`, and one it does not list is a ``TypeError``.
    """

    def __init__(self, app: ASGIApp, **keywords: Unpack[RouterKeywords]) -> None:
        # Starlette builds its middleware on the app's first event, and an ASGI server whose
        # lifespan is "auto" swallows a failure there: the operator must see it in the log.
        try:
            parts = assemble(self, app, **keywords)
        except Exception as exc:
            logger.error("ModelRouter could not start: %s", exc)
            raise
        self.app = app
        self.settings = parts.settings
        self.state: RouterState = parts.state
        #: The most recent finished requests, newest last.
        self.recent = parts.recent
        #: Where finished requests go; ``events.dropped`` counts what full queues turned away.
        self.events = parts.events
        # What each request's phases use, held directly: read on every request.
        self._parts = parts
        self._routes = parts.routes
        self._count_tokens = parts.count_tokens
        self._guard = parts.guard
        self._recorder = parts.recorder
        self._loop = parts.loop
        #: Phase *plan*: rules, strategy and sticky member (``attempts/plan_phase.py``).
        self._plan = parts.plan_phase
        #: The response cache, when a group configures one (``caching/``).
        self._cache = parts.cache
        self._answer = parts.answer
        self._clock = parts.clock
        self._metrics = parts.metrics
        self._tracing = parts.tracing
        self._pages = parts.pages
        self._lifespan = parts.lifespan
        self._callers = parts.callers
        #: The admin API and page (``None``: no ``admin_keys``), and virtual keys' own caps.
        self._admin = parts.admin
        self._keys = parts.key_caps
        #: Keeps each admitted request's spend row (``None``: no ledger).
        self._ledger = parts.ledger
        #: The guardrails (``None``: none configured, and no request pays for them).
        self._guardrails = parts.guardrails
        #: The session header, when caps or a sticky group read it (its length is checked).
        self._session_header = read_session_header(parts.settings)
        self._decisions = parts.loop.context.decisions
        #: A stored response's own calls (``GET``/``DELETE`` below a Responses route; ``None``:
        #: the router has no Responses route).
        self._stored = parts.stored

    @property
    def transport(self) -> Transport:
        """The upstream transport every attempt goes through: the one passed as ``transport=``,
        else the one built from ``settings.transport`` (tests read its :meth:`~Transport.is_quiet`
        to check that no upstream connection was left open)."""
        return self._parts.transport

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run a chat request through its phases; hand everything else on: ``lifespan`` and the
        router's own pages to their handlers, the rest to the host app."""
        if scope["type"] != "http" or scope["method"] != "POST" or (path := route_path(scope)) not in self._routes:
            kind = scope["type"]
            if kind == "lifespan":
                await self._lifespan(scope, receive, send)
            elif kind == "http" and self._admin is not None and self._admin.handles(route_path(scope)):
                await self._admin(scope, receive, send)
            elif kind == "http" and scope["method"] in ("GET", "HEAD") and self._pages.handles(route_path(scope)):
                await self._pages(scope, receive, send)
            elif kind == "http" and scope["method"] == "POST" and route_path(scope) in self._count_tokens:
                await refuse_count_tokens(send)
            elif kind == "http" and self._stored is not None and self._stored.handles(route_path(scope)):
                await self._stored(scope, receive, send)
            else:
                await self.app(scope, receive, send)
            return
        started = self._clock()
        state = RequestState(scope, receive, send, request_id_for(scope), path, self._routes[path], time.time())
        if self._tracing is not None:
            state.trace = self._tracing.begin(scope["headers"])
        ticket: CallerTicket | None = None
        pending: Pending | None = None
        try:
            # The request's one loop timer: the body read, the attempts and the relay bound their
            # reads on it, and a hedge's racers ride on it (core/deadlines.py). It listens for a
            # client that leaves only once upstreams are involved, and only if the request is
            # still going WATCH_AFTER after it arrived (disconnect.py).
            with ListeningScope(state, held=True) as listening:
                admitted = await self._admit(state)
                if isinstance(admitted, RouterError):
                    await send_error(state, admitted)
                    return
                ticket = admitted
                request = await self._read(state)
                if request is None:  # the client left mid-body: there is no one to answer
                    return
                if isinstance(request, RouterError):
                    await send_error(state, request)
                    return
                facts = RequestFacts(request.payload, scope["headers"])
                if self._recorder is not None:
                    state.facts = self._recorder(facts)
                plan = await self._plan(state, request, facts)
                if isinstance(plan, RouterError):
                    await send_error(state, plan)
                    return
                if self._guardrails is not None:  # the input guardrails, before any upstream
                    checked = await self._check_input(state, request, plan, facts)
                    if isinstance(checked, RouterError):
                        await send_error(state, checked)
                        return
                    request = checked
                if self._cache is not None and plan.policy is not None and plan.policy.cache is not None:
                    looked = await self._cache.lookup(
                        state, request.payload, request.stream, plan.policy.name, plan.rule, plan.policy.cache
                    )
                    if looked is True:  # answered from the group's response cache
                        return
                    if isinstance(looked, RouterError):
                        await send_error(state, looked)
                        return
                    if isinstance(looked, Pending):  # its answer's bytes kept as they are sent
                        pending = looked
                        state.send = pending
                # From here upstreams are involved: a client that leaves cancels the work.
                listening.listen()
                plan, result = await self._loop.run(plan, request, state, facts)
                await self._answer(state, plan, request, facts, result)
            if pending is not None and self._cache is not None:
                # The answer is complete: stored outside the listening scope, since a client that
                # leaves now (it has its answer) must not cancel the store or count as gone.
                await self._cache.keep(pending, state)
        except Exception:
            await send_failure(state)
        finally:
            if owes_gone_response(state):  # else nothing to close: no await
                await close_for_gone_client(state)
            self._record(state, started, ticket)

    async def _admit(self, state: RequestState) -> CallerTicket | RouterError | None:
        """Phase *admit*: inbound auth's verdict, the header screen and the caller's caps; the
        caller's ticket (``None``: callers are not capped) to go on, or the refusal.

        The guard gives its verdict at once where it can (``api_keys``, no auth) and an
        awaitable only for a host's async ``authorize=``: only that is awaited.
        """
        verdict = self._guard.verdict(state.scope)
        if not isinstance(verdict, (Admitted, RouterError)):
            verdict = await verdict
        if isinstance(verdict, RouterError):
            return verdict
        state.principal = verdict.principal  # the attempt events carry it
        state.admitted = True
        refused = screen_headers(state.scope)
        if refused is None and self._session_header is not None:
            refused = session_refusal(state.scope["headers"], self._session_header)
        if refused is not None or (self._callers is None and verdict.key is None):
            return refused
        if verdict.key is not None:  # a virtual key: its id and groups, its own caps
            refused = self._key_caps(state, verdict.key)
            if refused is not None or self._callers is None:
                return refused
        callers = self._callers
        assert callers is not None
        ticket = callers.admit(verdict.principal, state.scope)  # served unless judged
        refusal: RouterError | None = None
        if ticket.judged:  # a cap past its limit: the decision point answers (downgrade or refuse)
            answer = self._decisions.caller(ticket.judged)
            if answer is None:
                callers.serve(ticket)
            elif isinstance(answer, Downgrade):
                callers.serve(ticket, answer.cap, answer.ref)
            else:
                refusal = callers.refuse(ticket, answer.cap, answer.table)
        if ticket.outcome != "served" or state.caller_outcome is None:  # the key's downgrade stays
            state.caller_outcome, state.limit = ticket.outcome, ticket.limit
            state.downgrade_to = ticket.downgrade_to
        state.caller = ticket.caller
        if ticket.session is not None:
            state.session = ticket.session.subject[2:]  # "s:<digest>": the digest, for the ledger
        return refusal if refusal is not None else ticket

    def _key_caps(self, state: RequestState, key: VirtualKey) -> RouterError | None:
        """A virtual key's part of phase *admit*: the key named on the request, and its own caps
        (``resilience/key_caps.py``) answered by the decision point as a caller's are."""
        state.key_id, state.key_groups = key.id, key.groups
        keys = self._keys
        if keys is None or not key.capped:
            return None
        ticket = keys.admit(key)
        limits = keys.limits
        if ticket.judged:
            answer = self._decisions.caller(ticket.judged)
            if answer is None:
                limits.serve(ticket)
            elif isinstance(answer, Downgrade):
                limits.serve(ticket, answer.cap, answer.ref)
                state.caller_outcome, state.limit, state.downgrade_to = "downgraded", ticket.limit, ticket.downgrade_to
            else:
                state.caller, state.caller_outcome = key.caller, "refused"
                return limits.refuse(ticket, answer.cap, answer.table)
        state.key_charge = partial(limits.settle, ticket)
        return None

    async def _check_input(
        self, state: RequestState, request: InboundRequest, plan: Plan, facts: RequestFacts
    ) -> InboundRequest | RouterError:
        """The request's input guardrails (those of its ref and its plan's group): the request
        to go on with (its masked payload serialised afresh for every candidate), or the refusal."""
        assert self._guardrails is not None
        group = plan.policy.name if plan.policy is not None else None
        guards = state.guards = self._guardrails.select(state.ref, group, state.downgrade_to)
        if guards is None or not guards.input:
            return request
        caller = caller_name(state.caller, state.principal)
        checked = await guards.check_input(request.payload, state.path, caller, state.ref, lambda: facts.prompt_tokens)
        state.guarded(checked.ran)
        if checked.error is not None:
            return checked.error
        if checked.masked:  # the parsed payload is masked in place: its bytes are not sent
            return InboundRequest(request.payload, request.stream)
        return request

    async def _read(self, state: RequestState) -> InboundRequest | RouterError | None:
        """Phase *read*: the body, bounded in size and time (timed by the request's one timer),
        parsed; ``None`` when the client left before it was complete."""
        settings = self.settings
        try:
            body = await read_body(state.scope, state.receive, settings.max_body_bytes, settings.body_timeout)
        except ClientGone:
            state.status = 499
            return None
        if isinstance(body, RouterError):
            return body
        request = parse_request(body)
        if not isinstance(request, RouterError):
            state.stream = request.stream
            if state.key_groups is not None:  # a virtual key that may ask only for some refs
                return model_refusal(state.key_groups, request.payload, settings.aliases, state.anthropic) or request
        return request

    def _record(self, state: RequestState, started: float, ticket: CallerTicket | None) -> None:
        """Phase *record*: the record written once, then kept, counted and published; a failure
        of the metrics or the trace is logged, never the client's problem (the response is
        complete)."""
        if ticket is not None and (spend := state.spend) is not None and self._callers is not None:
            # Charged to the caller (and session): one call into the tallies; never the client's
            # problem. Only a served request has a spend (a refused one never reaches the answer).
            counted = spend.tokens
            try:
                self._callers.charge(ticket, counted[0] + counted[1] if counted else 0, spend.cost_usd or 0.0)
            except Exception:
                logger.exception("charging request %s to its caller failed", state.request_id)
        if state.key_charge is not None and (spend := state.spend) is not None:
            counted = spend.tokens
            try:
                state.key_charge(counted[0] + counted[1] if counted else 0, spend.cost_usd or 0.0)
            except Exception:
                logger.exception("charging request %s to its key failed", state.request_id)
        now = self._clock()
        record = state.close(now, now - started)
        self.recent.add(record)
        if self._metrics is not None or state.trace is not None:
            try:
                if self._metrics is not None:
                    self._metrics.observe(record, state.path)
                if state.trace is not None:
                    state.trace.finish(record)
            except Exception:
                logger.exception("recording request %s for metrics or traces failed", record.request_id)
        if not self._lifespan.seen:  # said once, at the first request
            self._lifespan.warn_if_missing()
        self.events.publish(record)
        if self._ledger is not None and state.admitted:
            self._ledger.add(record)  # an append: the row is written in the background
