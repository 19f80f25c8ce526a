"""One request's context: the one per-request object every phase of the pipeline shares.

The middleware makes a :class:`RequestContext` per request and drops it with the request: no
per-request state lives on the middleware, and control state (the attempt in flight, the
committed stream's lease, whether the client left) lives here rather than on the
:class:`~asgi_router.observability.events.RequestRecord`, which is the published summary, not a
blackboard. What the answer learns (status, winner, bytes relayed, tokens and cost) is kept here
too, and :meth:`RequestContext.close` writes it onto the record once, when the request is over.

It also sends the router's own errors (shaped for the route's protocol: OpenAI's, or Anthropic's
on a Messages route; with the router's headers), remembers whether a response has started (after
that, no error response can be sent: only an in-band stream error), and is the party the
disconnect listener tells when the client leaves
(:class:`~asgi_router.inbound.disconnect.ListeningScope`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import Message, Receive, Scope, Send

from asgi_router.attempts.bookkeeping import Spend
from asgi_router.core.deadlines import Deadline
from asgi_router.core.router_errors import RouterError
from asgi_router.observability.events import AttemptEvent, RequestRecord, logger
from asgi_router.protocols.anthropic_errors import anthropic_error_body
from asgi_router.resilience.gate import Lease
from asgi_router.responses.headers import router_headers
from asgi_router.responses.relay import ends_stream, send_whole
from asgi_router.routing.facts import EMPTY_FACTS, RequestFacts
from asgi_router.routing.plan import Plan

if TYPE_CHECKING:  # opentelemetry is optional: only a traced request holds one
    from asgi_router.observability.tracing import RequestTrace
    from asgi_router.resilience.caller_limits import CallerTicket

__all__ = ["RequestContext"]


class RequestContext:
    """One request's state from arrival to its record: what was sent, whether the client is still
    there, what is in flight, and what the answer came to."""

    __slots__ = (
        "anthropic",
        "bytes_relayed",
        "caller",
        "chunks_relayed",
        "degraded",
        "disconnected",
        "facts",
        "finished",
        "in_flight",
        "last_sent",
        "lease",
        "path",
        "plan",
        "receive",
        "record",
        "response_started",
        "route",
        "scope",
        "send",
        "spend",
        "status",
        "trace",
        "winner",
    )

    def __init__(
        self, scope: Scope, receive: Receive, send: Send, request_id: str, path: str = "", anthropic: bool = False
    ) -> None:
        self.scope = scope
        #: The route asked for: the path below ``root_path`` (``inbound/mounting.py``).
        self.path = path
        #: The route speaks Anthropic's Messages API: errors in its shape.
        self.anthropic = anthropic
        self.receive = receive
        self.send = send
        #: The summary sinks and metrics get; the attempts add their events to it as they go.
        self.record = RequestRecord(request_id, "-")
        self.response_started = False
        self.finished = False
        self.disconnected = False
        #: The candidate being tried or relayed right now, and since when: if the client leaves
        #: meanwhile, :meth:`close` events it as ``aborted``.
        self.in_flight: tuple[str, float] | None = None
        #: The committed stream's lease, finished when the relay ends (or the request does).
        self.lease: Lease | None = None
        #: What the rules read of the request, once the plan phase has made them.
        self.facts: RequestFacts = EMPTY_FACTS
        #: The plan made again for a request that waited for capacity (``None``: the first stands).
        self.plan: Plan | None = None
        #: ``x-router-route`` once a plan was resolved.
        self.route: str | None = None
        #: The request's trace, when a tracer provider is set.
        self.trace: RequestTrace | None = None
        #: What the answer came to, written onto the record by :meth:`close`.
        self.status = 0
        self.winner: str | None = None
        self.bytes_relayed = 0
        #: Chunks a relay sent, kept current should it be cancelled (an estimate counts them).
        self.chunks_relayed = 0
        #: The last chunk the relay sent (kept current by it): whether it ends the stream is
        #: asked only when the client leaves.
        self.last_sent = b""
        self.degraded = False
        self.spend: Spend | None = None
        #: What caller caps made of the request, when callers or sessions are capped.
        self.caller: CallerTicket | None = None

    def complete(self) -> None:
        """The whole response has been handed to the server: a disconnect from now on is not an
        abort (uvicorn's ``receive`` reports one as soon as a response is complete), so the
        listener must not cancel what is left (closing the upstream response)."""
        self.finished = True

    async def send_tracked(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.response_started = True
        await self.send(message)

    async def send_error(self, error: RouterError, attempts: int = 0) -> None:
        headers = [(b"content-type", b"application/json")]
        headers += router_headers(self.record.request_id, None, attempts, self.route)
        headers += error.headers
        if self.record.sticky is not None:  # a sticky group's keyed request: after its plan ran
            headers.append((b"x-router-sticky", self.record.sticky[1].encode()))
        if error.retry_after is not None:
            headers.append((b"retry-after", str(max(1, round(error.retry_after + 0.4999))).encode()))
        self.status = error.status
        body = anthropic_error_body(error.status, error.message, error.attempts) if self.anthropic else error.body()
        await send_whole(self.send_tracked, error.status, headers, body)

    async def failed(self) -> None:
        """An unexpected error inside the router (a host's ``authorize`` that raised, a bug): the
        traceback goes to the router's logger, which scrubs keys from it, and the client gets
        an OpenAI-shaped 500 if nothing was sent yet, never the server's plain-text one."""
        logger.exception("request %s failed inside the router", self.record.request_id)
        if not self.response_started:
            await self.send_error(RouterError(500, "router_error", "the router failed; see the server log"))

    def client_left(self, scope: Deadline) -> None:
        """The client disconnected: cancel ``scope`` unless the response is already complete, or
        its stream's last event has been sent (the client has the whole answer: what is left is
        the upstream's end, not the client's)."""
        if not self.finished and not ends_stream(self.last_sent):
            self.disconnected = True
            scope.cancel()

    def close(self, now: float, latency: float) -> RequestRecord:
        """The request is over: settle what is still open and write the record, once.

        A lease the relay never finished (it was cancelled, or crashed) is finished as
        ``client_disconnected``; a client that left makes the status 499 and the attempt or
        relay that was in flight an ``aborted`` event (``now`` is the monotonic clock).
        """
        record = self.record
        if self.lease is not None:
            self.lease.finish("client_disconnected")
            self.lease = None
        if self.disconnected:
            self.status = 499
            if self.in_flight is not None:
                candidate, since = self.in_flight
                record.events.append(
                    AttemptEvent(
                        record.request_id,
                        len(record.events),
                        candidate,
                        "aborted",
                        "client_disconnected",
                        None,
                        now - since,
                        principal=record.principal,
                    )
                )
        self.in_flight = None
        record.status = self.status
        record.winner = self.winner
        record.bytes_relayed = self.bytes_relayed
        record.degraded = self.degraded
        record.latency = latency
        spend = self.spend
        if spend is not None:
            if spend.tokens is not None:
                record.prompt_tokens, record.completion_tokens = spend.tokens.prompt, spend.tokens.completion
                record.tokens_measured = spend.tokens.measured
            record.cost_usd = spend.cost_usd
        return record
