"""What a :class:`~asgi_router.testing.FakeUpstream` answers: replies, as plain immutable data.

A reply says *what happens* (an answer, an error, a stall, a stream that breaks), not how it is
spelled on the wire: the fake renders it in its ``kind``'s protocol, and follows the request's
``stream`` flag (a JSON body, or server-sent events). So one script reads the same whatever the
protocol, and a reply can be built before anyone knows which model or request it will answer.

========================================  =====================================================
``ok(text=None, chunks=None)``            200 with ``text`` (default: one naming the model);
                                          streamed one chunk per word, or cut into ``chunks``;
                                          asked to continue a prefix of it, the rest
``tool_call(name, arguments)``            200 calling tool ``name`` with ``arguments``
``status(code, retry_after=None,          that status; ``body`` a dict (JSON), str (plain
body=None)``                              text) or bytes (sent as they are); default: an
                                          error shaped as the protocol's own
``stall(seconds)``                        accepts the request, sends nothing
``stall_after_headers(seconds)``          the status line and headers, then nothing
``broken_stream(after_chunks)``           that many chunks (``mid_event``: and half of the
                                          next), then the connection is dropped
``rejects_prefill(then=ok())``            a 400 to a request ending in an assistant message
``stream_error(after_chunks, code=500)``  that many chunks, then the protocol's in-stream error
``slow(seconds, then=ok())``              waits before the status line, then answers ``then``
``raw(*writes)``                          exactly these bytes, one write each
``split_writes(then=ok())``               ``then``, each write cut in three at awkward places
========================================  =====================================================

Beyond those, keyword-only arguments cover what scripted tests keep needing: ``headers`` (a
provider's request id, rate-limit headers), ``usage`` (the token counts an answer reports),
``interval`` (seconds between a stream's chunks), ``after_chunks`` on
:func:`stall_after_headers` (a stream that goes quiet midway) and ``text`` on the replies that
cut a stream short (the answer they cut).

A request that ends in an assistant message asks the model to continue it (a router resuming a
broken stream sends one: Anthropic's prefill, OpenAI-compatible servers' ``prefix``). :func:`ok`
honours it: when that message's text is a prefix of the reply's text, the answer is the rest.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "BrokenStream",
    "Ok",
    "Raw",
    "RejectsPrefill",
    "Reply",
    "Slow",
    "SplitWrites",
    "Stall",
    "StallAfterHeaders",
    "Status",
    "StreamError",
    "ToolCall",
    "broken_stream",
    "ok",
    "raw",
    "rejects_prefill",
    "slow",
    "split_writes",
    "stall",
    "stall_after_headers",
    "status",
    "stream_error",
    "tool_call",
]


class Reply:
    """Base of every reply; build them with this module's functions."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Ok(Reply):
    text: str | None = None
    chunks: int | None = None
    usage: Mapping[str, int] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    interval: float = 0.0


@dataclass(frozen=True, slots=True)
class ToolCall(Reply):
    name: str
    arguments: str
    text: str | None = None
    id: str | None = None
    chunks: int | None = None
    usage: Mapping[str, int] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    interval: float = 0.0


@dataclass(frozen=True, slots=True)
class Status(Reply):
    code: int
    retry_after: float | str | None = None
    body: Mapping[str, Any] | str | bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Stall(Reply):
    seconds: float


@dataclass(frozen=True, slots=True)
class StallAfterHeaders(Reply):
    seconds: float
    after_chunks: int = 0
    interval: float = 0.0
    text: str | None = None


@dataclass(frozen=True, slots=True)
class BrokenStream(Reply):
    after_chunks: int
    interval: float = 0.0
    text: str | None = None
    mid_event: bool = False


@dataclass(frozen=True, slots=True)
class RejectsPrefill(Reply):
    then: Reply


@dataclass(frozen=True, slots=True)
class StreamError(Reply):
    after_chunks: int
    code: int = 500
    message: str | None = None
    interval: float = 0.0


@dataclass(frozen=True, slots=True)
class Slow(Reply):
    seconds: float
    then: Reply


@dataclass(frozen=True, slots=True)
class SplitWrites(Reply):
    then: Reply
    interval: float = 0.001


@dataclass(frozen=True, slots=True)
class Raw(Reply):
    writes: tuple[bytes, ...]
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    interval: float = 0.0


def _seconds(name: str, value: float) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a number of seconds, 0 or more, not {value!r}")
    return float(value)


def seconds_text(seconds: float) -> str:
    """Seconds as a header or a script says them: a whole number as an integer (``1000000``, never
    ``1e+06``, which no client reads as a number), else in plain decimals (``0.5``)."""
    if float(seconds).is_integer():
        return str(int(seconds))
    return f"{seconds:.6f}".rstrip("0").rstrip(".")


def _count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a whole number, 0 or more, not {value!r}")
    return value


def _code(value: int, lowest: int = 200) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= 599:
        raise ValueError(f"status must be an HTTP status from {lowest} to 599, not {value!r}")
    return value


def _chunks(chunks: int | None, text: str | None) -> int | None:
    if chunks is not None:
        _count("chunks", chunks)
        if chunks == 0 or (text is not None and chunks > len(text)):
            raise ValueError(f"chunks must be between 1 and the length of the text, not {chunks}")
    return chunks


def _headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    return {str(name).lower(): str(value) for name, value in (headers or {}).items()}


def ok(
    text: str | None = None,
    chunks: int | None = None,
    *,
    usage: Mapping[str, int] | None = None,
    headers: Mapping[str, str] | None = None,
    interval: float = 0.0,
) -> Ok:
    """A successful answer saying ``text`` (default: a text naming the model asked for).

    Streamed, the text goes out one content chunk per word, or cut into ``chunks`` pieces of
    about equal length; ``interval`` seconds pass between chunks. ``usage`` replaces the token
    counts reported (by default: the words of the request's messages, and one per chunk).
    """
    return Ok(
        text,
        _chunks(chunks, text),
        dict(usage) if usage is not None else None,
        _headers(headers),
        _seconds("interval", interval),
    )


def tool_call(
    name: str,
    arguments: Mapping[str, Any] | str,
    *,
    text: str | None = None,
    id: str | None = None,
    chunks: int | None = None,
    usage: Mapping[str, int] | None = None,
    headers: Mapping[str, str] | None = None,
    interval: float = 0.0,
) -> ToolCall:
    """A successful answer that calls tool ``name`` with ``arguments`` (a dict, or the JSON text
    of an object, sent as it is), after saying ``text`` if given.

    The answer ends as the protocol ends a tool call (OpenAI's ``finish_reason`` ``tool_calls``,
    Anthropic's ``stop_reason`` ``tool_use``). Streamed, the arguments go out one piece per word,
    or cut into ``chunks`` pieces. ``id`` is the call's id (default: one in the protocol's style).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a tool's name, not {name!r}")
    if isinstance(arguments, Mapping):
        arguments = json.dumps(dict(arguments), ensure_ascii=False)
    elif isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise ValueError(f"arguments must be a JSON object, not {arguments!r}")
    else:
        raise TypeError(f"arguments must be a dict or a JSON object's text, not {type(arguments).__name__}")
    return ToolCall(
        name,
        arguments,
        text,
        id,
        _chunks(chunks, arguments),
        dict(usage) if usage is not None else None,
        _headers(headers),
        _seconds("interval", interval),
    )


def status(
    code: int,
    retry_after: float | str | None = None,
    body: Mapping[str, Any] | str | bytes | None = None,
    *,
    headers: Mapping[str, str] | None = None,
) -> Status:
    """An answer with status ``code``: by default an error body shaped as the protocol's own.

    ``retry_after`` sets the ``Retry-After`` header (seconds, or an HTTP date as a string).
    ``body`` replaces the default body: a dict is sent as JSON, a str as plain text, bytes as
    they are (as JSON, unless ``headers`` say otherwise).
    """
    if retry_after is not None and not isinstance(retry_after, str):
        _seconds("retry_after", retry_after)
    if body is not None and not isinstance(body, Mapping | str | bytes):
        raise TypeError(f"body must be a dict, str or bytes, not {type(body).__name__}")
    return Status(_code(code), retry_after, body, _headers(headers))


def stall(seconds: float) -> Stall:
    """Accept the request and send nothing for ``seconds`` (or until the client leaves).

    An upstream that hangs before its status line: the router's first-byte timeout should end
    it. If the client is still there after ``seconds``, the fake gives up with a 504, as a
    gateway in front of a hung server would.
    """
    return Stall(_seconds("seconds", seconds))


def stall_after_headers(
    seconds: float, *, after_chunks: int = 0, interval: float = 0.0, text: str | None = None
) -> StallAfterHeaders:
    """Send the status line and headers (and, streaming, the first ``after_chunks`` chunks of
    the stream ``ok(text)`` would send), then nothing for ``seconds``; then drop the connection
    without a proper end."""
    return StallAfterHeaders(
        _seconds("seconds", seconds), _count("after_chunks", after_chunks), _seconds("interval", interval), text
    )


def broken_stream(
    after_chunks: int, *, interval: float = 0.0, text: str | None = None, mid_event: bool = False
) -> BrokenStream:
    """Send ``after_chunks`` chunks of the stream ``ok(text)`` would send (with ``mid_event``,
    and the first half of the next one: a cut inside an event), then drop the connection
    without a proper end, as a crashing upstream does: the client sees an error, not an end.

    Chunks count every event, the first being the one that opens the answer (OpenAI's
    assistant-role chunk, Anthropic's ``message_start``), so ``broken_stream(0)`` drops right
    after the headers. Without ``text`` the answer is the one :func:`ok` gives, repeated so
    that more is always to come. Asked without ``stream``, the fake sends the headers and half
    of the JSON body before the drop.
    """
    return BrokenStream(_count("after_chunks", after_chunks), _seconds("interval", interval), text, bool(mid_event))


def stream_error(
    after_chunks: int, code: int = 500, message: str | None = None, *, interval: float = 0.0
) -> StreamError:
    """Send ``after_chunks`` chunks of the stream :func:`ok` would send, then the protocol's
    in-stream error event for status ``code`` (with ``message``), and end the response: how a
    provider reports a failure once its 200 has gone out (Anthropic's ``event: error``, an
    ``overloaded_error`` for 529; OpenAI's ``data: {"error": ...}``).

    Chunks count as in :func:`broken_stream`. Asked without ``stream``, the error is the
    answer's status and body, as :func:`status` would send it.
    """
    return StreamError(
        _count("after_chunks", after_chunks),
        _code(code, lowest=400),
        message,
        _seconds("interval", interval),
    )


_OK: Final = ok()


def rejects_prefill(then: Reply = _OK) -> RejectsPrefill:
    """A model that cannot continue an assistant message: a request ending in one gets a 400
    in the protocol's shape (as many models answer prefill); any other is answered ``then``."""
    if not isinstance(then, Reply):
        raise TypeError(f"then must be a reply, not {type(then).__name__}")
    return RejectsPrefill(then)


def slow(seconds: float, then: Reply = _OK) -> Slow:
    """Wait ``seconds`` before the status line (stopping early if the client leaves), then
    answer as ``then`` does."""
    if not isinstance(then, Reply):
        raise TypeError(f"then must be a reply, not {type(then).__name__}")
    return Slow(_seconds("seconds", seconds), then)


def split_writes(then: Reply = _OK, *, interval: float = 0.001) -> SplitWrites:
    """Answer as ``then`` does, each write cut in pieces sent on their own, ``interval`` seconds
    apart: after its third byte (inside a stream event's field name: ``eve|nt:``, ``dat|a:``),
    after the first byte of its first multi-byte UTF-8 character, and before its last byte
    (between the two newlines that end an event). A client must put events together from
    whatever pieces the network hands it: this is the network at its least helpful."""
    if not isinstance(then, Reply):
        raise TypeError(f"then must be a reply, not {type(then).__name__}")
    return SplitWrites(then, _seconds("interval", interval))


def raw(*writes: bytes, status: int = 200, headers: Mapping[str, str] | None = None, interval: float = 0.0) -> Raw:
    """Send exactly ``writes``, one write each, then end the response properly.

    For what the other replies cannot spell: a stream recorded from a real provider, or a UTF-8
    character split across two writes. The content type is ``text/event-stream`` unless
    ``headers`` say otherwise.
    """
    if not all(isinstance(write, bytes) for write in writes):
        raise TypeError("raw() takes bytes")
    return Raw(tuple(writes), _code(status), _headers(headers), _seconds("interval", interval))
