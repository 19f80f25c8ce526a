"""The router's own errors, sent to the client while nothing else has been sent.

A refusal (auth, caps, a malformed request), an exhausted plan or an unexpected failure inside
the router is answered with one whole response, shaped for the path's protocol (OpenAI's error
object, or Anthropic's on a Messages path) and carrying the router's headers. Once a response
has started no error response can be sent: only an in-band stream error (the relay's).
"""

from __future__ import annotations

from dataclasses import replace

from asgi_router.core.router_errors import RouterError
from asgi_router.observability.events import logger
from asgi_router.protocols.anthropic_errors import anthropic_error_body
from asgi_router.request.request_state import RequestState
from asgi_router.request.router_headers import add_router_headers
from asgi_router.responses.relay import send_whole

__all__ = ["send_error", "send_failure"]


async def send_error(state: RequestState, error: RouterError, attempts: int = 0) -> None:
    """Answer ``error`` after ``attempts`` candidates were tried; a request a caller cap
    downgraded says so in the message (the group it was sent to may be why it failed)."""
    if state.caller_outcome == "downgraded":
        downgraded = (
            f"the {state.limit} cap of {state.caller} is past its limit: the request was served from "
            f"{state.downgrade_to} instead"
        )
        error = replace(error, message=f"{error.message}\n{downgraded}")
    headers = add_router_headers([(b"content-type", b"application/json")], state, None, attempts)
    headers += error.headers
    if error.retry_after is not None:
        headers.append((b"retry-after", str(max(1, round(error.retry_after + 0.4999))).encode()))
    state.status = error.status
    if state.anthropic:  # Anthropic's shape has no code: a guardrail's refusal starts its message with it
        message = f"{error.code}: {error.message}" if error.guardrail is not None else error.message
        body = anthropic_error_body(error.status, message, error.attempts)
    else:
        body = error.body()
    await send_whole(state.send_tracked, error.status, headers, body)


async def send_failure(state: RequestState) -> None:
    """An unexpected error inside the router (a host's ``authorize`` that raised, a bug): the
    traceback goes to the router's logger, which scrubs keys from it, and the client gets an
    OpenAI-shaped 500 if nothing was sent yet, never the server's plain-text one."""
    logger.exception("request %s failed inside the router", state.request_id)
    if not state.response_started:
        await send_error(state, RouterError(500, "router_error", "the router failed; see the server log"))
