"""A stored Responses API response's own calls, answered by the provider that holds it.

Below each Responses route (``/v1/responses``) OpenAI's API serves four calls about one stored
response: ``GET {route}/{id}`` (retrieve; ``?stream=true`` replays its events),
``DELETE {route}/{id}``, ``GET {route}/{id}/input_items`` (``after``, ``limit``, ``order``,
``include``) and ``POST {route}/{id}/cancel``. Only the provider that produced the response holds
it, so the router answers them from the table that pins a follow-up turn
(``attempts/response_affinity.py``): the call goes to that candidate's provider, with the base
URL, key and headers of the member, its method, path and the client's query, and the answer
(status, body, headers filtered as every relayed answer's) comes back as it is. Nothing fails over:
no other provider can know the response.

======================================================  =====================================
what the router finds                                   answer
======================================================  =====================================
an id it never relayed (or forgot), or one another     404 in OpenAI's words
caller produced (never told apart)                      (``Response with id '...' not found.``)
the provider skipped: not configured, breaker open,    503 ``previous_response_unavailable``
no free slot; or no answer (refused, timed out, cut)    naming the candidate
an answer, any status (a 404: it no longer holds it)   relayed as it came
a ``DELETE`` answered 2xx                               relayed, and the id forgotten (here and
                                                        in the fleet's store)
another path below the route                           404 ``unknown_url``
a known path with another method                        405 ``method_not_allowed`` and ``Allow``
======================================================  =====================================

Inbound auth applies as on the route (virtual keys included). The caller caps do not: these calls
produce no tokens and cost nothing, so they are neither admitted against a cap nor charged (a
caller past its cap can still read or delete what it made). Each call is a request of its own in
the records, the log line and the metrics (``path`` label: the route's template, ``{route}/{id}``,
never the id), with one attempt event for its candidate, and it counts on that candidate's
breakers like any attempt; it writes no spend row. A chat request never reaches this module: the
middleware asks it only about paths that are not a route.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

from starlette.types import Receive, Scope, Send

from asgi_router.attempts.response_affinity import ResponseAffinity
from asgi_router.core.candidate import Candidate
from asgi_router.core.classify import classify_exception
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import AttemptSummary, RouterError
from asgi_router.core.upstream_errors import UpstreamError
from asgi_router.inbound.auth import Guard
from asgi_router.inbound.body import request_id_for
from asgi_router.inbound.mounting import route_path
from asgi_router.observability.events import logger
from asgi_router.observability.sinks import EventBus, RecentRequests
from asgi_router.request.request_state import RequestState
from asgi_router.request.router_headers import add_router_headers
from asgi_router.resilience.gate import Gate, Lease
from asgi_router.responses.error_reply import send_error, send_failure
from asgi_router.responses.headers import relayed_headers
from asgi_router.responses.relay import send_whole
from asgi_router.transports.provider import ProviderRuntime, RouteTarget
from asgi_router.transports.transport import Transport, UpstreamResponse, close_response, read_bounded

if TYPE_CHECKING:  # prometheus_client is optional
    from asgi_router.observability.metrics import RouterMetrics

__all__ = ["StoredResponses", "not_found_body"]

#: The methods each path shape below a Responses route answers, by its last segment.
_SHAPES: Final[dict[str, tuple[str, ...]]] = {"": ("GET", "DELETE"), "input_items": ("GET",), "cancel": ("POST",)}
#: The bytes a client's query may hold to be passed on as it is (already percent-encoded).
_QUERY: Final = bytes(range(0x21, 0x7F)).replace(b"#", b"")
_TOO_LARGE: Final = "its answer is larger than max_response_bytes"


def not_found_body(response_id: str) -> bytes:
    """OpenAI's 404 for a response it does not hold, in its words (an id that could not be shown
    safely is shown as ``?``)."""
    shown = response_id if len(response_id) <= 64 and response_id.isascii() and response_id.isprintable() else "?"
    error = {"message": f"Response with id '{shown}' not found.", "type": "invalid_request_error", "param": None}
    return json.dumps({"error": {**error, "code": None}}, separators=(",", ":")).encode()


class StoredResponses:
    """The stored-response calls below a router's Responses routes (see the module docstring)."""

    def __init__(
        self,
        routes: Sequence[str],
        guard: Guard,
        affinity: ResponseAffinity,
        providers: dict[str, ProviderRuntime],
        gate: Gate,
        transport: Transport,
        clock: Callable[[], float],
        max_response_bytes: int,
        recent: RecentRequests,
        events: EventBus,
        metrics: RouterMetrics | None,
    ) -> None:
        #: Each Responses route with the ``/`` its calls' paths continue it with.
        self._prefixes = {route.rstrip("/") + "/": route for route in routes}
        #: The same, as ``str.startswith`` takes them: every request the host app serves is
        #: asked about, so one call in C answers.
        self._starts = tuple(self._prefixes)
        self._guard = guard
        self._affinity = affinity
        self._providers = providers
        self._gate = gate
        self._transport = transport
        self._clock = clock
        self._max_bytes = max_response_bytes
        self._recent = recent
        self._events = events
        self._metrics = metrics

    def handles(self, path: str) -> bool:
        """Whether ``path`` (below ``root_path``) is below one of the Responses routes."""
        return path.startswith(self._starts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = self._clock()
        path, method = route_path(scope), scope["method"]
        prefix = next(prefix for prefix in self._prefixes if path.startswith(prefix))
        response_id, *rest = path[len(prefix) :].split("/")
        shape = _shape(response_id, rest)
        label = prefix + "{id}" + (f"/{shape}" if shape else "") if shape is not None else prefix + "*"
        state = RequestState(scope, receive, send, request_id_for(scope), label, "responses", time.time())
        try:
            verdict = await self._guard.check(scope)
            if isinstance(verdict, RouterError):
                await send_error(state, verdict)
                return
            state.principal, state.admitted = verdict.principal, True
            state.key_id = verdict.key.id if verdict.key is not None else None
            refused = _refusal(method, path, prefix, shape, scope.get("query_string", b""))
            if refused is not None:
                await send_error(state, refused)
                return
            producer = await self._affinity.producer(response_id, state.principal)
            if producer is None or not producer.same_caller:
                await _send_not_found(state, response_id)
                return
            assert shape is not None
            await self._call(state, self._prefixes[prefix], response_id, shape, producer.candidate)
        except Exception:
            await send_failure(state)
        finally:
            self._record(state, started)

    async def _call(self, state: RequestState, route: str, response_id: str, shape: str, producer: str) -> None:
        """Send the call to the provider that holds the response and relay its answer."""
        provider_name, _, model_id = producer.partition("/")
        candidate = Candidate(provider_name, model_id)
        state.plan = (producer,)
        provider = self._providers.get(provider_name)
        target = provider.targets.get(route) if provider is not None else None
        if provider is None or not provider.configured or not isinstance(target, RouteTarget):
            why = "not configured" if provider is None or not provider.configured else str(target)
            await self._unavailable(state, candidate, "provider_not_configured", None, why)
            return
        lease = self._gate.enter(candidate)
        if not isinstance(lease, Lease):
            reason: Reason = "saturated" if lease is None else "recovering" if lease.recovering else "circuit_open"
            await self._unavailable(state, candidate, reason, None)
            return
        try:
            await self._send(state, response_id, shape, provider, target, candidate, lease)
        finally:
            lease.finish("router_error")  # only if nothing else finished it (an unexpected error)

    async def _send(
        self,
        state: RequestState,
        response_id: str,
        shape: str,
        provider: ProviderRuntime,
        target: RouteTarget,
        candidate: Candidate,
        lease: Lease,
    ) -> None:
        """The call itself, under the provider's timeouts: ``first_byte`` for the status,
        ``total`` for the whole answer (``idle`` between a replay's events)."""
        scope, producer = state.scope, candidate.key
        method = scope["method"]
        url = _url(target.url, provider.query, response_id, shape, scope.get("query_string", b""))
        headers = target.head.build(scope["headers"], state.request_id)  # no body goes up, a cancel's neither
        timeouts = provider.timeouts
        sent = self._clock()
        state.in_flight = (producer, sent)
        response: UpstreamResponse | None = None
        reason: Reason
        try:
            async with asyncio.timeout(min(timeouts.first_byte, timeouts.total)):
                response = await self._transport.send(provider, url, headers, b"", method=method)
            lease.responded()
            status, reason, ttfb = response.status, _reason(response.status), self._clock() - sent
            if _is_event_stream(response.raw_headers):
                await self._relay_stream(state, producer, response, sent + timeouts.total, timeouts.idle)
            else:
                async with asyncio.timeout(timeouts.total - ttfb):
                    body = await read_bounded(response, self._max_bytes)
                if body is None:  # nothing sent yet: the client hears why
                    lease.finish("upstream_5xx")
                    state.event(producer, "failed", "upstream_5xx", status, self._clock() - sent, ttfb)
                    await self._unavailable(state, candidate, "upstream_5xx", status, _TOO_LARGE, event=False)
                    return
                if method == "DELETE" and reason == "served":  # gone from the provider: forgotten here
                    await self._affinity.forget(response_id)
                relayed = add_router_headers(relayed_headers(response.raw_headers)[0], state, producer, 1)
                state.status = status
                await send_whole(state.send_tracked, status, relayed, body)
            state.winner = producer
            lease.finish(reason)
            state.event(
                producer, "served" if reason == "served" else "failed", reason, status, self._clock() - sent, ttfb
            )
        except (UpstreamError, TimeoutError) as exc:
            reason = classify_exception(exc)
            lease.finish(reason)
            answered = response.status if response is not None else None
            state.event(producer, "failed", reason, answered, self._clock() - sent)
            if not state.response_started:
                await self._unavailable(state, candidate, reason, answered, event=False)
        finally:
            state.in_flight = None
            if response is not None and (closing := close_response(response)) is not None:
                await closing

    async def _relay_stream(
        self, state: RequestState, producer: str, response: UpstreamResponse, end_by: float, idle: float
    ) -> None:
        """A retrieve's replayed events (``?stream=true``), relayed as they arrive: each read
        within ``idle``, all of them by ``end_by``. A break after the start just ends the body."""
        headers = add_router_headers(relayed_headers(response.raw_headers)[0], state, producer, 1)
        state.status = response.status
        await state.send_tracked({"type": "http.response.start", "status": response.status, "headers": headers})
        chunks = response.chunks
        try:
            while True:
                async with asyncio.timeout(max(0.0, min(idle, end_by - self._clock()))):
                    chunk = await anext(chunks, b"")
                if not chunk:
                    break
                state.bytes_relayed += len(chunk)
                await state.send({"type": "http.response.body", "body": chunk, "more_body": True})
        finally:
            await state.send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _unavailable(
        self,
        state: RequestState,
        candidate: Candidate,
        reason: Reason,
        status: int | None,
        detail: str | None = None,
        *,
        event: bool = True,
    ) -> None:
        """The 503 naming the candidate that holds the response (never its key)."""
        summary = AttemptSummary(candidate.key, reason, status, skipped=event, detail=detail)
        if event:
            state.event(candidate.key, "skipped", reason)
        message = (
            f"the response is held by {candidate.key}, which cannot answer now (no other provider holds it); "
            f"retry later\n{summary.line()}"
        )
        await send_error(state, RouterError(503, "previous_response_unavailable", message, (summary,)), 1)

    def _record(self, state: RequestState, started: float) -> None:
        """The call's record, kept, counted and published (no spend row: it cost nothing)."""
        now = self._clock()
        record = state.close(now, now - started)
        self._recent.add(record)
        if self._metrics is not None:
            try:
                self._metrics.observe(record, state.path)
            except Exception:
                logger.exception("recording request %s for metrics failed", record.request_id)
        self._events.publish(record)


def _shape(response_id: str, rest: list[str]) -> str | None:
    """Which call a path below the route is: ``""`` for ``{id}``, else its last segment;
    ``None``: none (no id, a trailing ``/``, a segment the API does not have)."""
    if not response_id or len(rest) > 1:
        return None
    last = rest[0] if rest else ""
    return last if (last or not rest) and last in _SHAPES else None


def _refusal(method: str, path: str, prefix: str, shape: str | None, query: bytes) -> RouterError | None:
    """Why a call below a Responses route is not one the router answers, if it is not."""
    if shape is None:
        shown = path if len(path) <= 200 and path.isprintable() else path[:200].encode("unicode_escape").decode()
        return RouterError(
            404,
            "unknown_url",
            f"Invalid URL ({method} {shown}): below {prefix[:-1]} this gateway answers GET and DELETE "
            f"{prefix}{{id}}, GET {prefix}{{id}}/input_items and POST {prefix}{{id}}/cancel",
        )
    allowed = _SHAPES[shape]
    if method not in allowed:
        return RouterError(
            405,
            "method_not_allowed",
            f"{method} is not allowed here: {prefix}{{id}}{'/' + shape if shape else ''} answers "
            + " and ".join(allowed),
            headers=((b"allow", ", ".join(allowed).encode()),),
        )
    if query.translate(None, _QUERY):
        return RouterError(400, "invalid_query", "the query string holds bytes a URL may not carry")
    return None


def _url(target: str, fixed: str, response_id: str, shape: str, query: bytes) -> str:
    """The provider's URL for the call: its route target's path, the id, the path's last part,
    then its fixed query parameters and the client's."""
    base = target[: len(target) - len(fixed)] if fixed else target
    parts = [part for part in (fixed[1:], query.decode("ascii")) if part]
    return (
        base + "/" + quote(response_id, safe="") + ("/" + shape if shape else "") + "?" * bool(parts) + "&".join(parts)
    )


def _reason(status: int) -> Reason:
    """How an answer counts for the candidate's breakers and its event: a 4xx other than 429 is
    the call's own business (an id the provider no longer holds), not the provider's health."""
    if status < 400:
        return "served"
    if status == 429:
        return "rate_limited"
    return "upstream_5xx" if status >= 500 else "client_error"


def _is_event_stream(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.lower().startswith(b"text/event-stream")
    return False


async def _send_not_found(state: RequestState, response_id: str) -> None:
    headers = add_router_headers([(b"content-type", b"application/json")], state, None, 0)
    state.status = 404
    await send_whole(state.send_tracked, 404, headers, not_found_body(response_id))
