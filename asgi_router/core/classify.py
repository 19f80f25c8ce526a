"""What came back from an attempt *means*: the classification tables, and every fixed reason set.

The classification is a pure function over what came back from one attempt: an HTTP status, or
the exception that ended the attempt before a usable response. Its answer is a :data:`Reason`
from a bounded vocabulary. What is done about that reason (retried in place, failed over,
passed through, counted by a breaker) is decided in one place, ``asgi_router.attempts.decisions``,
with the per-group ``failover_on`` (default :data:`DEFAULT_FAILOVER`) and the sets below. The
tables are the single source of truth for what the errors-and-headers page of the docs
promises:

================================  ===================  ==============================
what came back                    reason               default action
================================  ===================  ==============================
connect refused / DNS / TLS /     ``connect_error``    next candidate
connection dropped before a
usable response
connect, first-byte or idle       ``timeout``          next candidate
timeout; upstream 408
429                               ``rate_limited``     next candidate
5xx; a response the router        ``upstream_5xx``     next candidate
cannot use (1xx/3xx status,
body over the response cap)
401 / 403                         ``auth_error``       next candidate
402                               ``billing``          next candidate
404                               ``model_not_found``  next candidate
400 whose error says the context  ``context_window``   next candidate (the only 400 that
window was exceeded                                    fails over: windows are per model)
other 4xx                         ``client_error``     stop: relay status and body
2xx                               ``served``           commit
2xx that ends with no body        ``stream_interrupted``  next candidate
2xx whose answer an output        ``guardrail_failed``    next candidate (never retried
guardrail with ``fail_over``                              in place, counted by no breaker)
refused
================================  ===================  ==============================

Skips are not failures: a candidate is skipped before it is called when its provider has no key
(``provider_not_configured``), does not speak the route's protocol or cannot be sent this request
in its own (``protocol_mismatch``: an OpenAI provider on Anthropic's Messages route, a
chat-completion field the Messages API has no equivalent for), its catalog context window
cannot hold the request (``context_window``) or its rpm/tpm budget is spent (``over_budget``). ``hedge_lost`` marks the
slower of two raced candidates, cancelled when the other committed.

An exception this module does not recognise is *not* retried (Bifrost's rule): an unknown
failure is more likely a bug here than a flaky upstream, and retrying it would only hide it.
It is the router's own failure (``router_error``: its own client broke, say, "Event loop is
closed"), so it counts against no upstream: neither breaker nor routing statistics see it.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Final

from asgi_router.core.reasons import Reason
from asgi_router.core.upstream_errors import UpstreamBroken, UpstreamConnectError, UpstreamTimeout

__all__ = [
    "BREAKER_SUCCESSES",
    "DEFAULT_FAILOVER",
    "HINTED",
    "NOT_PENALISED",
    "PROVIDER_WORDS_CAP",
    "ROUTERS_OWN",
    "UNREACHABLE",
    "UnrecognisedFailure",
    "classify_exception",
    "classify_status",
    "parse_retry_after",
    "provider_words",
    "refine_client_error",
    "refine_rate_limited",
]


#: Reasons that move on to the next candidate unless a group's ``failover_on`` says otherwise.
#: ``client_error`` is absent on purpose: the next model would hit the same wall.
DEFAULT_FAILOVER: Final[frozenset[Reason]] = frozenset(
    {
        "connect_error",
        "timeout",
        "rate_limited",
        "upstream_5xx",
        "auth_error",
        "billing",
        "model_not_found",
        "stream_interrupted",
        "context_window",
        "guardrail_failed",
    }
)

# The other reason sets: what a reason means to a breaker, a retry hint and the latency
# statistics. Each is defined here once; ``asgi_router.attempts.decisions`` (the one decision
# point, whose docstring draws the whole policy as a table) and the gate read them.

#: The router's own failure (``router_error``): never retried, and counted against no upstream,
#: whatever ``breaker.failure_reasons`` lists.
ROUTERS_OWN: Final[frozenset[Reason]] = frozenset({"router_error"})

#: What a candidate breaker counts as a success: the upstream answered properly (a
#: ``client_error`` is the request's fault, not the upstream's).
BREAKER_SUCCESSES: Final[frozenset[Reason]] = frozenset({"served", "client_error"})

#: What a provider breaker counts as a failure when no response came at all: the host is not
#: reachable (any response, even a 5xx, is a success for it).
UNREACHABLE: Final[frozenset[Reason]] = frozenset({"connect_error", "timeout"})

#: Failures whose answer may say how long to wait (a ``Retry-After`` on a 503 is standard too).
HINTED: Final[frozenset[Reason]] = frozenset({"rate_limited", "upstream_5xx"})

#: Failures that say nothing about a member's speed (the request's fault, the router's own, a
#: client that left): its latency statistics are not penalised for them.
NOT_PENALISED: Final[frozenset[Reason]] = frozenset(
    {"client_error", "context_window", "client_disconnected", "router_error", "guardrail_failed"}
)

# Statuses whose meaning is specific; everything else falls to its class (2xx/4xx/5xx).
_STATUS_TABLE: Final[dict[int, Reason]] = {
    401: "auth_error",  # this provider's key is wrong; keys are per provider
    403: "auth_error",
    402: "billing",  # this provider's account is out of credit
    404: "model_not_found",  # model ids are per provider
    408: "timeout",  # the upstream gave up waiting: not the request's fault
    429: "rate_limited",
}

# What a transport raises (asgi_router.core.upstream_errors: each transport translates its HTTP
# library's exceptions into these), and the deadlines' own ``TimeoutError``.
_EXCEPTION_TABLE: Final[tuple[tuple[type[BaseException], Reason], ...]] = (
    (TimeoutError, "timeout"),  # first-byte, idle, total
    (UpstreamTimeout, "timeout"),  # connect and pool waits
    (UpstreamConnectError, "connect_error"),  # refused, DNS, TLS, reset before a response
    (UpstreamBroken, "connect_error"),  # cut mid-body, bad framing, unparsable status or headers
)


# A 400 whose body says the prompt did not fit this model's window. The error ``code`` is the
# reliable signal (OpenAI, Groq, vLLM, OpenRouter); the message patterns cover servers that only
# say it in words. Other 400s say the request itself is wrong and must not fail over.
_CONTEXT_CODES: Final = frozenset({"context_length_exceeded", "context_window_exceeded"})
_CONTEXT_MESSAGE: Final = re.compile(
    r"maximum context length|context length (?:is )?exceeded|context window|prompt is too long", re.IGNORECASE
)
# Only the start of an error body is looked at: error bodies are small, a huge one is not this.
_CONTEXT_BODY_CAP: Final = 16 * 1024
#: Longest provider message repeated in the router's own (OpenAI's overflow message is ~200).
PROVIDER_WORDS_CAP: Final = 500


# RFC 9110 delay-seconds (we also accept a fraction, as some providers send "0.5").
_DELTA_SECONDS: Final = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,6})?")


class UnrecognisedFailure(Exception):
    """An attempt ended with an exception that the tables do not know: never retried."""


def classify_status(status: int) -> Reason:
    """Classify an upstream HTTP status (the table above; ``docs/errors-and-headers.md``)."""
    reason = _STATUS_TABLE.get(status)
    if reason is not None:
        return reason
    if 200 <= status < 300:
        return "served"
    if 400 <= status < 500:
        return "client_error"
    # 5xx, and 1xx/3xx that a chat endpoint has no business sending (a base_url that
    # redirects is a provider misconfiguration the next candidate may not share).
    return "upstream_5xx"


def refine_client_error(status: int, body: bytes) -> tuple[Reason, str | None]:
    """Re-read a ``client_error`` with its body: a context-window 400 is ``context_window``.

    With ``context_window`` comes the provider's own ``error.message`` (made one printable,
    bounded line by :func:`provider_words`; ``None`` if it sent none): clients tell an overflow
    from other 400s by those words, so the router's answer starts with them when no candidate
    could take the prompt.
    """
    if status != 400 or len(body) > _CONTEXT_BODY_CAP:
        return "client_error", None
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return "client_error", None
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        return "client_error", None
    code, message = error.get("code"), error.get("message")
    if not isinstance(message, str):
        message = None
    if (isinstance(code, str) and code in _CONTEXT_CODES) or (message is not None and _CONTEXT_MESSAGE.search(message)):
        return "context_window", provider_words(message) if message is not None else None
    return "client_error", None


def provider_words(text: str) -> str | None:
    """An upstream's error message made safe to repeat in the router's own: one line (control
    and other unprintable characters become spaces, runs of them one), at most
    :data:`PROVIDER_WORDS_CAP` characters; ``None`` when nothing is left."""
    line = " ".join("".join(char if char.isprintable() else " " for char in text[: PROVIDER_WORDS_CAP * 2]).split())
    if len(line) > PROVIDER_WORDS_CAP:
        line = line[: PROVIDER_WORDS_CAP - 3].rstrip() + "..."
    return line or None


def refine_rate_limited(body: bytes | None) -> Reason:
    """Re-read a 429 with its body: OpenAI's ``insufficient_quota`` is ``billing``, not a rate limit.

    The account is out of credit: waiting and retrying the same provider cannot help, while the
    next provider (another account) can.
    """
    if not body or len(body) > _CONTEXT_BODY_CAP or b"insufficient_quota" not in body:
        return "rate_limited"
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return "rate_limited"
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and (
        error.get("code") == "insufficient_quota" or error.get("type") == "insufficient_quota"
    ):
        return "billing"
    return "rate_limited"


def classify_exception(exc: BaseException) -> Reason:
    """Classify an exception that ended an attempt; raise :class:`UnrecognisedFailure` if unknown."""
    for kind, reason in _EXCEPTION_TABLE:
        if isinstance(exc, kind):
            return reason
    raise UnrecognisedFailure(type(exc).__name__) from exc


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delta-seconds or HTTP-date), else ``None``."""
    if not value:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        seconds = float(value)
    else:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return max(0.0, seconds)
