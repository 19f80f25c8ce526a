"""A held stream's texts: the answer's pieces, joined per part, and masked ones put back.

Under ``output_stream = "buffer"`` the whole stream is held before its first byte is sent, so its
output checks see the answer as a whole: each part's deltas joined into one text (a choice's
content and each tool call's arguments in OpenAI's chunks; each content block's text in
Anthropic's events; the output text of the Responses API's events). A masked text goes back
into the part's first delta and the part's later deltas are emptied: the client gets the same
events, in the same order, carrying the masked answer.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["HeldEvents"]

_BOUNDARY: Final = re.compile(rb"\r?\n\r?\n")
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _split(raw: bytes) -> tuple[bytes, bytes]:
    """An event's lines before its ``data:`` line, and its data (``b""``: it has none)."""
    if raw.startswith(b"data:"):
        at = 0
    else:
        found = raw.find(b"\ndata:")
        if found < 0:
            return raw, b""
        at = found + 1
    return raw[:at], raw[at + 5 :].strip()


class HeldEvents:
    """A held stream cut into its events; each part's deltas, to read and to mask."""

    __slots__ = ("_events", "_parts")

    def __init__(self, body: bytes) -> None:
        #: Each event: its lines before ``data:``, and its parsed data (``None``: kept as it came).
        self._events: list[tuple[bytes, bytes, Any]] = []
        #: Each part's deltas, in order: ``(container, key)``.
        self._parts: dict[tuple[object, ...], list[tuple[Any, Any]]] = {}
        for raw in _BOUNDARY.split(body):
            if not raw.strip():
                continue
            head, data = _split(raw)
            parsed: Any = None
            if data and data != b"[DONE]":
                try:
                    parsed = json.loads(data)
                except ValueError:
                    parsed = None
            self._events.append((head, raw, parsed))
            if isinstance(parsed, dict):
                self._deltas(parsed)

    def _add(self, part: tuple[object, ...], container: Any, key: Any) -> None:
        if isinstance(container.get(key), str):
            self._parts.setdefault(part, []).append((container, key))

    def _deltas(self, event: dict[str, Any]) -> None:
        choices = event.get("choices")
        if isinstance(choices, list):  # OpenAI's chat chunks
            for choice in choices:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if not isinstance(delta, dict):
                    continue
                index = choice.get("index", 0)
                self._add(("content", index), delta, "content")
                for call in delta.get("tool_calls") or ():
                    function = call.get("function") if isinstance(call, dict) else None
                    if isinstance(function, dict):
                        self._add(("tool", index, call.get("index", 0)), function, "arguments")
            return
        kind = event.get("type")
        delta = event.get("delta")
        if kind == "content_block_delta" and isinstance(delta, dict):  # Anthropic's
            field = "text" if delta.get("type") == "text_delta" else "partial_json"
            self._add(("block", event.get("index", 0)), delta, field)
        elif kind == "response.output_text.delta":  # the Responses API's
            self._add(("output", event.get("output_index", 0), event.get("content_index", 0)), event, "delta")

    def texts(self) -> tuple[str, ...]:
        """Each part's text, its deltas joined."""
        return tuple("".join(container[key] for container, key in deltas) for deltas in self._parts.values())

    def masked(self, texts: tuple[str, ...]) -> bytes:
        """The stream again, each part's first delta carrying its masked text and the rest empty."""
        for deltas, text in zip(self._parts.values(), texts, strict=True):
            for at, (container, key) in enumerate(deltas):
                container[key] = text if at == 0 else ""
        out: list[bytes] = []
        for head, raw, parsed in self._events:
            if parsed is None:
                out.append(raw + b"\n\n")
            else:
                out.append(head + b"data: " + _COMPACT.encode(parsed).encode() + b"\n\n")
        return b"".join(out)
