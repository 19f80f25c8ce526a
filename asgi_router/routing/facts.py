"""What routing may know about a request before any upstream is chosen: :class:`RequestFacts`.

Rules, the context-window pre-check, the ``cost`` strategy and budget accounting all ask the
same few questions of the request (how many prompt tokens, any images, any tools, how many output
tokens may it ask for). They are answered here, lazily and at most once per request, so a request
to an ``order`` group with no catalog and no rules never pays for a token estimate.

The token estimate is a heuristic, not a tokenizer: about four characters per token over message
text, tool definitions and tool calls, a few tokens per message, and a fixed cost per image.
It leans low on purpose (CJK text runs nearer one character per token): the context pre-check
skips a candidate only when even this estimate does not fit, and an upstream's own
"context exceeded" answer still fails over (see ``classify.refine_client_error``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["CHARS_PER_TOKEN", "EMPTY_FACTS", "IMAGE_TOKENS", "MESSAGE_OVERHEAD_TOKENS", "RequestFacts"]

#: Characters of text counted as one token.
CHARS_PER_TOKEN: Final = 4
#: Tokens a chat message costs beyond its text (role, separators).
MESSAGE_OVERHEAD_TOKENS: Final = 4
#: Tokens counted per image part (OpenAI's cost of a high-detail 1024x1024 image).
IMAGE_TOKENS: Final = 765

_RELEASED: Final[Mapping[str, Any]] = {}
_IMAGE_PARTS: Final = frozenset({"image_url", "input_image", "image"})


def _text_length(content: object) -> tuple[int, int]:
    """Characters of text and number of images in one message's ``content``."""
    if isinstance(content, str):
        return len(content), 0
    chars = images = 0
    if isinstance(content, list):
        for part in content:
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind in _IMAGE_PARTS:
                images += 1
            text = part.get("text")
            if isinstance(text, str):
                chars += len(text)
    return chars, images


def _tool_call_length(calls: object) -> int:
    chars = 0
    if isinstance(calls, list):
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict):
                for key in ("name", "arguments"):
                    value = function.get(key)
                    if isinstance(value, str):
                        chars += len(value)
    return chars


class RequestFacts:
    """Lazily computed facts about one chat request (body and inbound headers)."""

    __slots__ = ("_estimate", "_headers", "_payload")

    def __init__(self, payload: Mapping[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
        self._payload = payload
        self._headers = headers
        self._estimate: tuple[int, int] | None = None

    @classmethod
    def known(
        cls, payload: Mapping[str, Any], headers: Sequence[tuple[bytes, bytes]], prompt_tokens: int, images: int
    ) -> RequestFacts:
        """Facts whose estimate is already known (a recorded request replayed: its messages are
        not kept, only what was measured of them)."""
        facts = cls(payload, headers)
        facts._estimate = (prompt_tokens, images)
        return facts

    def _measure(self) -> tuple[int, int]:
        if self._estimate is None:
            chars = tokens = images = 0
            messages = self._payload.get("messages")
            if isinstance(messages, list):
                for message in messages:
                    if not isinstance(message, dict):
                        continue
                    tokens += MESSAGE_OVERHEAD_TOKENS
                    content = message.get("content")
                    if type(content) is str:  # the usual message: as _text_length says, no call
                        chars += len(content)
                    else:
                        text, pictures = _text_length(content)
                        chars += text
                        images += pictures
                    calls = message.get("tool_calls")
                    if calls is not None:
                        chars += _tool_call_length(calls)
            prompt = self._payload.get("prompt")  # legacy /v1/completions
            if isinstance(prompt, str):
                chars += len(prompt)
            tools = self._payload.get("tools") or self._payload.get("functions")
            if isinstance(tools, list) and tools:
                chars += len(json.dumps(tools, separators=(",", ":")))
            tokens += -(-chars // CHARS_PER_TOKEN) + images * IMAGE_TOKENS
            self._estimate = (tokens, images)
        return self._estimate

    def release(self, *, keep_estimate: bool) -> None:
        """Drop the payload (a committed stream holds on to nothing it no longer reads).

        ``keep_estimate`` computes :attr:`prompt_tokens` first, for the bookkeeping that
        reads it when the relay ends; every other fact reads as absent afterwards.
        """
        if keep_estimate:
            self._measure()
        self._payload = _RELEASED

    @property
    def prompt_tokens(self) -> int:
        """Estimated prompt tokens (text, tools, per-message overhead and images)."""
        return self._measure()[0]

    @property
    def images(self) -> bool:
        """Whether any message carries an image part."""
        return self._measure()[1] > 0

    @property
    def tools(self) -> bool:
        """Whether the request offers tools (or legacy functions)."""
        tools = self._payload.get("tools") or self._payload.get("functions")
        return isinstance(tools, list) and bool(tools)

    @property
    def stream(self) -> bool:
        return self._payload.get("stream") is True

    @property
    def reasoning(self) -> bool:
        """Whether the request asks for reasoning (``reasoning_effort`` or a ``reasoning`` object)."""
        return self._payload.get("reasoning_effort") is not None or self._payload.get("reasoning") is not None

    @property
    def max_tokens(self) -> int | None:
        """The output tokens the request may use (``max_completion_tokens`` or ``max_tokens``)."""
        for key in ("max_completion_tokens", "max_tokens"):
            value = self._payload.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return None

    def header(self, name: bytes) -> str | None:
        """The first inbound header called ``name`` (lowercase), decoded as latin-1."""
        for key, value in self._headers:
            if key == name:
                return value.decode("latin-1")
        return None

    def metadata(self, key: str) -> str | None:
        """The request's ``metadata[key]`` when it is a string."""
        metadata = self._payload.get("metadata")
        if isinstance(metadata, dict):
            value = metadata.get(key)
            if isinstance(value, str):
                return value
        return None


#: Facts about an empty request: what unit tests and callers without a body resolve with.
EMPTY_FACTS: Final = RequestFacts({})
