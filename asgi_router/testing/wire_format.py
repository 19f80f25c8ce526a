"""The seam between a fake upstream and the protocol it speaks.

:class:`~asgi_router.testing.FakeUpstream` plays replies (``reply.py``); a :class:`Wire` spells
them in one protocol: which requests are chat requests, what the model and the ``stream`` flag
are, what the real API would refuse, and the bytes of an answer, a stream and an error. A reply
that answers is first made into an :class:`ScriptedAnswer` (its text, its tool call, its token counts),
which says what the model said without saying how: each wire spells the same answer its own way.
``FakeUpstream(kind=...)`` picks the wire from :data:`~asgi_router.testing.fake_upstream.WIRES`:
a new protocol is one more module and one more entry, and every reply, script and hit works
with it unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from asgi_router.testing.hits import Hit

__all__ = ["MAX_CHOICES", "JSONWire", "ScriptedAnswer", "ToolUse", "Wire", "choices_asked", "content_words", "pieces"]

_WORD: Final = re.compile(r"\s*\S+")

#: The most choices a fake answers one request with (OpenAI's own limit on ``n``).
MAX_CHOICES: Final = 128


def choices_asked(body: Any) -> int:
    """The choices a request asks for: OpenAI's ``n`` when it is a whole number from 1 to
    :data:`MAX_CHOICES`, else one (the real API refuses the rest; the fake is lenient)."""
    n = body.get("n") if isinstance(body, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= MAX_CHOICES else 1


@dataclass(frozen=True, slots=True)
class ToolUse:
    """A tool call an answer makes: ``arguments`` is a JSON object's text, sent in ``pieces``
    when streamed; ``id`` ``None`` lets the wire use its own."""

    name: str
    arguments: str
    pieces: Sequence[str]
    id: str | None = None


@dataclass(frozen=True, slots=True)
class ScriptedAnswer:
    """What a successful answer says: ``text`` (streamed as ``pieces``), maybe a tool call, and
    the token counts (in the protocol's own names); ``choices`` copies of it where the request
    asked for several (OpenAI's ``n``)."""

    model: str
    text: str
    pieces: Sequence[str]
    usage: Mapping[str, int]
    tool: ToolUse | None = None
    #: How many choices to answer (OpenAI's ``n``; a protocol without it answers one).
    choices: int = 1
    #: The request's parsed body (a wire that stores what it answered keeps its input).
    request: Any = None


class Wire(Protocol):
    """How one protocol spells requests and answers."""

    #: The ``kind`` a provider entry names (``FakeUpstream(kind=...)``).
    kind: str
    #: The path prefix of the API (a base URL ends in it).
    base_path: str
    #: Extra fields of a provider entry for this protocol (``FakeUpstream.provider()``).
    provider_fields: Mapping[str, str]
    #: Headers on every answer (a reply's own ``headers`` win).
    response_headers: Mapping[str, str]

    def is_chat(self, method: str, path: str) -> bool:
        """Whether this request asks for a completion (and so follows the scripts)."""
        ...

    def is_model_list(self, method: str, path: str) -> bool:
        """Whether this request lists the models."""
        ...

    def request(self, body: Any) -> tuple[str, bool]:
        """The model asked for (``""`` if none) and whether the answer is to be streamed."""
        ...

    def refusal(self, hit: Hit) -> tuple[int, str] | None:
        """The status and message the real API would refuse this chat request with (a field
        or header it requires is missing), or ``None``."""
        ...

    def usage(self, body: Any, completion_tokens: int) -> dict[str, int]:
        """The token counts an answer reports when its reply sets none."""
        ...

    def completion(self, answer: ScriptedAnswer) -> bytes:
        """A whole (non-streamed) answer's JSON body."""
        ...

    def stream(self, body: Any, answer: ScriptedAnswer) -> list[bytes]:
        """Every event of a streamed answer, in order, the end-of-stream marker included."""
        ...

    def error(self, code: int, message: str) -> dict[str, Any]:
        """The protocol's error body for status ``code``."""
        ...

    def stream_error(self, code: int, message: str) -> bytes:
        """The event that reports an error in the middle of a stream (one the status would
        have named, had it not been sent already)."""
        ...

    def unknown_route(self, method: str, path: str) -> dict[str, Any]:
        """The protocol's 404 body for a request it has no route for."""
        ...

    def model_list(self, ids: Sequence[str]) -> dict[str, Any]:
        """The body listing ``ids`` as models."""
        ...


class JSONWire:
    """What the JSON chat APIs share: the model and ``stream`` flag are fields of the request's
    body, and ``GET .../models`` lists the models."""

    def is_model_list(self, method: str, path: str) -> bool:
        return method == "GET" and path.endswith("/models")

    def request(self, body: Any) -> tuple[str, bool]:
        if not isinstance(body, dict):
            return "", False
        model = body.get("model")
        return (model if isinstance(model, str) else ""), body.get("stream") is True


def pieces(text: str, chunks: int | None) -> list[str]:
    """``text`` as a stream's content chunks: one per word (each keeping the space before it),
    or ``chunks`` pieces of about equal length."""
    if chunks is None:
        return _WORD.findall(text)
    return [text[len(text) * index // chunks : len(text) * (index + 1) // chunks] for index in range(chunks)]


def content_words(messages: Any) -> int:
    """Words in the text of ``messages`` (string contents and text parts): a rough token count."""
    if not isinstance(messages, list):
        return 0
    words = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            words += len(content.split())
        elif isinstance(content, list):
            words += sum(
                len(part["text"].split())
                for part in content
                if isinstance(part, dict) and isinstance(part.get("text"), str)
            )
    return words
