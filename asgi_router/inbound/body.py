"""Read and check the client's request before any upstream is chosen.

The body is read with a hard cap (a declared ``Content-Length`` over the cap is refused before
a byte is read; a chunked body is refused as soon as it crosses the cap) and a deadline (a body
still arriving after ``body_timeout`` seconds is a 408: a client trickling bytes must not hold a
request open for ever). It is parsed once, with bounds (:mod:`.safejson`); that parse also
locates the ``model`` value's bytes, into which the attempt loop splices each candidate's id
(:mod:`asgi_router.attempts.wire_body`). It must be a JSON object with a string ``model`` and none of the fields that
would redirect traffic or swap credentials (:mod:`.screen`). Every refusal is a
:class:`RouterError` with the right status; nothing here raises on bad input.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Final

from starlette.types import Receive, Scope

from asgi_router.core.deadlines import reading
from asgi_router.core.header_names import is_sane_request_id
from asgi_router.core.router_errors import RouterError
from asgi_router.inbound.safejson import JsonRefused, Span, loads_with_span
from asgi_router.inbound.screen import forbidden_field

__all__ = ["ClientGone", "InboundRequest", "fresh_request_id", "parse_request", "read_body", "request_id_for"]


#: What a released request reads as (shared: never written to).
_RELEASED: Final[dict[str, Any]] = {}


class ClientGone(Exception):
    """The client disconnected before its request body was complete: there is no one to answer."""


@dataclass(slots=True)
class InboundRequest:
    """A parsed chat request: the JSON object, its stream flag, and the body it came from."""

    payload: dict[str, Any]
    stream: bool
    #: The body as received, and the byte span of its ``model`` value when it can be spliced.
    body: bytes = b""
    model_span: Span | None = None

    def release(self) -> None:
        """Drop the parsed payload and the body bytes once a response is committed: a long
        stream should not hold its (possibly 100 KB) prompt twice for its whole life."""
        self.payload = _RELEASED
        self.body = b""
        self.model_span = None


def request_id_for(scope: Scope) -> str:
    """The client's ``x-request-id`` when it is a sane token, else a fresh one.

    A client-chosen id is echoed into response headers and logs, so it must not carry CR/LF
    or other bytes that could split a header or forge a log line.
    """
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            if is_sane_request_id(value):
                chosen: str = value.decode("ascii")
                return chosen
            break
    return os.urandom(16).hex()


def fresh_request_id() -> str:
    """32 hex digits from the OS's CSPRNG: as unguessable as ``uuid4().hex`` (``os.urandom`` is
    what ``secrets.token_hex`` reads, without its layers of calls)."""
    return os.urandom(16).hex()


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _too_large(limit: int) -> RouterError:
    return RouterError(413, "request_too_large", f"request body is larger than {limit} bytes")


async def read_body(scope: Scope, receive: Receive, limit: int, time_limit: float = math.inf) -> bytes | RouterError:
    """The whole request body; a 413 once it is known to exceed ``limit`` bytes, a 408 when it
    has not all arrived within ``time_limit`` seconds. Neither reads the rest of the body.

    The read is one :func:`~asgi_router.core.deadlines.reading` block: in a request, timed by
    the request's own scope (the middleware's listening scope), with no timer of its own. Only
    the limit's own cut is a 408: the server cancelling the request still propagates. A client
    that leaves mid-body is :class:`ClientGone`: there is no one to answer.
    """
    declared = _declared_length(scope)
    if declared is not None and declared > limit:
        return _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    with reading(time_limit):
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk: bytes = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    return _too_large(limit)
                chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    return _timed_out(time_limit)  # only reached when the limit cut the read short


def _timed_out(time_limit: float) -> RouterError:
    return RouterError(408, "request_timeout", f"request body did not arrive within {time_limit:g} seconds")


def parse_request(body: bytes) -> InboundRequest | RouterError:
    """Parse the body as a chat request: a JSON object with a string ``model``.

    The request's one JSON parse; it also finds where the ``model`` value sits in the bytes.
    """
    parsed = loads_with_span(body, "model")
    if isinstance(parsed, JsonRefused):
        return RouterError(400, "invalid_json", parsed.message)
    payload, model_span = parsed
    if not isinstance(payload, dict):
        return RouterError(400, "invalid_request", "request body must be a JSON object")
    refused = forbidden_field(payload)
    if refused is not None:
        return refused
    if "model" not in payload:
        return RouterError(400, "missing_model", "request body has no 'model' field")
    if not isinstance(payload["model"], str):
        return RouterError(400, "invalid_model_reference", "'model' must be a string")
    return InboundRequest(payload, payload.get("stream") is True, body, model_span)
