"""Token counts of a served response, read *after* it was sent: never on the relay path.

rpm/tpm budgets and cost events need to know how many tokens a response used. Upstreams say so
in ``usage``: in a non-streaming body, and in the final SSE chunk of a stream (OpenAI sends it
when the client asked for ``stream_options.include_usage``; many compatible servers always do).

The relay must not parse what it forwards, so a streamed response only feeds a :class:`Tail`:
the last :data:`TAIL_BYTES` of the stream, kept as references to the chunks already sent (no
copy) and a chunk counter. Once the stream has ended, :func:`find_usage` looks for the last
``"usage"`` object in that tail. Without one the count is estimated: the prompt from the
request's own estimate, the completion from the number of chunks (about one token per event)
or from the body's size.
"""

from __future__ import annotations

import json
import re
from collections import deque
from dataclasses import dataclass
from typing import Final

__all__ = ["TAIL_BYTES", "Tail", "TokenCount", "count_tokens", "find_usage", "response_model"]

#: Most bytes of a stream kept for the usage read after it ends.
TAIL_BYTES: Final = 64 * 1024
# How far past ``"usage":`` the object may reach (a usage object is a few hundred bytes).
_USAGE_SPAN: Final = 4096
# Bytes of envelope (id, model, choices, ...) a non-streaming completion has beyond its text.
_ENVELOPE_BYTES: Final = 300
_CHARS_PER_TOKEN: Final = 4
_DECODER: Final = json.JSONDecoder()
_MODEL: Final = re.compile(rb'"model"\s*:\s*"([^"\\]{1,200})"')


@dataclass(frozen=True, slots=True)
class TokenCount:
    """Tokens one response used; ``measured`` when they came from the upstream's ``usage``."""

    prompt: int
    completion: int
    measured: bool

    @property
    def total(self) -> int:
        return self.prompt + self.completion


class Tail:
    """The last ``limit`` bytes of a stream (references to its chunks) and how many chunks it had."""

    __slots__ = ("_chunks", "_limit", "_size", "chunks")

    def __init__(self, limit: int = TAIL_BYTES) -> None:
        self._chunks: deque[bytes] = deque()
        self._limit = limit
        self._size = 0
        self.chunks = 0

    def add(self, chunk: bytes) -> None:
        """Keep ``chunk``; drop the oldest ones no longer needed for the last ``limit`` bytes."""
        self.chunks += 1
        self._chunks.append(chunk)
        self._size += len(chunk)
        while self._size - len(self._chunks[0]) >= self._limit:
            self._size -= len(self._chunks.popleft())

    def bytes(self) -> bytes:
        """At most the last ``limit`` bytes, joined."""
        return b"".join(self._chunks)[-self._limit :]


def find_usage(data: bytes) -> tuple[int, int] | None:
    """``(prompt_tokens, completion_tokens)`` of the last ``"usage"`` object in ``data``."""
    end = len(data)
    while True:
        at = data.rfind(b'"usage"', 0, end)
        if at < 0:
            return None
        end = at
        colon = data.find(b":", at + 7, at + 32)
        if colon < 0:
            continue
        text = data[colon + 1 : colon + 1 + _USAGE_SPAN].decode("utf-8", "replace").lstrip()
        try:
            usage, _ = _DECODER.raw_decode(text)
        except ValueError:
            continue
        if isinstance(usage, dict):
            prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if isinstance(prompt, int) and isinstance(completion, int) and prompt >= 0 and completion >= 0:
                return prompt, completion


def count_tokens(data: bytes, prompt_estimate: int, chunks: int | None = None) -> TokenCount:
    """Tokens used by a response whose body (or stream tail) is ``data``.

    ``chunks`` is the number of chunks a stream had (``None`` for a whole body): without a
    ``usage`` object, a stream counts one token per chunk and a body four characters per token.
    """
    found = find_usage(data)
    if found is not None:
        return TokenCount(found[0], found[1], measured=True)
    if chunks is not None:
        completion = max(1, chunks)
    else:
        completion = max(1, (len(data) - _ENVELOPE_BYTES) // _CHARS_PER_TOKEN)
    return TokenCount(prompt_estimate, completion, measured=False)


def response_model(body: bytes) -> str | None:
    """The ``model`` an upstream's answer (a body, or a stream's first chunk) says it came from
    (traces report it: an alias such as ``gpt-4o`` is answered by a dated model)."""
    found = _MODEL.search(body, 0, 8192)
    return found[1].decode("utf-8", "replace") if found is not None else None
