"""OpenAI's Chat Completions API as the fake upstream speaks it.

Answers are byte-for-byte in the shape OpenAI sends: compact JSON, UTF-8 unescaped, the same
``id`` and ``created`` on every chunk of a stream. A stream opens with the assistant-role chunk
(empty content), then one chunk per piece of text, a chunk with ``finish_reason``, and, only when
the request set ``stream_options.include_usage``, a last chunk with no choices and the usage (every
chunk then carries ``"usage": null``), then ``data: [DONE]``. Each event is ``data: <json>`` and a
blank line (LF, not CRLF). ``id`` and ``created`` are fixed, so an answer is the same bytes each
time it is asked for: a test can compare what the router relayed with what the fake sent.

A tool call follows the text: whole, a ``tool_calls`` entry on the message (``content`` null
when there was no text); streamed, a chunk that opens the call (its ``id``, ``type`` and
``function.name``, empty ``arguments``) and one chunk per piece of the arguments; either way
``finish_reason`` is ``tool_calls``. A request with ``n`` above one gets that many choices (the
same answer, ``index`` 0, 1, ...; streamed one complete choice after the other). An error in
the middle of a stream is one ``data: {"error": {...}}`` event, the stream then ending without
``[DONE]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from asgi_router.testing.hits import Hit
from asgi_router.testing.wire_format import JSONWire, ScriptedAnswer, choices_asked, content_words

__all__ = ["COMPLETION_ID", "CREATED", "TOOL_CALL_ID", "OpenAIWire"]

COMPLETION_ID: Final = "chatcmpl-fake"
CREATED: Final = 1700000000
#: A tool call's id when its reply sets none.
TOOL_CALL_ID: Final = "call_fake"
_FINGERPRINT: Final = "fp_fake"

# (type, code) of OpenAI's error bodies by status; anything else is an invalid request (4xx) or
# a server error (5xx).
_ERRORS: Final[dict[int, tuple[str, str | None]]] = {
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    429: ("requests", "rate_limit_exceeded"),
}


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


class OpenAIWire(JSONWire):
    """The ``openai`` kind: ``POST .../chat/completions`` and ``GET .../models``."""

    kind = "openai"
    base_path = "/v1"
    provider_fields: Mapping[str, str] = {}
    response_headers: Mapping[str, str] = {}

    def is_chat(self, method: str, path: str) -> bool:
        # Any prefix: a router route like /v1/llm/chat/completions keeps its own path upstream.
        return method == "POST" and path.endswith("/chat/completions")

    def refusal(self, hit: Hit) -> tuple[int, str] | None:
        return None if hit.model else (400, "The request names no model.")

    def usage(self, body: Any, completion_tokens: int) -> dict[str, int]:
        prompt = content_words(body.get("messages")) if isinstance(body, dict) else 0
        completion_tokens *= choices_asked(body)  # every choice is generated, and counted
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt + completion_tokens,
        }

    def completion(self, answer: ScriptedAnswer) -> bytes:
        message: dict[str, Any] = {"role": "assistant", "content": answer.text, "refusal": None}
        if answer.tool is not None:
            message["content"] = answer.text or None
            call = {"name": answer.tool.name, "arguments": answer.tool.arguments}
            message["tool_calls"] = [{"id": answer.tool.id or TOOL_CALL_ID, "type": "function", "function": call}]
        return _dumps(
            {
                "id": COMPLETION_ID,
                "object": "chat.completion",
                "created": CREATED,
                "model": answer.model,
                "choices": [
                    {
                        "index": index,
                        "message": message,
                        "logprobs": None,
                        "finish_reason": "stop" if answer.tool is None else "tool_calls",
                    }
                    for index in range(answer.choices)
                ],
                "usage": dict(answer.usage),
                "system_fingerprint": _FINGERPRINT,
            }
        )

    def stream(self, body: Any, answer: ScriptedAnswer) -> list[bytes]:
        options = body.get("stream_options") if isinstance(body, dict) else None
        include_usage = isinstance(options, dict) and options.get("include_usage") is True

        def event(choices: list[dict[str, Any]], usage: Mapping[str, int] | None = None) -> bytes:
            chunk: dict[str, Any] = {
                "id": COMPLETION_ID,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": answer.model,
                "system_fingerprint": _FINGERPRINT,
                "choices": choices,
            }
            if include_usage:
                chunk["usage"] = dict(usage) if usage is not None else None
            return b"data: " + _dumps(chunk) + b"\n\n"

        def choice(index: int, delta: dict[str, Any], finish_reason: str | None = None) -> list[dict[str, Any]]:
            return [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]

        events: list[bytes] = []
        for index in range(answer.choices):  # one choice after the other, each complete
            events.append(event(choice(index, {"role": "assistant", "content": "", "refusal": None})))
            events += [event(choice(index, {"content": piece})) for piece in answer.pieces]
            tool = answer.tool
            if tool is not None:
                call = {"name": tool.name, "arguments": ""}
                opened = {"index": 0, "id": tool.id or TOOL_CALL_ID, "type": "function", "function": call}
                events.append(event(choice(index, {"tool_calls": [opened]})))
                events += [
                    event(choice(index, {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}))
                    for piece in tool.pieces
                ]
            events.append(event(choice(index, {}, "stop" if tool is None else "tool_calls")))
        if include_usage:
            events.append(event([], answer.usage))
        events.append(b"data: [DONE]\n\n")
        return events

    def error(self, code: int, message: str) -> dict[str, Any]:
        kind, error_code = _ERRORS.get(code, ("invalid_request_error" if code < 500 else "server_error", None))
        return {"error": {"message": message, "type": kind, "param": None, "code": error_code}}

    def stream_error(self, code: int, message: str) -> bytes:
        return b"data: " + _dumps(self.error(code, message)) + b"\n\n"

    def unknown_route(self, method: str, path: str) -> dict[str, Any]:
        return {
            "error": {
                "message": f"Invalid URL ({method} {path})",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }

    def model_list(self, ids: Sequence[str]) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": model, "object": "model", "created": CREATED, "owned_by": "fake"} for model in ids],
        }
