"""OpenAI-shaped error bodies, so that every SDK surfaces the router's errors as it would OpenAI's.

Shape (``docs/errors-and-headers.md``)::

    {"error": {"message": ..., "type": ..., "code": ..., "param": null, "attempts": [...]}}

``attempts`` is present when upstreams were involved: one object per candidate tried, in the
order tried, and ``message`` then has exactly one line per candidate
(``provider/model-id: reason (status)``, or ``(detail)`` where the router knows more than a
status: ``provider_not_configured (OPENAI_API_KEY is not set)``); a context overflow's message
has the provider's own words as its first line. Nothing here ever sees an API key: messages are
built from candidates, reasons, statuses, configuration names and what an upstream said in its
error message.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from asgi_router.core.reasons import Reason

__all__ = [
    "AttemptSummary",
    "ERROR_TYPES",
    "OVERFLOW_SENTENCE",
    "RouterError",
    "SKIP_REASONS",
    "error_body",
    "exhausted_error",
    "stream_error_event",
]

#: OpenAI's ``error.type`` for each status the router itself produces.
ERROR_TYPES: Final[dict[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    408: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "server_error",
    504: "timeout_error",
}


#: Reasons for a candidate that was never contacted: they explain, but do not decide the status.
SKIP_REASONS: Final[frozenset[Reason]] = frozenset(
    {"provider_not_configured", "circuit_open", "recovering", "saturated", "budget_exhausted"}
)


@dataclass(frozen=True, slots=True)
class AttemptSummary:
    """What one candidate did, as the client sees it in ``error.attempts``."""

    candidate: str
    reason: Reason
    status: int | None = None
    retry_after: float | None = None
    #: Never contacted (no key, context too small, over budget): does not decide the status.
    skipped: bool = False
    #: What the operator can fix, when the router knows (e.g. ``OPENAI_API_KEY is not set``).
    detail: str | None = None
    #: The provider's own error message (one printable line), kept for a context-window 400.
    words: str | None = None

    def line(self) -> str:
        said = self.detail or self.status
        return f"{self.candidate}: {self.reason}" + (f" ({said})" if said else "")

    def as_json(self) -> dict[str, object]:
        summary: dict[str, object] = {"candidate": self.candidate, "reason": self.reason, "status": self.status}
        if self.detail is not None:
            summary["detail"] = self.detail
        return summary


@dataclass(frozen=True, slots=True)
class RouterError:
    """An error response the router produces itself (not an upstream's pass-through)."""

    status: int
    code: str
    message: str
    attempts: tuple[AttemptSummary, ...] | None = None
    retry_after: float | None = None
    #: Extra response headers (e.g. ``WWW-Authenticate`` on a 401).
    headers: tuple[tuple[bytes, bytes], ...] = ()
    #: The guardrail that refused the request (``guardrail_blocked``, ``guardrail_error``): its
    #: name is in the error object, so a client can tell which check to look at.
    guardrail: str | None = None

    def body(self) -> bytes:
        return error_body(self.status, self.code, self.message, self.attempts, self.guardrail)


def error_body(
    status: int,
    code: str,
    message: str,
    attempts: Sequence[AttemptSummary] | None = None,
    guardrail: str | None = None,
) -> bytes:
    """Serialise one OpenAI-shaped error object."""
    error: dict[str, object] = {
        "message": message,
        "type": ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error"),
        "code": code,
        "param": None,
    }
    if attempts is not None:
        error["attempts"] = [attempt.as_json() for attempt in attempts]
    if guardrail is not None:
        error["guardrail"] = guardrail
    return json.dumps({"error": error}, separators=(",", ":")).encode()


def exhausted_error(attempts: Sequence[AttemptSummary]) -> RouterError:
    """The error for a plan whose every candidate failed (``docs/errors-and-headers.md``).

    All rate-limited (upstream 429 or the router's own rpm/tpm budgets): 429 with the smallest
    Retry-After seen. All timed out: 504. The request fits no candidate's context window: 400
    ``context_length_exceeded`` (no model would take it), whose ``message`` starts with the last
    provider's own words (clients such as litellm tell an overflow by them), then the lines.
    No candidate can be sent the request in its protocol (``protocol_mismatch``): 400
    ``protocol_mismatch``, each line saying why. Else 502. Skipped candidates (never contacted)
    do not decide the status unless nothing was
    contacted; then a plan whose every candidate was at its concurrency cap is a 503 (local
    overload).
    """
    contacted = [a for a in attempts if not a.skipped and a.reason not in SKIP_REASONS] or list(attempts)
    reasons = {a.reason for a in contacted}
    message = "\n".join(a.line() for a in attempts) or "the plan had no candidates"
    if reasons == {"saturated"}:
        return RouterError(503, "upstream_saturated", message, tuple(attempts))
    if reasons and reasons <= {"rate_limited", "over_budget"}:
        waits = [a.retry_after for a in attempts if a.retry_after is not None]
        return RouterError(429, "rate_limit_exceeded", message, tuple(attempts), min(waits) if waits else None)
    if reasons == {"timeout"}:
        return RouterError(504, "upstream_timeout", message, tuple(attempts))
    if reasons == {"context_window"}:
        return RouterError(400, "context_length_exceeded", _overflow_head(attempts) + "\n" + message, tuple(attempts))
    if reasons == {"protocol_mismatch"}:
        return RouterError(400, "protocol_mismatch", message, tuple(attempts))
    return RouterError(502, "upstream_unavailable", message, tuple(attempts))


#: An overflow's first line when no provider said it in its own words (every candidate was
#: skipped by the catalog's window, or the 400 had no message). Clients tell an overflow from
#: other 400s by substrings of its message: "this model's maximum context length is" is the one
#: OpenAI writes and the one litellm's mapping of OpenAI-compatible errors looks for.
OVERFLOW_SENTENCE: Final = (
    "This model's maximum context length is exceeded by this request: no candidate's context window"
    " can hold its prompt and max_tokens."
)


def _overflow_head(attempts: Sequence[AttemptSummary]) -> str:
    """The last provider's own words about the overflow, else :data:`OVERFLOW_SENTENCE`."""
    for attempt in reversed(attempts):
        if attempt.words is not None:
            return attempt.words
    return OVERFLOW_SENTENCE


def stream_error_event(candidate: str, reason: Reason, detail: str) -> bytes:
    """The one in-band SSE event written when a committed stream breaks.

    ``data: {"error": ...}`` is what the ``openai`` SDK turns into ``APIError``; the router
    then ends the response without ``data: [DONE]`` so no client mistakes it for a whole answer.
    """
    payload = {
        "error": {
            "message": f"{candidate}: {reason}: {detail}; the response is incomplete",
            "type": "upstream_error",
            "code": reason,
            "param": None,
        }
    }
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
