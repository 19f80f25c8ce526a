"""Continuing a chat completion stream that broke: what was said, how to ask for the rest, and
how the rest is spliced onto what the client already has.

:func:`said_so_far` reads the chat-completion chunks a client was sent (whole events only: the
relay holds back a partial one when a continuation is possible) and says the assistant text so
far, the stream's ``id`` and ``created``, or why the stream cannot be continued: only plain
text of one choice is (no tool call started, ``n`` = 1, no ``logprobs``, no reasoning content),
since no upstream API continues a half-written tool call or a second choice.

:func:`continuation_request` is the original request plus a trailing assistant message holding
that text, in the shape the candidate's ``resume`` names: ``prefill`` as it is (translated for an
Anthropic member, its trailing whitespace stripped because the Messages API refuses it),
``prefix`` with ``"prefix": true`` on the message (Mistral, DeepSeek), and
``continue_final_message`` with vLLM's two flags. ``max_tokens`` and ``max_completion_tokens``
shrink by what was already generated (estimated), so the whole answer keeps the client's cap.

:class:`Splice` rewrites the continuation's events so that the client sees one stream: the
first chunk's ``id`` and ``created`` on every chunk (each keeps its own ``model``), the
continuation's ``role`` dropped (a role-only delta whole), nothing after its ``data: [DONE]``,
the whitespace stripped from the prefill not said twice, and the usage chunk summing both calls
(the broken call's part estimated).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Final

from asgi_router.config.provider_settings import ResumeMode
from asgi_router.protocols.sse import EventSplitter

__all__ = ["Said", "Splice", "Splicing", "continuation_request", "event_json", "said_so_far"]

_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
#: Delta keys that carry something other than plain text (no API continues them).
_NOT_TEXT: Final = ("tool_calls", "function_call", "reasoning_content", "reasoning", "audio")


@dataclass(frozen=True, slots=True)
class Said:
    """What a broken stream had sent: its text, the ``id`` and ``created`` of its chunks (chat
    completions), and the index of its open text block (the Messages API)."""

    text: str
    id: object
    created: object
    block: int = 0


def said_so_far(sent: bytes) -> Said | str:
    """The text the complete chat-completion events in ``sent`` carried, or why the stream
    cannot be continued (a sentence)."""
    text: list[str] = []
    first_id: object = None
    created: object = None
    for data in EventSplitter().feed(sent + b"\n\n"):
        if data == b"[DONE]":
            return "the stream had ended"
        try:
            chunk = json.loads(data)
        except ValueError:
            return "an event is not JSON"
        if not isinstance(chunk, dict):
            return "an event is not a chunk"
        if first_id is None:
            first_id, created = chunk.get("id"), chunk.get("created")
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            return "an event is not a chunk"
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                return "more than one choice"
            if choice.get("logprobs") is not None:
                return "logprobs were asked for"
            if choice.get("finish_reason") is not None:
                return "the answer had finished"
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict) or any(delta.get(key) for key in _NOT_TEXT):
                return "a tool call or reasoning had started"
            content = delta.get("content")
            if isinstance(content, str):
                text.append(content)
    said = "".join(text)
    return Said(said, first_id, created) if said else "no text had been sent"


def continuation_request(
    payload: dict[str, Any], text: str, mode: ResumeMode, *, anthropic: bool, sent_tokens: int
) -> tuple[dict[str, Any], str]:
    """The request asking a candidate to continue ``text``, and the whitespace stripped off its
    end (an Anthropic member's prefill may not end in whitespace; the continuation will say it
    again, and :class:`Splice` drops it there)."""
    prefill = text.rstrip() if anthropic else text
    message: dict[str, Any] = {"role": "assistant", "content": prefill}
    continued = dict(payload)
    if mode == "prefix":
        message["prefix"] = True
    elif mode == "continue_final_message":
        continued["continue_final_message"] = True
        continued["add_generation_prompt"] = False
    messages = payload.get("messages")
    continued["messages"] = [*(messages if isinstance(messages, list) else ()), message]
    for cap in ("max_tokens", "max_completion_tokens"):
        value = payload.get(cap)
        if isinstance(value, int) and not isinstance(value, bool):
            continued[cap] = max(1, value - sent_tokens)
    return continued, text[len(prefill) :]


class Splicing(ABC):
    """What both protocols' splices share: the whitespace the prefill lost, not said twice; the
    calls before this one's tokens, added to its usage; whether the continuation's first content
    is still to come. A subclass turns each complete event's data into the client's bytes."""

    __slots__ = ("_head", "_prior", "_skip")

    def __init__(self, skip: str, prior: tuple[int, int]) -> None:
        #: Whitespace the prefill lost, to drop from the continuation's first text.
        self._skip = skip
        #: ``(prompt, completion)`` tokens of the calls before this one (estimated), added to its usage.
        self._prior = prior
        #: Still before the continuation's first content (its opening is dropped).
        self._head = True

    def feed(self, events: bytes) -> bytes:
        """The client's bytes for ``events`` (complete events only)."""
        out: list[bytes] = []
        for data in EventSplitter().feed(events):
            spliced = self._event(data)
            if spliced is not None:
                out.append(spliced)
        return b"".join(out)

    @abstractmethod
    def _event(self, data: bytes) -> bytes | None:
        """The client's bytes for one event's ``data``; ``None`` to drop it."""

    def _unskipped(self, text: str) -> str:
        """``text`` without the part of the lost whitespace it starts with (said already)."""
        skip, same = self._skip, 0
        while same < len(text) and same < len(skip) and text[same] == skip[same]:
            same += 1
        self._skip = skip[same:] if same == len(text) else ""
        return text[same:]


def event_json(data: bytes) -> dict[str, Any] | None:
    """An event's data as a JSON object, or ``None`` when it is none (nothing a client could use)."""
    try:
        event = json.loads(data)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


class Splice(Splicing):
    """Rewrites a continuation's chat-completion events into the stream the client already has."""

    __slots__ = ("_created", "_done", "_id")

    def __init__(self, said: Said, skip: str, prior: tuple[int, int]) -> None:
        super().__init__(skip, prior)
        self._id = said.id
        self._created = said.created
        #: ``data: [DONE]`` went out: the stream is over, whatever the continuation says after.
        self._done = False

    def _event(self, data: bytes) -> bytes | None:
        if self._done:
            return None
        if data == b"[DONE]":
            self._done = True
            return b"data: [DONE]\n\n"
        chunk = event_json(data)
        if chunk is None or not self._rewrite(chunk):
            return None
        return b"data: " + _COMPACT.encode(chunk).encode() + b"\n\n"

    def _rewrite(self, chunk: dict[str, Any]) -> bool:
        """Rewrite ``chunk`` in place; False to drop it."""
        if "error" in chunk:
            return True  # the relay reads it as a break of this call
        chunk["id"], chunk["created"] = self._id, self._created
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            prompt, completion = self._prior
            for key, add in (("prompt_tokens", prompt), ("completion_tokens", completion)):
                if isinstance(usage.get(key), int):
                    usage[key] += add
            if isinstance(usage.get("total_tokens"), int):
                usage["total_tokens"] += prompt + completion
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return True
        delta = choices[0].get("delta") if isinstance(choices[0], dict) else None
        if not isinstance(delta, dict):
            return True
        if not self._head:  # the client has its role already: a later one is said once only
            if delta.pop("role", None) is not None and not delta and choices[0].get("finish_reason") is None:
                return len(choices) > 1 or chunk.get("usage") is not None
            return True
        content = delta.get("content")
        if isinstance(content, str) and content and self._skip:
            delta["content"] = content = self._unskipped(content)
        if content or choices[0].get("finish_reason") is not None or any(key in delta for key in _NOT_TEXT):
            self._head = False
            delta.pop("role", None)
            return True
        # Role-only (or emptied) first deltas: the client has its role already.
        return "usage" in chunk and chunk["usage"] is not None
