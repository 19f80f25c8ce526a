"""Whether a chunk a client was sent ends its stream, and whether a stream that ended had said
its finish: then the client has the whole answer.

Both protocols end a stream with a last event of their own (OpenAI's ``data: [DONE]``,
Anthropic's ``message_stop``): once one went out, a client that closes before the response's
last (empty) message still got everything, so the request is ``served``, not aborted. The relay
asks it of the chunk it just sent; the request asks it of its last chunk when its client leaves.

A stream whose body ended (or broke) before that last event is whole only when its *finish* went
out (a chat chunk with a ``finish_reason``; Anthropic's ``message_delta`` with a
``stop_reason``): after it come at most the usage and the terminator, which the relay can write
itself. Before it, the answer is cut short however cleanly the connection closed. The finish is
looked for only when a stream ends without its terminator, in the last two chunks sent (the
finish, then at most a usage chunk), or in the short chunks an upstream that writes in pieces
ended with, which the relay joins as they come (a length test per chunk).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "ENDINGS",
    "MAY_END",
    "PIECE",
    "PIECES_KEPT",
    "end_window",
    "ended",
    "ends_stream",
    "error_event_at",
    "terminator",
    "upstream_error_in",
    "went_out_finished",
]

#: How a chunk that ends a stream ends (OpenAI's ``[DONE]``, Anthropic's ``message_stop``).
ENDINGS: Final = (b"data: [DONE]\n\n", b"data: [DONE]\r\n\r\n", b'"message_stop"}\n\n', b'"message_stop"}\r\n\r\n')
#: Above the fourth byte from the end of every one of :data:`ENDINGS` (``E`` of ``[DONE]``, the
#: quote of ``"message_stop"``, ``\r`` of a CRLF ending). A chunk whose fourth byte from the end
#: is not below it cannot end the stream (a chat chunk's is the ``]`` of ``}]}``), so the exact
#: test runs only on the few chunks that may end it (docs/performance.md).
MAY_END: Final = b"F"
#: A chunk shorter than this may hold a piece of a stream's end: the relay joins such chunks
#: (with what came before them, at most :data:`PIECES_KEPT` bytes) so that the end is found
#: however the upstream cut it.
PIECE: Final = 32
PIECES_KEPT: Final = 1024
#: A finish said: a chat chunk's ``finish_reason`` or a ``message_delta``'s ``stop_reason`` that
#: is a string (``null`` is no finish).
_FINISH: Final = re.compile(rb'"(?:finish_reason|stop_reason)"\s*:\s*"')
#: An OpenAI error event in a stream (``data: {"error": ...}``).
_ERROR_EVENT: Final = re.compile(rb'(?:^|\n)data:\s?\{\s*"error"\s*:')
#: What ends a stream whose finish went out, written by the router: OpenAI's, Anthropic's.
_TERMINATORS: Final = (b"data: [DONE]\n\n", b'event: message_stop\ndata: {"type":"message_stop"}\n\n')


def ends_stream(chunk: bytes) -> bool:
    """Whether ``chunk``, the last one sent, ends with the stream's last event: the client has
    the whole answer."""
    return chunk[-4:-3] < MAY_END and chunk.endswith(ENDINGS)


def ended(window: bytes) -> bool:
    """Whether a stream whose last bytes sent are ``window`` (:func:`end_window`) ended with its
    last event."""
    return ends_stream(window)


def went_out_finished(window: bytes) -> bool:
    """Whether a stream whose last bytes sent are ``window`` (:func:`end_window`) had said its
    finish, and no error: the client has the whole answer but for its terminator."""
    return not upstream_error_in(window) and _FINISH.search(window) is not None


def end_window(before_last: bytes, last: bytes, pieces: bytes) -> bytes:
    """The last bytes a stream sent, where its end and finish are: its last two chunks, or, when
    it ended in chunks shorter than :data:`PIECE` (an upstream that writes in pieces), the
    ``pieces`` the relay joined for it."""
    return before_last + last if len(last) >= PIECE else pieces


def upstream_error_in(chunk: bytes) -> bool:
    """Whether ``chunk`` holds an OpenAI error event: the stream broke in the upstream's words."""
    return chunk.find(b'"error"') >= 0 and _ERROR_EVENT.search(chunk) is not None  # not ``in``: docs/performance.md


def error_event_at(events: bytes) -> int:
    """Where the first OpenAI error event of ``events`` (complete events) starts; -1: none."""
    found = _ERROR_EVENT.search(events)
    if found is None:
        return -1
    return found.start() + 1 if events[found.start() : found.start() + 1] == b"\n" else found.start()


def terminator(anthropic: bool) -> bytes:
    """The last event the router writes for a stream whose finish went out without it."""
    return _TERMINATORS[anthropic]
