"""What a :class:`~asgi_router.testing.FakeUpstream` answers: replies, as plain immutable data.

A reply says *what happens* (an answer, an error, a stall, a stream that breaks), not how it is
spelled on the wire: the fake renders it in its ``kind``'s protocol, and follows the request's
``stream`` flag (a JSON body, or server-sent events). So one script reads the same whatever the
protocol, and a reply can be built before anyone knows which model or request it will answer.

========================================  =====================================================
``ok(text=None, chunks=None)``            200 with ``text`` (default: one naming the model);
                                          streamed one chunk per word, or cut into ``chunks``
``status(code, retry_after=None,          that status; ``body`` a dict (JSON), str (plain
body=None)``                              text) or bytes (sent as they are); default: an
                                          error shaped as the protocol's own
``stall(seconds)``                        accepts the request, sends nothing
``stall_after_headers(seconds)``          the status line and headers, then nothing
``broken_stream(after_chunks)``           that many chunks, then the connection is dropped
``slow(seconds, then=ok())``              waits before the status line, then answers ``then``
``raw(*writes)``                          exactly these bytes, one write each
========================================  =====================================================

Beyond those, keyword-only arguments cover what scripted tests keep needing: ``headers`` (a
provider's request id, rate-limit headers), ``usage`` (the token counts an answer reports),
``interval`` (seconds between a stream's chunks) and ``after_chunks`` on
:func:`stall_after_headers` (a stream that goes quiet midway).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "BrokenStream",
    "Ok",
    "Raw",
    "Reply",
    "Slow",
    "Stall",
    "StallAfterHeaders",
    "Status",
    "broken_stream",
    "ok",
    "raw",
    "slow",
    "stall",
    "stall_after_headers",
    "status",
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


@dataclass(frozen=True, slots=True)
class BrokenStream(Reply):
    after_chunks: int
    interval: float = 0.0


@dataclass(frozen=True, slots=True)
class Slow(Reply):
    seconds: float
    then: Reply


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


def _count(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a whole number, 0 or more, not {value!r}")
    return value


def _code(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 200 <= value <= 599:
        raise ValueError(f"status must be an HTTP status from 200 to 599, not {value!r}")
    return value


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
    if chunks is not None:
        _count("chunks", chunks)
        if chunks == 0 or (text is not None and chunks > len(text)):
            raise ValueError(f"chunks must be between 1 and the length of the text, not {chunks}")
    return Ok(
        text, chunks, dict(usage) if usage is not None else None, _headers(headers), _seconds("interval", interval)
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


def stall_after_headers(seconds: float, *, after_chunks: int = 0, interval: float = 0.0) -> StallAfterHeaders:
    """Send the status line and headers (and, streaming, the first ``after_chunks`` chunks),
    then nothing for ``seconds``; then drop the connection without a proper end."""
    return StallAfterHeaders(
        _seconds("seconds", seconds), _count("after_chunks", after_chunks), _seconds("interval", interval)
    )


def broken_stream(after_chunks: int, *, interval: float = 0.0) -> BrokenStream:
    """Send ``after_chunks`` chunks of the stream :func:`ok` would send, then drop the connection
    without a proper end, as a crashing upstream does: the client sees an error, not an end.

    Chunks count every event, the first being the one that opens the answer (OpenAI's
    assistant-role chunk), so ``broken_stream(0)`` drops right after the headers. Asked
    without ``stream``, the fake sends the headers and half of the JSON body before the drop.
    """
    return BrokenStream(_count("after_chunks", after_chunks), _seconds("interval", interval))


_OK: Final = ok()


def slow(seconds: float, then: Reply = _OK) -> Slow:
    """Wait ``seconds`` before the status line (stopping early if the client leaves), then
    answer as ``then`` does."""
    if not isinstance(then, Reply):
        raise TypeError(f"then must be a reply, not {type(then).__name__}")
    return Slow(_seconds("seconds", seconds), then)


def raw(*writes: bytes, status: int = 200, headers: Mapping[str, str] | None = None, interval: float = 0.0) -> Raw:
    """Send exactly ``writes``, one write each, then end the response properly.

    For what the other replies cannot spell: a stream recorded from a real provider, or a UTF-8
    character split across two writes. The content type is ``text/event-stream`` unless
    ``headers`` say otherwise.
    """
    if not all(isinstance(write, bytes) for write in writes):
        raise TypeError("raw() takes bytes")
    return Raw(tuple(writes), _code(status), _headers(headers), _seconds("interval", interval))
