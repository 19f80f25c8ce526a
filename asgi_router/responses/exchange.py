"""One chat request's answer as it goes out: what was sent, and whether the client is still there.

An :class:`Exchange` is made per request by the middleware and dropped with it: per-request
state lives here, never on the middleware. It sends the router's own errors (shaped for the
route's protocol: OpenAI's, or Anthropic's on a Messages route; with the router's headers),
remembers whether a response has started (after that, no error response can be sent: only an
in-band stream error), and is the party the disconnect listener tells when the client leaves
(:class:`~asgi_router.inbound.disconnect.ListeningScope`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import Message, Receive, Scope, Send

from asgi_router.core.deadlines import Deadline
from asgi_router.core.router_errors import RouterError
from asgi_router.observability.events import RequestRecord, logger
from asgi_router.protocols.anthropic_errors import anthropic_error_body
from asgi_router.resilience.gate import Lease
from asgi_router.responses.headers import router_headers
from asgi_router.responses.relay import send_whole

if TYPE_CHECKING:  # opentelemetry is optional: only a traced request holds one
    from asgi_router.observability.tracing import RequestTrace

__all__ = ["Exchange"]


class Exchange:
    """One chat request's state: what was sent, whether the client is still there."""

    __slots__ = (
        "anthropic",
        "disconnected",
        "finished",
        "lease",
        "path",
        "receive",
        "record",
        "response_started",
        "route",
        "scope",
        "send",
        "trace",
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
        self.record = RequestRecord(request_id, "-")
        self.response_started = False
        self.finished = False
        self.disconnected = False
        #: The committed stream's lease, finished when the relay ends (or the request does).
        self.lease: Lease | None = None
        #: ``x-router-route`` once a plan was resolved.
        self.route: str | None = None
        #: The request's trace, when a tracer provider is set.
        self.trace: RequestTrace | None = None

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
        if error.retry_after is not None:
            headers.append((b"retry-after", str(max(1, round(error.retry_after + 0.4999))).encode()))
        self.record.status = error.status
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
        """The client disconnected: cancel ``scope`` unless the response is already complete."""
        if not self.finished:
            self.disconnected = True
            scope.cancel()
