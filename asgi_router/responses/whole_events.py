"""Cutting a stream at event boundaries, for a relay whose stream may be continued after a break.

When the plan has a candidate that may continue a broken stream, the client must never hold
half an event: the continuation's events are spliced on at an event boundary, and the text said
so far is read from the events sent. So each chunk goes out up to its last event delimiter (a
blank line) and the tail after it is held until its event completes. A scan for the delimiter,
not a parse; a chunk that ends on a blank line (nearly every one) is sent whole, untouched.

Such a stream is read back at a break (the text said so far), so an event whose data is no
JSON object (nor ``[DONE]``; each object is parsed to know), or an
upstream's error event, is a break itself (:func:`breaks_at`: a pattern search per chunk, its objects parsed): the
events before it go out, it does not, and a continuation may follow on the boundary.
"""

from __future__ import annotations

import json
import re
from typing import Final, Protocol

from asgi_router.protocols.stream_end import error_event_at

__all__ = ["Spliced", "WholeEvents", "complete_events", "unreadable_at"]

#: A ``data:`` line whose payload is neither a JSON object nor ``[DONE]``: an event no client
#: can read (a stream that may be continued is read back from its events).
_UNREADABLE: Final = re.compile(rb"(?:^|\n)data:(?! ?\{| ?\[DONE\])")
#: A ``data:`` line that opens a JSON object: it must hold one (parsed to know).
_OBJECT: Final = re.compile(rb"(?:^|\n)data: ?(\{[^\r\n]*)")


class Spliced(Protocol):
    """Rewrites a continuation's complete events into the stream the client already has."""

    def feed(self, events: bytes) -> bytes: ...


def complete_events(data: bytes) -> int:
    """Where the complete events of ``data`` end: just past its last blank line (0: none)."""
    at = data.rfind(b"\n\n")
    cut = at + 2 if at >= 0 else 0
    if b"\r" in data:  # CRLF line ends: a blank line is \r\n\r\n
        crlf = data.rfind(b"\r\n\r\n")
        if crlf >= 0 and crlf + 4 > cut:
            cut = crlf + 4
    return cut


def unreadable_at(events: bytes) -> int:
    """Where the first event of ``events`` (complete events) that no client can read starts
    (a ``data:`` line that is not a JSON object nor ``[DONE]``, or that opens an object it
    does not hold: ``data: {not json``); -1: none."""
    found = _UNREADABLE.search(events)
    at = -1 if found is None else found.start()
    for line in _OBJECT.finditer(events, 0, len(events) if at < 0 else at):
        try:
            json.loads(line[1])
        except ValueError:
            at = line.start()
            break
    if at < 0:
        return -1
    return at + 1 if events[at : at + 1] == b"\n" else at


def breaks_at(events: bytes) -> tuple[int, str]:
    """Where the first event of ``events`` that breaks a stream that may be continued starts,
    and why: an upstream's error event, or one no client can read (-1: none). The events before
    it go out; it does not (a continuation's events follow instead)."""
    at = unreadable_at(events)
    if b'"error"' in events:
        error = error_event_at(events)
        if error >= 0 and (at < 0 or error < at):
            return error, "the upstream sent an error event"
    return at, "the upstream sent an event that is not JSON"


class WholeEvents:
    """One stream's cut into whole events: the unfinished event held, the events sent kept (the
    text so far, read at a break), and the continuation's rewriting once a call continues it.

    Both are bounded. The unfinished event is held as the pieces it came in (joined once, when
    it completes: linear in its size however many chunks it takes) and at most
    ``max_event_bytes`` of it: past that the event is dropped and :attr:`overflowed` says so,
    the relay ends the stream (no client could read an event that size; it counts as
    ``upstream_5xx``). The events sent are kept up to ``max_said_bytes``: past that they are let
    go and :meth:`said` has nothing to continue from (the break gets the in-band error).
    """

    __slots__ = ("_held", "_held_size", "_max_event", "_max_said", "_said_size", "events", "overflowed", "splice")

    def __init__(self, max_event_bytes: int = 1 << 62, max_said_bytes: int = 1 << 62) -> None:
        self._max_event = max_event_bytes
        self._max_said = max_said_bytes
        #: The tail of the stream after its last complete event, not sent yet, as it came.
        self._held: list[bytes] = []
        self._held_size = 0
        #: What went to the client, chunk by chunk (complete events only); ``None`` once more
        #: than ``max_said_bytes`` went out.
        self.events: list[bytes] | None = []
        self._said_size = 0
        #: The unfinished event outgrew ``max_event_bytes`` (and was dropped).
        self.overflowed = False
        #: Rewrites a continuation's events into the stream the client already has.
        self.splice: Spliced | None = None

    @property
    def holding(self) -> bool:
        """Whether part of an unfinished event is held."""
        return bool(self._held)

    @property
    def held(self) -> bytes:
        """The unfinished event held so far (joined: asked only at the stream's end)."""
        return b"".join(self._held)

    def drop_held(self) -> None:
        """Forget the unfinished event (the stream ended without it)."""
        self._held = []
        self._held_size = 0

    def cut(self, data: bytes) -> bytes:
        """The complete events of the held tail and ``data``; the rest is held."""
        held = self._held
        if not held:
            at = complete_events(data)
            if at < len(data):
                self._hold(data[at:])
            return data[:at]
        # A blank line may straddle the seam: the held tail's last bytes are searched with
        # ``data`` (the held tail has no blank line of its own).
        seam = b"".join(held[-3:])[-3:]
        at = complete_events(seam + data) - len(seam)
        if at <= 0:
            self._hold(data)
            return b""
        out = b"".join(held) + data[:at]
        self.drop_held()
        if at < len(data):
            self._hold(data[at:])
        return out

    def _hold(self, piece: bytes) -> None:
        size = self._held_size + len(piece)
        if size > self._max_event:
            self.drop_held()
            self.overflowed = True
            return
        self._held.append(piece)
        self._held_size = size

    def sent(self, events: bytes) -> None:
        """``events`` went to the client: kept for :meth:`said`, within ``max_said_bytes``."""
        kept = self.events
        if kept is None:
            return
        self._said_size += len(events)
        if self._said_size > self._max_said:
            self.events = None  # too long to continue: nothing kept for it
            return
        kept.append(events)

    def continued(self, splice: Spliced) -> None:
        """Another call continues the stream: its unfinished tail is dropped (the call that
        broke never finished that event), its events rewritten by ``splice``."""
        self.drop_held()
        self.splice = splice

    def said(self) -> bytes | None:
        """Every complete event sent so far, joined; ``None`` once more than ``max_said_bytes``
        went out."""
        return None if self.events is None else b"".join(self.events)
