"""Whether a stream has said something a client shows yet: the commit rule for relayed streams.

A stream commits on its first *real* event: one carrying content, a tool call, a refusal, a
finish (even with no content before it, as a ``length`` finish may come) or an error. A stream
that reaches its end (``data: [DONE]``, ``message_stop``) before any is an empty answer
(:data:`EMPTY`): it fails over as ``upstream_5xx``. What comes before (OpenAI's role-only
first delta, Anthropic's ``message_start`` and ``ping``, SSE comments sent as keep-alives) says
nothing yet: a stream that sends only that and
then breaks, stalls or reports an error can still fail over, because nothing has gone to the
client. :class:`FirstEvent` is fed the stream's chunks until it answers; the chunks read so far
are sent at commit, byte-exact. When the first real event is an error (``data: {"error": ...}``
on the chat route, ``event: error`` on the Messages route) it says which status the error
stands for, so the attempt fails over as that status would (Anthropic's ``overloaded_error`` as a
529, ``rate_limit_error`` as a 429; an OpenAI error by its numeric ``code``, else its type).
Only the stream's first events are parsed, once per stream; everything after commit is relayed
without a look.
"""

from __future__ import annotations

import json
from typing import Any, Final

from asgi_router.protocols.anthropic_errors import status_of_error_type
from asgi_router.protocols.sse import EventSplitter

__all__ = ["EMPTY", "REAL", "FirstEvent", "json_event", "shows_text"]

#: :meth:`FirstEvent.feed`'s answer once an event a client shows has arrived.
REAL: Final = 0
#: Its answer for a stream that ended (``[DONE]``, ``message_stop``) before saying anything a
#: client shows: an empty answer, failed over as a server error would be.
EMPTY: Final = 502
# The bytes that open a chat chunk's ``content`` string, and where its first character is.
_SAYS_TEXT: Final = b'"content":"'
_TEXT_AT: Final = len(_SAYS_TEXT)
_QUOTE: Final = ord('"')
# Anthropic events that say nothing a client shows (a ``message_delta`` without a
# ``stop_reason`` neither).
_PREAMBLE: Final = frozenset({"message_start", "ping", "content_block_stop"})
# OpenAI error types (and codes) that are not a server error.
_OPENAI_TYPES: Final[dict[str, int]] = {
    "rate_limit_exceeded": 429,
    "requests": 429,
    "tokens": 429,
    "insufficient_quota": 429,
    "invalid_api_key": 401,
    "authentication_error": 401,
    "permission_error": 403,
}


def shows_text(chunk: bytes) -> bool:
    """Whether ``chunk``, a chat stream's first, opens with an event whose ``content`` has text.

    Nearly every relayed stream's first real event is such a content delta, so this byte test
    (a parse would cost more than everything else the relay does per stream) answers for most
    streams without a :class:`FirstEvent`: the chunk starts with a ``data:`` line, the first
    ``"content":"`` is on that line and is not empty, and no ``"error"`` appears on that line (a
    quote inside a JSON string is escaped, so neither can match inside a value). That first
    event is then what :class:`FirstEvent` would commit on too: what follows it in the chunk is
    after the commit point. Anything else, ``False``, is read event by event by
    :class:`FirstEvent`. Each bytes method call is dear in CPython (its argument parsing): the
    test makes as few as it can.
    """
    at = chunk.find(_SAYS_TEXT)
    if at < 0:
        return False
    end = chunk.find(b"\n")
    if end < 0:  # one unfinished line: all of it is the first event's so far
        end = len(chunk)
    return (
        0 < at
        and chunk[:6] == b"data: "
        and at + _TEXT_AT < end  # its first character came, and it is not the closing quote
        and chunk[at + _TEXT_AT] != _QUOTE
        and chunk.find(b'"error"', 0, end) < 0
    )


def _text_at(data: bytes) -> int:
    """Where ``data``'s first ``"content":"`` opens a string that is not empty, when no
    ``"error"`` appears in ``data``; else -1. :class:`FirstEvent`'s byte test of one event's data,
    as :func:`shows_text`'s of a first chunk (a quote inside a JSON string is escaped, so neither
    pattern can match inside a value)."""
    at = data.find(_SAYS_TEXT)
    if at < 0 or data[at + _TEXT_AT : at + _TEXT_AT + 1] == b'"' or b'"error"' in data:
        return -1
    return at


def json_event(data: bytes) -> dict[str, Any] | None:
    """An event's ``data`` as a JSON object; ``None`` for anything else, which is not ours to
    judge: the client gets it as it is (a :data:`REAL` event)."""
    try:
        event = json.loads(data)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


class FirstEvent:
    """Reads a stream's leading events until one that a client shows; a protocol whose events
    say so differently (``openai_responses_events.py``) overrides :meth:`_whole` and :meth:`_event`."""

    __slots__ = ("_anthropic", "_splitter", "saw_events")

    def __init__(self, *, anthropic: bool) -> None:
        self._anthropic = anthropic
        #: Made for the first chunk that is not one whole event (until then none is pending).
        self._splitter: EventSplitter | None = None
        #: Whether any event came at all: a body that is not an event stream (a server that
        #: ignored ``stream``) is not ours to judge, and is relayed as it is once it ends.
        self.saw_events = False

    def feed(self, chunk: bytes) -> int | None:
        """``None``: nothing shown yet, read on; :data:`REAL`: commit; else the HTTP status the
        stream's first real event, an error, stands for."""
        splitter = self._splitter
        if splitter is None:
            # The usual chunk is one whole event: read without the splitter (nothing is pending
            # before it, since no chunk went to the splitter yet).
            data = self._whole(chunk)
            if data is not None:
                self.saw_events = True
                return self._event(data)
            splitter = self._splitter = EventSplitter()
        for data in splitter.feed(chunk):
            self.saw_events = True
            verdict = self._event(data)
            if verdict is not None:
                return verdict
        return None

    def _whole(self, chunk: bytes) -> bytes | None:
        """The data of a chunk that is one whole event of one ``data:`` line (``None``: any
        other chunk, read by the splitter)."""
        head, boundary, rest = chunk.partition(b"\n\n")
        if boundary and not rest and head[:6] == b"data: " and b"\n" not in head and b"\r" not in head:
            return head[6:]
        return None

    def _event(self, data: bytes) -> int | None:
        if data == b"[DONE]":
            return EMPTY  # the end, before anything a client shows
        if not self._anthropic and _text_at(data) >= 0:
            # A content delta with text, as nearly every stream's second event is: no parse
            # needed (the first ``content`` holding text is something a client shows).
            return REAL
        event = json_event(data)
        if event is None:
            return REAL
        if self._anthropic:
            return _anthropic_event(event)
        error = event.get("error")
        if error is not None:
            return _openai_error_status(error)
        return _openai_chunk(event)


def _anthropic_event(event: dict[str, Any]) -> int | None:
    kind = event.get("type")
    if kind in _PREAMBLE:
        return None
    if kind == "message_stop":
        return EMPTY
    if kind == "message_delta":
        delta = event.get("delta")
        return REAL if isinstance(delta, dict) and delta.get("stop_reason") is not None else None
    if kind == "error":
        error = event.get("error")
        return status_of_error_type(error.get("type") if isinstance(error, dict) else None)
    if kind == "content_block_start":
        block = event.get("content_block")
        if isinstance(block, dict) and block.get("type") == "text" and not block.get("text"):
            return None  # an empty text block opening: nothing to show yet
    return REAL


def _openai_chunk(event: dict[str, Any]) -> int | None:
    choices = event.get("choices")
    if not isinstance(choices, list):
        return REAL
    if not choices:
        return REAL if event.get("usage") is not None else None
    for choice in choices:
        if not isinstance(choice, dict) or choice.get("finish_reason") is not None:
            return REAL
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return REAL
        for key, value in delta.items():
            if key != "role" and value:  # content, a tool call, a refusal, reasoning...
                return REAL
    return None


def _openai_error_status(error: object) -> int:
    if not isinstance(error, dict):
        return 500
    for key in ("status", "code"):
        value = error.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 400 <= value <= 599:
            return value
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str):
            if value in _OPENAI_TYPES:
                return _OPENAI_TYPES[value]
            status = status_of_error_type(value)
            if status != 500:
                return status
    return 500
