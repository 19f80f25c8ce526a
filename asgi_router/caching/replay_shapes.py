"""A stored answer written again in the shape asked: one JSON body, or an event stream.

The entry (``stored_answer.py``) keeps what the answer said; here it becomes what the route's
protocol sends. OpenAI's stream: a role chunk, the text in pieces, each tool call, the finish,
the ``usage`` chunk when ``stream_options.include_usage`` asks for it, then ``[DONE]``.
Anthropic's: ``message_start``, a block per text and tool use with its deltas, ``message_delta``
with the stop reason and usage, ``message_stop``. The ids and model are the entry's, as the
upstream gave them (a client that compares ids across answers sees the same answer twice).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, Final

from asgi_router.caching.stored_answer import StoredAnswer

__all__ = ["PIECE_CHARS", "render"]

#: The most characters of text one replayed delta carries: a client shows the answer as it
#: shows any stream, a few words at a time, without an event per character.
PIECE_CHARS: Final = 64

_JSON: Final = (b"content-type", b"application/json")
_SSE: Final = (b"content-type", b"text/event-stream; charset=utf-8")


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _pieces(text: str) -> Iterator[str]:
    for start in range(0, len(text), PIECE_CHARS):
        yield text[start : start + PIECE_CHARS]


def render(
    answer: StoredAnswer, *, anthropic: bool, stream: bool, include_usage: bool
) -> tuple[tuple[bytes, bytes], bytes]:
    """The content-type header and the body that say ``answer`` in the shape asked."""
    if anthropic:
        return (_SSE, _anthropic_stream(answer)) if stream else (_JSON, _dumps(_anthropic_message(answer)))
    if stream:
        return _SSE, _openai_stream(answer, include_usage)
    return _JSON, _dumps(_openai_completion(answer))


def _openai_usage(answer: StoredAnswer) -> dict[str, int] | None:
    if answer.prompt_tokens is None or answer.completion_tokens is None:
        return None
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
    }


def _openai_completion(answer: StoredAnswer) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text if answer.text or not answer.tools else None}
    if answer.tools:
        message["tool_calls"] = [
            {"id": tool.id, "type": "function", "function": {"name": tool.name, "arguments": tool.arguments}}
            for tool in answer.tools
        ]
    completion: dict[str, Any] = {
        "id": answer.id,
        "object": "chat.completion",
        "created": int(answer.stored_at or time.time()),
        "model": answer.model,
        "choices": [{"index": 0, "message": message, "finish_reason": answer.finish, "logprobs": None}],
    }
    usage = _openai_usage(answer)
    if usage is not None:
        completion["usage"] = usage
    return completion


def _openai_stream(answer: StoredAnswer, include_usage: bool) -> bytes:
    head = {"id": answer.id, "object": "chat.completion.chunk", "created": int(answer.stored_at), "model": answer.model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return b"data: " + _dumps({**head, "choices": [choice]}) + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    out.extend(chunk({"content": piece}) for piece in _pieces(answer.text))
    for index, tool in enumerate(answer.tools):
        call = {"index": index, "id": tool.id, "type": "function", "function": {"name": tool.name, "arguments": ""}}
        out.append(chunk({"tool_calls": [call]}))
        out.extend(
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(tool.arguments)
        )
    out.append(chunk({}, answer.finish))
    usage = _openai_usage(answer)
    if include_usage and usage is not None:
        out.append(b"data: " + _dumps({**head, "choices": [], "usage": usage}) + b"\n\n")
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def _anthropic_usage(answer: StoredAnswer) -> dict[str, int]:
    return {"input_tokens": answer.prompt_tokens or 0, "output_tokens": answer.completion_tokens or 0}


def _anthropic_message(answer: StoredAnswer) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": answer.text}] if answer.text or not answer.tools else []
    content.extend(
        {"type": "tool_use", "id": tool.id, "name": tool.name, "input": json.loads(tool.arguments or "{}")}
        for tool in answer.tools
    )
    return {
        "id": answer.id,
        "type": "message",
        "role": "assistant",
        "model": answer.model,
        "content": content,
        "stop_reason": answer.finish,
        "stop_sequence": None,
        "usage": _anthropic_usage(answer),
    }


def _anthropic_stream(answer: StoredAnswer) -> bytes:
    def event(data: dict[str, Any]) -> bytes:
        name: str = data["type"]
        return b"event: " + name.encode() + b"\ndata: " + _dumps(data) + b"\n\n"

    start = {**_anthropic_message(answer), "content": [], "stop_reason": None}
    start["usage"] = {"input_tokens": answer.prompt_tokens or 0, "output_tokens": 0}
    out = [event({"type": "message_start", "message": start})]
    index = 0
    if answer.text or not answer.tools:
        out.append(event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}))
        out.extend(
            event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}})
            for piece in _pieces(answer.text)
        )
        out.append(event({"type": "content_block_stop", "index": 0}))
        index = 1
    for offset, tool in enumerate(answer.tools, index):
        block = {"type": "tool_use", "id": tool.id, "name": tool.name, "input": {}}
        out.append(event({"type": "content_block_start", "index": offset, "content_block": block}))
        out.extend(
            event(
                {
                    "type": "content_block_delta",
                    "index": offset,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                }
            )
            for piece in _pieces(tool.arguments)
        )
        out.append(event({"type": "content_block_stop", "index": offset}))
    delta = {"stop_reason": answer.finish, "stop_sequence": None}
    out.append(
        event({"type": "message_delta", "delta": delta, "usage": {"output_tokens": answer.completion_tokens or 0}})
    )
    out.append(event({"type": "message_stop"}))
    return b"".join(out)
