"""Token counts of a served response, read *after* it was sent: never on the relay path.

rpm/tpm budgets and cost events need to know how many tokens a response used. Upstreams say so
in ``usage``: in a non-streaming body, and in the final SSE chunk of a stream (OpenAI sends it
when the client asked for ``stream_options.include_usage``; many compatible servers always do;
Anthropic's Messages API always does, as ``input_tokens`` and ``output_tokens``).

The relay must not parse what it forwards, so a streamed response only feeds :class:`LastChunks`:
references to the last :data:`LAST_CHUNKS` chunks sent (no copy), kept by a bounded deque's own
``append`` (nothing of the router's own per chunk). Once the stream has ended, :func:`find_usage` looks for the
last ``"usage"`` object in the chunks held for commit (Anthropic states the prompt in its first
event, ``message_start``) followed by those last chunks (OpenAI's usage chunk, Anthropic's
``message_delta``, each possibly in pieces); a count that cannot be one (see
``core/usage_bounds.py``) is no count. A continued stream, whose calls' events are rewritten,
keeps a :class:`Tail` instead: its last :data:`TAIL_BYTES` and a chunk counter. Without a usage
the count is estimated: the prompt from the request's own estimate, the completion from the
number of chunks (about one token per event) or from the body's size.

The prompt tokens a provider read from its prompt cache, or wrote to it, are read from the same
usage object: OpenAI's ``prompt_tokens_details.cached_tokens`` (already among its
``prompt_tokens``; a translated Anthropic answer states its writes beside them, as
``cache_write_tokens``), Anthropic's ``cache_read_input_tokens`` and
``cache_creation_input_tokens`` (added to its ``input_tokens``: every count keeps the prompt
whole, cached tokens included).
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable
from typing import Final

from asgi_router.core.usage_bounds import MAX_PLAUSIBLE_TOKENS, plausible_tokens
from asgi_router.request.spend import TokenCount

__all__ = [
    "LAST_CHUNKS",
    "TAIL_BYTES",
    "LastChunks",
    "Tail",
    "Usage",
    "count_tokens",
    "estimated",
    "find_usage",
    "response_model",
]

#: Most bytes of a continued stream kept for the usage read after it ends.
TAIL_BYTES: Final = 64 * 1024
#: Chunks of a stream kept for the usage read after it ends: its last two events (the usage and
#: the end), each in up to four pieces.
LAST_CHUNKS: Final = 8
# How far past ``"usage":`` the object may reach (a usage object is a few hundred bytes).
_USAGE_SPAN: Final = 4096
# Bytes of envelope (id, model, choices, ...) a non-streaming completion has beyond its text.
_ENVELOPE_BYTES: Final = 300
_CHARS_PER_TOKEN: Final = 4
_DECODER: Final = json.JSONDecoder()
# Anthropic's input counts: the prompt is their sum (cache reads and writes are prompt too).
_ANTHROPIC_INPUT: Final = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
_USUAL_USAGE: Final = re.compile(
    rb'"usage"\s*:\s*\{\s*"prompt_tokens"\s*:\s*(\d{1,15})\s*,\s*"completion_tokens"\s*:\s*(\d{1,15})\s*[,}]'
)
# The same with no whitespace at all, as OpenAI and most compatible servers write it: tried first,
# being cheaper to match (what it matches, the pattern above matches alike).
_COMPACT_USAGE: Final = re.compile(rb'"usage":\{"prompt_tokens":(\d{1,15}),"completion_tokens":(\d{1,15})[,}]')
# The Responses API's usage as OpenAI writes it (its cached tokens are among its input tokens).
_COMPACT_RESPONSES_USAGE: Final = re.compile(
    rb'"usage":\{"input_tokens":(\d{1,15}),"input_tokens_details":\{"cached_tokens":(\d{1,15})\},"output_tokens":(\d{1,15})[,}]'
)
_MODEL: Final = re.compile(rb'"model"\s*:\s*"([^"\\]{1,200})"')
# OpenAI's breakdown of the prompt, after the two counts read above (no nested object in it).
_PROMPT_DETAILS: Final = re.compile(rb'"prompt_tokens_details"\s*:\s*\{([^{}]{0,512})\}')
_CACHED: Final = re.compile(rb'"cached_tokens"\s*:\s*(\d{1,15})')
_CACHE_WRITE: Final = re.compile(rb'"cache_write_tokens"\s*:\s*(\d{1,15})')
# How far past the two counts OpenAI's prompt breakdown may start (``total_tokens`` comes first).
_DETAILS_SPAN: Final = 256

#: What a usage object states: prompt and completion tokens (``None``: not stated), and the prompt
#: tokens read from and written to the provider's prompt cache (0 when it says nothing of them).
Usage = tuple[int | None, int, int, int]


class LastChunks(deque[bytes]):
    """The last chunks a relay sent (references), the oldest dropped as one comes: a deque
    bounded at ``maxlen`` (made as ``LastChunks(maxlen=LAST_CHUNKS)``).

    :attr:`add` is the deque's own ``append``: the relay keeps a chunk with nothing of the
    router's own per chunk (docs/performance.md). The relay counts the chunks itself."""

    __slots__ = ()

    add = deque.append

    def after(self, count: int) -> bytes:
        """The last ``count`` chunks kept (all of them when fewer), joined."""
        if count <= 0:
            return b""
        return b"".join(self) if count >= len(self) else b"".join(list(self)[-count:])


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


def _counts(usage: object) -> tuple[int | None, int | None, int, int]:
    """``(prompt, completion, cache reads, cache writes)`` a usage object states, in OpenAI's words,
    Anthropic's (whose prompt is its input plus the cache's reads and writes) or the Responses
    API's (``input_tokens`` already counts its ``input_tokens_details.cached_tokens``). OpenAI's
    embeddings state only ``prompt_tokens``: a measured usage with no output."""
    if not isinstance(usage, dict):
        return None, None, 0, 0
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        prompt = plausible_tokens(usage.get("prompt_tokens"))
        completion = plausible_tokens(usage.get("completion_tokens")) if "completion_tokens" in usage else 0
        if prompt is None or completion is None:
            return None, None, 0, 0
        details = usage.get("prompt_tokens_details")
        if not isinstance(details, dict):
            return prompt, completion, 0, 0
        read = plausible_tokens(details.get("cached_tokens")) or 0
        written = plausible_tokens(details.get("cache_write_tokens")) or 0
        return prompt, completion, min(read, prompt), min(written, prompt - min(read, prompt))
    parts = [plausible_tokens(usage.get(key)) for key in _ANTHROPIC_INPUT]
    if parts[0] is None:
        return None, plausible_tokens(usage.get("output_tokens")), 0, 0
    prompt = sum(part for part in parts if part is not None)
    details = usage.get("input_tokens_details")  # the Responses API's: its input counts them in
    if isinstance(details, dict):
        read = min(plausible_tokens(details.get("cached_tokens")) or 0, prompt)
        written = plausible_tokens(details.get("cache_write_tokens")) or 0  # a translated Anthropic answer's
        return prompt, plausible_tokens(usage.get("output_tokens")), read, min(written, prompt - read)
    return prompt, plausible_tokens(usage.get("output_tokens")), parts[2] or 0, parts[1] or 0


def _cached(data: bytes, after: int, prompt: int) -> tuple[int, int]:
    """``(cache reads, cache writes)`` of OpenAI's ``prompt_tokens_details`` following the counts
    that end at ``after`` (``(0, 0)`` without one), each within the prompt."""
    details = _PROMPT_DETAILS.search(data, after, after + _DETAILS_SPAN + 512)
    if details is None or details.start() > after + _DETAILS_SPAN:
        return 0, 0
    inner = details[1]
    read = _CACHED.search(inner)
    written = _CACHE_WRITE.search(inner)
    cached = min(int(read[1]), prompt) if read is not None else 0
    return cached, min(int(written[1]), prompt - cached) if written is not None else 0


def find_usage(data: bytes) -> Usage | None:
    """``(prompt_tokens, completion_tokens, cache reads, cache writes)`` of the last ``"usage"``
    object in ``data``.

    OpenAI states both in one object. An Anthropic stream states the input in ``message_start``
    and the output in the final ``message_delta`` (recent API versions repeat the input there):
    the completion is the last one stated, the prompt the last one stated at or before it
    (``None`` when the tail no longer holds one), and the cache's counts those stated with that
    prompt. OpenAI's usual order of keys is read with one regular expression (and its prompt
    breakdown with another); anything else is decoded as JSON.
    """
    at = data.rfind(b'"usage"')
    if at >= 0 and (  # OpenAI's own order of keys
        (usual := _COMPACT_USAGE.match(data, at)) is not None or (usual := _USUAL_USAGE.match(data, at)) is not None
    ):
        given, taken = int(usual[1]), int(usual[2])  # digits: plausible unless too large
        if given > MAX_PLAUSIBLE_TOKENS or taken > MAX_PLAUSIBLE_TOKENS:
            return None
        return given, taken, *_cached(data, usual.end(), given)
    if at < 0:  # no usage at all (a stream that states none): the bytes are not searched again
        return None
    if (responses := _COMPACT_RESPONSES_USAGE.match(data, at)) is not None:  # the Responses API's order
        given, cached, taken = int(responses[1]), int(responses[2]), int(responses[3])
        if given > MAX_PLAUSIBLE_TOKENS or taken > MAX_PLAUSIBLE_TOKENS:
            return None
        return given, taken, min(cached, given), 0
    end = at + 7  # the search below finds this one first
    completion: int | None = None
    while True:
        at = data.rfind(b'"usage"', 0, end)
        if at < 0:
            return None if completion is None else (None, completion, 0, 0)
        end = at
        colon = data.find(b":", at + 7, at + 32)
        if colon < 0:
            continue
        text = data[colon + 1 : colon + 1 + _USAGE_SPAN].decode("utf-8", "replace").lstrip()
        try:
            usage, _ = _DECODER.raw_decode(text)
        except ValueError:
            continue
        prompt, stated, read, written = _counts(usage)
        if completion is None:
            completion = stated
        if completion is not None and prompt is not None:
            return prompt, completion, read, written


def count_tokens(data: bytes, prompt_estimate: int | Callable[[], int], chunks: int | None = None) -> TokenCount:
    """Tokens used by a response whose body (or stream tail) is ``data``.

    ``chunks`` is the number of chunks a stream had (``None`` for a whole body): without a
    ``usage`` object, a stream counts one token per chunk and a body four characters per token,
    and the prompt is the request's estimate (a callable: only computed then). A usage that states
    only the completion takes the prompt from the estimate.
    """
    found = find_usage(data)
    if found is not None and found[0] is not None:
        return TokenCount(found[0], found[1], True, found[2], found[3])
    return estimated(found, data, prompt_estimate() if callable(prompt_estimate) else prompt_estimate, chunks)


def estimated(found: Usage | None, data: bytes, prompt: int, chunks: int | None) -> TokenCount:
    """:func:`count_tokens` where ``found`` (what :func:`find_usage` read in ``data``) states no
    prompt: ``prompt`` is the request's estimate; the completion is the one stated, else estimated."""
    if found is not None:
        return TokenCount(prompt, found[1], True)
    if chunks is not None:
        completion = max(1, chunks)
    else:
        completion = max(1, (len(data) - _ENVELOPE_BYTES) // _CHARS_PER_TOKEN)
    return TokenCount(prompt, completion, False)


def response_model(body: bytes) -> str | None:
    """The ``model`` an upstream's answer (a body, or a stream's first chunk) says it came from
    (traces report it: an alias such as ``gpt-4o`` is answered by a dated model)."""
    found = _MODEL.search(body, 0, 8192)
    return found[1].decode("utf-8", "replace") if found is not None else None
