"""The degraded answer: a configured canned reply sent when every candidate of a group failed.

Opt-in per group (``degraded = {content = "..."}``). Some products would rather show "the
assistant is busy, try again in a minute" inside their chat UI than surface a 502; this gives
them that without a code path of their own. The reply is shaped as the request asked: one
``chat.completion`` JSON object, or an SSE stream of ``chat.completion.chunk`` events ending
in ``data: [DONE]``, so the ``openai`` SDK reads it like any answer. On an Anthropic client's
Messages route it is a Messages API ``message``, or the stream of events that makes one. It is always marked
as degraded by one of the router's headers (``request/router_headers.py``) so that callers who
care can tell it from a model's answer.

Only failures that say "no capacity right now" degrade (5xx-class and 429); a request that
fits no model's context window is the client's problem and keeps its 400.
"""

from __future__ import annotations

import json
import time
from typing import Any

from asgi_router.config.degraded_settings import DegradedSettings

__all__ = ["degraded_reply", "should_degrade"]


def should_degrade(status: int) -> bool:
    """Whether an exhausted plan's error status may be replaced by the canned reply."""
    return status >= 500 or status == 429


def _completion(request_id: str, model: str, content: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-degraded-{request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def _chunk(request_id: str, model: str, created: int, delta: dict[str, str], finish: str | None) -> bytes:
    payload = {
        "id": f"chatcmpl-degraded-{request_id}",
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _anthropic_reply(request_id: str, model: str, content: str, stream: bool) -> bytes:
    message: dict[str, Any] = {
        "id": f"msg_degraded_{request_id}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": content}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    if not stream:
        return json.dumps(message, separators=(",", ":")).encode()
    events: list[dict[str, Any]] = [
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": content}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 0},
        },
        {"type": "message_stop"},
    ]
    return b"".join(
        b"event: " + event["type"].encode() + b"\ndata: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
        for event in events
    )


def degraded_reply(
    settings: DegradedSettings, request_id: str, model: str, stream: bool, anthropic: bool = False
) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Headers (without the router's own) and the whole body of the canned reply, in the
    route's protocol (``anthropic``: the Messages API's)."""
    if anthropic:
        body = _anthropic_reply(request_id, model, settings.content, stream)
    elif not stream:
        body = json.dumps(_completion(request_id, model, settings.content), separators=(",", ":")).encode()
    else:
        created = int(time.time())
        body = (
            _chunk(request_id, model, created, {"role": "assistant", "content": settings.content}, None)
            + _chunk(request_id, model, created, {}, "stop")
            + b"data: [DONE]\n\n"
        )
    if not stream:
        return [(b"content-type", b"application/json")], body
    headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
    return headers, body
