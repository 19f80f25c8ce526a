"""An answer as the response cache keeps it: shape-neutral, so one entry answers both shapes.

A client may ask the same thing once with ``stream: true`` and once without; the entry keeps
what the answer *says* (its text, its tool calls, why it finished, its usage, the model and id
the upstream gave it) rather than the bytes it came in, and ``replay_shapes.py`` writes it again as one
JSON body or as an event stream, in the route's protocol. Read here from what the client was
sent, in each of the four shapes (OpenAI's and Anthropic's, whole and streamed).

Only a complete answer is read into an entry: a stream must have ended as its protocol ends one
(``[DONE]``; ``message_stop``) after a finish reason, a whole answer must carry its finish
reason; one choice only; no refusal and no content filter's stop; nothing the entry cannot
say again (Anthropic's thinking blocks, say). Anything else reads as ``None``: not stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from asgi_router.protocols.sse import EventSplitter

__all__ = ["StoredAnswer", "ToolUse", "read_answer"]

#: Finish reasons that are not an answer worth repeating.
_NOT_STORED_FINISH: Final = frozenset({"content_filter", "refusal"})


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call of an answer: its id, the tool's name, its arguments as JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class StoredAnswer:
    """What an answer says, whatever shape it came in (see the module docstring)."""

    id: str
    model: str
    text: str
    tools: tuple[ToolUse, ...]
    #: Why it finished, in the route protocol's own words (``stop``; ``end_turn``).
    finish: str
    prompt_tokens: int | None
    completion_tokens: int | None
    #: The candidate that produced it (the router's model header on a hit), its cost (what a hit saves)
    #: and when it was stored (Unix seconds: a hit's ``age``).
    candidate: str = ""
    cost_usd: float = 0.0
    stored_at: float = 0.0

    @property
    def tokens(self) -> int:
        return (self.prompt_tokens or 0) + (self.completion_tokens or 0)

    def dumps(self) -> bytes:
        """The entry as stored (in memory or in Redis): compact JSON."""
        return json.dumps(
            [
                self.id,
                self.model,
                self.text,
                [[tool.id, tool.name, tool.arguments] for tool in self.tools],
                self.finish,
                self.prompt_tokens,
                self.completion_tokens,
                self.candidate,
                self.cost_usd,
                self.stored_at,
            ],
            separators=(",", ":"),
            ensure_ascii=False,
        ).encode()

    @classmethod
    def loads(cls, raw: bytes) -> StoredAnswer | None:
        """An entry read back; ``None`` for bytes that are not one (another version's, say)."""
        try:
            fields = json.loads(raw)
            (answer_id, model, text, tools, finish, prompt, completion, candidate, cost, stored_at) = fields
            return cls(
                str(answer_id),
                str(model),
                str(text),
                tuple(ToolUse(str(i), str(n), str(a)) for i, n, a in tools),
                str(finish),
                prompt if isinstance(prompt, int) else None,
                completion if isinstance(completion, int) else None,
                str(candidate),
                float(cost),
                float(stored_at),
            )
        except (ValueError, TypeError):
            return None


def read_answer(body: bytes, *, anthropic: bool, stream: bool) -> StoredAnswer | None:
    """The answer the client was sent as ``body``, when it is complete and repeatable."""
    try:
        if stream:
            return _anthropic_stream(body) if anthropic else _openai_stream(body)
        data = json.loads(body)
        if not isinstance(data, dict):
            return None
        return _anthropic_whole(data) if anthropic else _openai_whole(data)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError):  # not an answer's shape
        return None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _answer(
    data: dict[str, Any], text: str, tools: list[ToolUse], finish: object, prompt: object, completion: object
) -> StoredAnswer | None:
    if not isinstance(finish, str) or not finish or finish in _NOT_STORED_FINISH:
        return None
    return StoredAnswer(
        str(data.get("id") or ""),
        str(data.get("model") or ""),
        text,
        tuple(tools),
        finish,
        _int(prompt),
        _int(completion),
    )


def _openai_whole(data: dict[str, Any]) -> StoredAnswer | None:
    choices = data["choices"]
    if len(choices) != 1:
        return None
    choice = choices[0]
    message = choice["message"]
    if message.get("refusal") or message.get("audio") is not None:
        return None
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return None
    tools = [
        ToolUse(call["id"], call["function"]["name"], call["function"]["arguments"])
        for call in message.get("tool_calls") or ()
    ]
    usage = data.get("usage") or {}
    return _answer(
        data,
        content or "",
        tools,
        choice.get("finish_reason"),
        usage.get("prompt_tokens"),
        usage.get("completion_tokens"),
    )


def _events(body: bytes) -> list[bytes]:
    splitter = EventSplitter()
    events = splitter.feed(body)
    return [] if splitter.pending else events


def _openai_stream(body: bytes) -> StoredAnswer | None:
    events = _events(body)
    if not events or events[-1] != b"[DONE]":
        return None
    first: dict[str, Any] = {}
    pieces: list[str] = []
    calls: dict[int, list[str]] = {}
    finish: object = None
    usage: dict[str, Any] = {}
    for event in events[:-1]:
        chunk = json.loads(event)
        if "error" in chunk:
            return None
        first = first or chunk
        if chunk.get("usage"):
            usage = chunk["usage"]
        choices = chunk.get("choices") or ()
        if len(choices) > 1 or (choices and choices[0].get("index", 0) != 0):
            return None
        for choice in choices:
            delta = choice.get("delta") or {}
            if delta.get("refusal"):
                return None
            if delta.get("content"):
                pieces.append(delta["content"])
            for call in delta.get("tool_calls") or ():
                kept = calls.setdefault(call["index"], ["", "", ""])
                function = call.get("function") or {}
                kept[0] += call.get("id") or ""
                kept[1] += function.get("name") or ""
                kept[2] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    tools = [ToolUse(*calls[index]) for index in sorted(calls)]
    return _answer(first, "".join(pieces), tools, finish, usage.get("prompt_tokens"), usage.get("completion_tokens"))


def _anthropic_whole(data: dict[str, Any]) -> StoredAnswer | None:
    texts: list[str] = []
    tools: list[ToolUse] = []
    for block in data["content"]:
        if block["type"] == "text":
            texts.append(block["text"])
        elif block["type"] == "tool_use":
            tools.append(ToolUse(block["id"], block["name"], json.dumps(block["input"], ensure_ascii=False)))
        else:  # thinking, server tools...: not said again
            return None
    usage = data.get("usage") or {}
    text = "".join(texts)
    return _answer(data, text, tools, data.get("stop_reason"), usage.get("input_tokens"), usage.get("output_tokens"))


def _anthropic_stream(body: bytes) -> StoredAnswer | None:
    events = [json.loads(event) for event in _events(body)]
    if not events or events[-1].get("type") != "message_stop":
        return None
    message: dict[str, Any] = {}
    blocks: dict[int, list[str]] = {}
    finish: object = None
    prompt: object = None
    completion: object = None
    for event in events:
        kind = event.get("type")
        if kind == "message_start":
            message = event["message"]
            prompt = (message.get("usage") or {}).get("input_tokens")
            completion = (message.get("usage") or {}).get("output_tokens")
        elif kind == "content_block_start":
            block = event["content_block"]
            if block["type"] == "text":
                blocks[event["index"]] = ["text", block.get("text", "")]
            elif block["type"] == "tool_use":
                blocks[event["index"]] = ["tool", "", block["id"], block["name"]]
            else:
                return None
        elif kind == "content_block_delta":
            delta = event["delta"]
            kept = blocks[event["index"]]
            if delta["type"] == "text_delta":
                kept[1] += delta["text"]
            elif delta["type"] == "input_json_delta":
                kept[1] += delta["partial_json"]
            else:
                return None
        elif kind == "message_delta":
            finish = event["delta"].get("stop_reason")
            completion = (event.get("usage") or {}).get("output_tokens", completion)
        elif kind == "error":
            return None
    text = "".join(kept[1] for _, kept in sorted(blocks.items()) if kept[0] == "text")
    tools = [ToolUse(kept[2], kept[3], kept[1] or "{}") for _, kept in sorted(blocks.items()) if kept[0] == "tool"]
    return _answer(message, text, tools, finish, prompt, completion)
