"""OpenAI's Responses API event stream: its commit point, its failures, its end and its in-band error.

A Responses stream opens with events that say nothing a client shows (``response.created``,
``response.in_progress``, ``response.queued``, SSE comments): they are held, as a chat stream's
role-only delta is, so a stream whose first *real* event is a failure can still fail over. What
commits is anything else: an output item added, any ``*.delta``, ``response.completed`` or
``response.incomplete``. A first real event that is ``response.failed`` or ``error`` names why,
and the attempt fails over as that would (``rate_limit_exceeded``: a 429; ``invalid_prompt``: the
client's own 400, passed through; anything else a server error). A whole (non-streamed) answer
whose ``status`` is ``failed`` is read the same way.

The stream is whole once its last event went out (``response.completed``, ``response.failed`` or
``response.incomplete``): :class:`ResponsesEnd` watches the chunks the relay sends for it (only on
this route), since that event carries the whole response and may span many chunks. A stream that
ends before it is a break, answered in the stream's own words (:func:`responses_stream_error`): an
``error`` event, then ``response.failed`` with the same code, so the ``openai`` SDK raises.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from asgi_router.protocols.first_event import EMPTY, REAL, FirstEvent, json_event

__all__ = [
    "ResponsesEnd",
    "ResponsesFirstEvent",
    "failed_body",
    "response_id_in",
    "responses_refusal",
    "responses_stream_error",
    "status_of_code",
]

#: Events that say nothing a client shows yet.
_HELD: Final = frozenset({"response.created", "response.in_progress", "response.queued"})
#: The status each failure code of a Responses stream stands for (anything else: a server error).
_CODES: Final[dict[str, int]] = {
    "rate_limit_exceeded": 429,
    "insufficient_quota": 429,
    "server_error": 500,
    "invalid_prompt": 400,
}
#: A stream's last event, by its type (in its ``event:`` line or its data's ``type``).
_LAST: Final = re.compile(rb'(?:\nevent: ?|"type"\s*:\s*")response\.(?:completed|failed|incomplete)\b')
#: The names of the last events alone: a pattern that opens with a literal, which the regular
#: expression engine finds by a fast scan; only where one is found is :data:`_LAST` asked.
_LAST_NAME: Final = re.compile(rb"response\.(?:completed|failed|incomplete)\b")
#: How many bytes before a last event's name :data:`_LAST` may need (``"type" : "``, a line end
#: and ``event: ``).
_BEFORE_NAME: Final = 32
#: A held event as the API writes it: its compact ``type``, then its response's ``id`` (group 1;
#: one written otherwise is parsed).
_HELD_COMPACT: Final = re.compile(
    rb'\{"type":"response\.(?:created|in_progress|queued)","response":\{"id":"(resp_[A-Za-z0-9_-]{1,200})"'
)
#: Any event's compact ``type`` (group 1), where its data opens with it.
_TYPE_COMPACT: Final = re.compile(rb'\{"type":"([a-z0-9_.]{1,100})"')
#: A chunk that is one whole event with one ``data`` line (group 1: its data), read without
#: an event splitter (docs/performance.md).
_WHOLE_EVENT: Final = re.compile(rb"(?:event: ?[^\r\n]*\n)?data: ?([^\r\n]*)\n\n")
#: The types read by a parse: a held event written otherwise (for its response's ``id``), and a
#: failure (for its code and words).
_PARSED: Final = frozenset(
    {b"response.created", b"response.in_progress", b"response.queued", b"response.failed", b"error"}
)
#: How many bytes of a chunk are kept to find a last event's name cut across two chunks.
_CARRY: Final = 48
_FAILED: Final = re.compile(rb'"status"\s*:\s*"failed"')
_RESPONSE_ID: Final = re.compile(rb'"id"\s*:\s*"(resp_[A-Za-z0-9_-]{1,200})"')


def status_of_code(code: object) -> int:
    """The HTTP status a Responses failure's ``code`` stands for."""
    return _CODES.get(code, 500) if isinstance(code, str) else 500


def _failure(event: dict[str, Any]) -> tuple[str, str]:
    """``(code, message)`` of a ``response.failed`` or ``error`` event."""
    error: object = event
    if event.get("type") == "response.failed":
        response = event.get("response")
        error = response.get("error") if isinstance(response, dict) else None
    elif isinstance(event.get("error"), dict):
        error = event["error"]
    if not isinstance(error, dict):
        return "server_error", "the upstream's response failed"
    code, message = error.get("code"), error.get("message")
    return (
        code if isinstance(code, str) else "server_error",
        message if isinstance(message, str) else "the upstream's response failed",
    )


class ResponsesFirstEvent(FirstEvent):
    """Reads a Responses stream's leading events until one that a client shows (the same
    answers, and the same reading of chunks, as
    :class:`~asgi_router.protocols.first_event.FirstEvent`), keeping the response's id and, for a
    failure, its code and words."""

    __slots__ = ("failure", "response_id")

    def __init__(self) -> None:
        super().__init__(anthropic=False)
        #: The id ``response.created`` gave the response (``None``: not seen).
        self.response_id: str | None = None
        #: ``(code, message)`` of a first real event that is a failure.
        self.failure: tuple[str, str] | None = None

    def _whole(self, chunk: bytes) -> bytes | None:
        # A Responses event names itself in an ``event:`` line before its one ``data`` line.
        whole = _WHOLE_EVENT.fullmatch(chunk)
        return None if whole is None else whole[1]

    def _event(self, data: bytes) -> int | None:
        if data == b"[DONE]":
            return EMPTY
        # The usual event opens with its compact ``type`` (and a held one's ``response`` with its
        # ``id``): read off its bytes, not parsed (docs/performance.md). Anything else is parsed.
        held = _HELD_COMPACT.match(data)
        if held is not None:
            self.response_id = held[1].decode()
            return None
        kind = _TYPE_COMPACT.match(data)
        if kind is not None and kind[1] not in _PARSED:
            return REAL
        event = json_event(data)
        if event is None:
            return REAL
        kind = event.get("type")
        if kind in _HELD:
            response = event.get("response")
            if isinstance(response, dict) and isinstance(response.get("id"), str):
                self.response_id = response["id"]
            return None
        if kind == "response.failed" or kind == "error":
            self.failure = _failure(event)
            return status_of_code(self.failure[0])
        return REAL


class ResponsesEnd:
    """Whether a Responses stream's last event has gone out, fed every chunk the relay sends."""

    __slots__ = ("_carry", "said")

    def __init__(self) -> None:
        # What came before the stream's first byte: a line's end, so that an ``event:`` line is
        # told by the line end before it (a JSON string holds no raw line end).
        self._carry = b"\n"
        #: The last event went out: the client has the whole answer.
        self.said = False

    def feed(self, chunk: bytes) -> None:
        if not self.said:
            seen = self._carry + chunk
            found = _LAST_NAME.search(seen)
            while found is not None and not self.said:
                at = found.start()
                self.said = _LAST.search(seen, max(at - _BEFORE_NAME, 0), found.end()) is not None
                found = _LAST_NAME.search(seen, found.end())
            self._carry = seen[-_CARRY:]


def failed_body(body: bytes) -> tuple[str, str] | None:
    """``(code, message)`` of a whole Responses answer whose ``status`` is ``failed``, else ``None``
    (the body is parsed only when it may say so)."""
    if _FAILED.search(body) is None:
        return None
    try:
        response = json.loads(body)
    except ValueError:
        return None
    if not isinstance(response, dict) or response.get("status") != "failed":
        return None
    error = response.get("error")
    return _failure({"error": error}) if isinstance(error, dict) else ("server_error", "the response failed")


def response_id_in(body: bytes) -> str | None:
    """The first response id (``resp_...``) ``body`` states."""
    found = _RESPONSE_ID.search(body)
    return found[1].decode() if found is not None else None


def _dumps(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def responses_refusal(code: str, message: str) -> bytes:
    """A failure the client is to get as its own (``invalid_prompt``), in OpenAI's error shape."""
    return _dumps({"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}})


def responses_stream_error(response_id: str | None, candidate: str, reason: str, detail: str) -> bytes:
    """The in-band end of a committed Responses stream that broke: ``error``, then
    ``response.failed`` with the same code (``response_id``: the id the stream gave, if seen; the
    router does not parse the stream, so neither event has a ``sequence_number``)."""
    message = f"{candidate}: {reason}: {detail}; the response is incomplete"
    # ``error`` also says it as an ``error`` object: what the ``openai`` SDK raises ``APIError`` on.
    said = {"message": message, "type": "upstream_error", "code": reason, "param": None}
    error = {"type": "error", "code": reason, "message": message, "param": None, "error": said}
    failed = {
        "type": "response.failed",
        "response": {
            "id": response_id or "resp_unknown",
            "object": "response",
            "status": "failed",
            "error": {"code": reason, "message": message},
            "output": [],
        },
    }
    return b"event: error\ndata: " + _dumps(error) + b"\n\nevent: response.failed\ndata: " + _dumps(failed) + b"\n\n"
