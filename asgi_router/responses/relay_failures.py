"""How a committed stream that broke is named: the reason recorded and the words the client reads.

Both ways of relaying a stream (``relay.py``: byte-exact, or whole events for a plan that may
continue it) end a break they cannot repair with one in-band error event; what that event says
comes from here, so the client reads the same words for the same break whichever relay ran.
"""

from __future__ import annotations

from typing import Final

from asgi_router.core.classify import UnrecognisedFailure, classify_exception
from asgi_router.core.reasons import Reason
from asgi_router.observability.events import logger

__all__ = ["EVENT_TOO_LONG", "FAILURE_TEXTS", "UpstreamSaid", "failure_text", "late_reason"]

#: What the in-band error says, by how the stream broke (an upstream that said why in its own
#: words, :class:`UpstreamSaid`, is quoted instead).
FAILURE_TEXTS: Final[dict[str, str]] = {
    "router_error": "the router failed; see the server log",
    "stream_interrupted": "upstream connection broke",
    "idle": "no data within the idle timeout",
    "total": "the attempt's total timeout ran out",
}


#: The words for a stream whose unfinished event outgrew ``max_event_bytes``.
EVENT_TOO_LONG: Final = "the upstream sent an event larger than max_event_bytes"


class UpstreamSaid(Exception):
    """A stream that broke in its own words: a translated stream's ``error`` event, or an end
    before its last event; recorded as ``reason`` (a break, unless the upstream sent what no
    client can read: an event past ``max_event_bytes`` is ``upstream_5xx``)."""

    def __init__(self, kind: str, message: str, reason: Reason = "stream_interrupted") -> None:
        super().__init__(f"the upstream sent {kind}: {message}" if kind else message)
        self.reason: Reason = reason


def late_reason(exc: Exception, candidate: str) -> Reason:
    """The reason a stream that raised ``exc`` after commit is recorded with: a timeout, a break,
    or the router's own failure (logged: it is not held against ``candidate``)."""
    if isinstance(exc, UpstreamSaid):
        return exc.reason
    try:
        reason = classify_exception(exc)
    except UnrecognisedFailure:
        logger.exception("the router failed relaying %s", candidate)
        return "router_error"
    return "timeout" if reason == "timeout" else "stream_interrupted"


def failure_text(failure: Exception | None, reason: Reason, past_total: bool) -> str:
    """The in-band error's words for a break of ``reason`` (``failure``: what was raised, ``None``
    for a read that overran; ``past_total``: the attempt's ``total`` had run out)."""
    if isinstance(failure, UpstreamSaid):
        return str(failure)
    if reason == "timeout":
        return FAILURE_TEXTS["total" if past_total else "idle"]
    return FAILURE_TEXTS.get(reason, FAILURE_TEXTS["stream_interrupted"])
