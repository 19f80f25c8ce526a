"""Continuing a Messages API stream that broke, for Anthropic clients on ``/v1/messages``.

The same three steps as for chat completions (``continuation.py``), in the Messages API's
events. :func:`said_in_messages` reads the events a client was sent: the text of the open text
block so far, and that block's ``index``; a stream is continued only while that block is open
(no ``tool_use`` or ``thinking`` block, no ``content_block_stop`` after it, no ``message_delta``
yet). The continuation request is the original one plus the assistant prefill
(:func:`~asgi_router.protocols.continuation.continuation_request`, which strips the trailing
whitespace the API refuses). :class:`MessagesSplice` makes its events part of the same message:
its ``message_start``, ``ping`` and the opening of its first text block are dropped (the client
has them already); a continuation that opens with another block (a tool call) has the open text
block closed first and its blocks numbered after it; the whitespace the prefill
lost is not said twice, and ``message_delta``'s ``output_tokens`` adds the broken call's
(estimated).
"""

from __future__ import annotations

import json
from typing import Any, Final

from asgi_router.protocols.continuation import Said, Splicing, event_json
from asgi_router.protocols.sse import EventSplitter

__all__ = ["MessagesSplice", "said_in_messages"]

_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
#: Events the continuation's client already had from the first call.
_DROPPED: Final = frozenset({"message_start", "ping"})


def said_in_messages(sent: bytes) -> Said | str:
    """The open text block's text in the complete events of ``sent`` (``Said.block`` its index),
    or why the stream cannot be continued (a sentence)."""
    text: list[str] = []
    block: int | None = None
    for data in EventSplitter().feed(sent + b"\n\n"):
        try:
            event = json.loads(data)
        except ValueError:
            return "an event is not JSON"
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "content_block_start":
            opened = event.get("content_block")
            if not isinstance(opened, dict) or opened.get("type") != "text":
                return "a tool call or thinking had started"
            block, text = event.get("index", 0), [str(opened.get("text") or "")]
        elif kind == "content_block_delta":
            delta = event.get("delta")
            if not isinstance(delta, dict) or delta.get("type") != "text_delta":
                return "a tool call or thinking had started"
            text.append(str(delta.get("text") or ""))
        elif kind == "content_block_stop":
            block = None
        elif kind in ("message_delta", "message_stop"):
            return "the answer had finished"
    said = "".join(text)
    if block is None or not isinstance(block, int) or not said:
        return "no text block was open"
    return Said(said, None, None, block)


class MessagesSplice(Splicing):
    """Rewrites a continuation's Messages API events into the message the client already has.

    The continuation's first block decides where its blocks go: a text block goes on in the
    block the client has open (its opening dropped, its index that block's); anything else (a
    tool call, say) opens a block of its own, so the open text block is closed first
    (``content_block_stop``) and the continuation's blocks are numbered after it.
    """

    __slots__ = ("_block", "_offset")

    def __init__(self, said: Said, skip: str, prior: tuple[int, int]) -> None:
        super().__init__(skip, prior)
        #: The index of the text block the client has open.
        self._block = said.block
        #: What the continuation's block indices are moved by.
        self._offset = said.block

    def _event(self, data: bytes) -> bytes | None:
        event = event_json(data)
        if event is None:
            return None
        kind = event.get("type")
        if kind in _DROPPED:
            return None
        closed = b""
        if kind == "content_block_start" and self._head:
            self._head = False
            opened = event.get("content_block")
            if isinstance(opened, dict) and opened.get("type") == "text" and not opened.get("text"):
                return None  # its text goes on in the block the client has open
            closed = _encoded("content_block_stop", {"type": "content_block_stop", "index": self._block})
            self._offset = self._block + 1
        if not self._rewrite(kind, event):
            return None
        return closed + _encoded(str(kind), event)

    def _rewrite(self, kind: object, event: dict[str, Any]) -> bool:
        index = event.get("index")
        if isinstance(index, int):
            event["index"] = index + self._offset
        if kind == "content_block_delta" and self._skip:
            delta = event.get("delta")
            text = delta.get("text") if isinstance(delta, dict) else None
            if isinstance(delta, dict) and isinstance(text, str) and text:
                delta["text"] = self._unskipped(text)
                if not delta["text"]:
                    return False
        if kind == "message_delta":
            usage = event.get("usage")
            if isinstance(usage, dict) and isinstance(usage.get("output_tokens"), int):
                usage["output_tokens"] += self._prior[1]
        return True


def _encoded(kind: str, event: dict[str, Any]) -> bytes:
    """One Messages API event on the wire."""
    return b"event: " + kind.encode() + b"\ndata: " + _COMPACT.encode(event).encode() + b"\n\n"
