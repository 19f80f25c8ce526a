"""Errors as Anthropic writes them: the router's own for Anthropic clients, and Anthropic's read back.

Shape of an error body (the Messages API's, plus the router's ``attempts``)::

    {"type": "error", "error": {"type": ..., "message": ..., "attempts": [...]}}

``error.type`` follows the status, as Anthropic's API does and as the ``anthropic`` SDK expects:
400 ``invalid_request_error``, 401 ``authentication_error``, 403 ``permission_error``, 404
``not_found_error``, 413 ``request_too_large``, 429 ``rate_limit_error``, 529
``overloaded_error``, any other 5xx ``api_error`` (other 4xx: ``invalid_request_error``). A
stream that breaks after commit ends with one SSE event ``event: error`` carrying the same
object: the SDK raises on it instead of returning the text so far as if it were whole.

The other way round, an Anthropic provider's refusal (a 400 the next model would refuse too)
reaches an OpenAI client in OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}``,
with Anthropic's message and type, so the ``openai`` SDK raises ``BadRequestError`` with the
provider's words.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

from asgi_router.core.classify import PROVIDER_WORDS_CAP, provider_words
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import AttemptSummary

__all__ = [
    "ANTHROPIC_ERROR_TYPES",
    "anthropic_error_body",
    "anthropic_error_type",
    "anthropic_stream_error_event",
    "error_event_words",
    "openai_error_from_anthropic",
    "status_of_error_type",
]

#: Anthropic's ``error.type`` for each status it names (other 5xx: ``api_error``).
ANTHROPIC_ERROR_TYPES: Final[dict[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_STATUS_OF_TYPE: Final[dict[str, int]] = {kind: status for status, kind in ANTHROPIC_ERROR_TYPES.items()}
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"))


def anthropic_error_type(status: int) -> str:
    """``error.type`` for a status the router answers with."""
    kind = ANTHROPIC_ERROR_TYPES.get(status)
    if kind is not None:
        return kind
    return "api_error" if status >= 500 else "invalid_request_error"


def status_of_error_type(kind: object) -> int:
    """The status an Anthropic ``error.type`` stands for (an unknown type: 500, the server's)."""
    return _STATUS_OF_TYPE.get(kind, 500) if isinstance(kind, str) else 500


def anthropic_error_body(status: int, message: str, attempts: Sequence[AttemptSummary] | None = None) -> bytes:
    """One Anthropic-shaped error object for the router's own error."""
    error: dict[str, object] = {"type": anthropic_error_type(status), "message": message}
    if attempts is not None:
        error["attempts"] = [attempt.as_json() for attempt in attempts]
    return _COMPACT.encode({"type": "error", "error": error}).encode()


def anthropic_stream_error_event(candidate: str, reason: Reason, detail: str) -> bytes:
    """The one in-band SSE event written when a committed Anthropic stream breaks."""
    error = {
        "type": "error",
        "error": {
            "type": "overloaded_error" if reason == "upstream_5xx" else "api_error",
            "message": f"{candidate}: {reason}: {detail}; the response is incomplete",
        },
    }
    return b"event: error\ndata: " + _COMPACT.encode(error).encode() + b"\n\n"


def error_event_words(event: Any) -> tuple[str, str]:
    """``(type, message)`` of an Anthropic ``error`` event or body (``api_error`` when unreadable);
    the message is one printable line, and both are bounded to ``PROVIDER_WORDS_CAP`` characters."""
    error = event.get("error") if isinstance(event, dict) else None
    if not isinstance(error, dict):
        return "api_error", "the upstream sent an error"
    kind, message = error.get("type"), error.get("message")
    words = provider_words(message) if isinstance(message, str) else None
    # The type is repeated to the client too: bounded like the message (an identifier cut short
    # is still one).
    return (
        kind[:PROVIDER_WORDS_CAP] if isinstance(kind, str) and kind.isidentifier() else "api_error"
    ), words or "the upstream sent an error"


def openai_error_from_anthropic(body: bytes) -> bytes:
    """An Anthropic error body in OpenAI's shape (its type and message kept); a body that is not
    Anthropic's error object keeps its first words as the message."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        payload = None
    if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
        kind, message = error_event_words(payload)
    else:
        kind = "invalid_request_error"
        message = provider_words(body.decode("utf-8", "replace")) or "the upstream refused the request"
    return _COMPACT.encode({"error": {"message": message, "type": kind, "param": None, "code": None}}).encode()
