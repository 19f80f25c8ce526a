"""Anthropic's Messages API as the fake upstream speaks it.

A provider of ``kind = "anthropic"`` sends ``POST <base_url>/messages`` (the base URL ends in
``/v1``). The fake refuses what the real API refuses before it looks at the model: a request
without an ``anthropic-version`` header, or whose body lacks ``model``, a positive whole
``max_tokens`` or a non-empty ``messages`` list, is a 400 ``invalid_request_error``. It does not
check the key (``x-api-key``): hits show which one came.

A whole answer is a ``message``: its ``content`` a ``text`` block (left out when a tool call has
no text before it) and, for a tool call, a ``tool_use`` block with the arguments as ``input``;
``stop_reason`` ``end_turn`` or ``tool_use``; ``usage`` with ``input_tokens`` and
``output_tokens``. A streamed one is the API's events, each ``event: <type>``, ``data: <json>``
(compact, UTF-8 unescaped) and a blank line: ``message_start`` (the message with no content yet,
``output_tokens`` 1), then per block ``content_block_start``, its deltas (``text_delta`` per
piece of text; for a tool call an empty ``input_json_delta``, then one per piece of the
arguments) and ``content_block_stop``, a ``ping`` after the first block's start as the API sends
one, then ``message_delta`` (``stop_reason``, the output tokens) and ``message_stop``.

Errors are ``{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}``, the
type following the status (:data:`ERROR_TYPES`: 529 ``overloaded_error``, 429
``rate_limit_error``...); in a stream, an ``event: error`` with the same object (without
``request_id``), after which the API ends the stream. Every answer has a ``request-id`` header.
Ids are fixed (:data:`MESSAGE_ID`, :data:`TOOL_USE_ID`, :data:`REQUEST_ID`), so an answer is the
same bytes each time it is asked for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

from asgi_router.testing.hits import Hit
from asgi_router.testing.wire_format import JSONWire, ScriptedAnswer, content_words

__all__ = ["ERROR_TYPES", "MESSAGE_ID", "REQUEST_ID", "TOOL_USE_ID", "AnthropicWire"]

MESSAGE_ID: Final = "msg_fake"
#: A tool call's id when its reply sets none.
TOOL_USE_ID: Final = "toolu_fake"
#: The ``request-id`` header of every answer, and the ``request_id`` of every error body.
REQUEST_ID: Final = "req_fake"

#: ``error.type`` by status, as the API names them; any other 4xx is an ``invalid_request_error``,
#: any other 5xx an ``api_error``. The router has a table like it (``protocols.anthropic_errors``)
#: for the errors it writes itself; the fake keeps its own, written from Anthropic's documentation,
#: so that a mistake in the router's is not mirrored by the upstream it is tested against.
ERROR_TYPES: Final[Mapping[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_CREATED_AT: Final = "2025-01-01T00:00:00Z"
# The API writes its keep-alive with a space after the colon, unlike every other event.
_PING: Final = b'event: ping\ndata: {"type": "ping"}\n\n'


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def _event(data: dict[str, Any]) -> bytes:
    return b"event: " + str(data["type"]).encode() + b"\ndata: " + _dumps(data) + b"\n\n"


def _error_object(code: int, message: str) -> dict[str, Any]:
    kind = ERROR_TYPES.get(code, "api_error" if code >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


class AnthropicWire(JSONWire):
    """The ``anthropic`` kind: ``POST .../messages`` and ``GET .../models``."""

    kind = "anthropic"
    base_path = "/v1"
    provider_fields: Mapping[str, str] = {"kind": "anthropic"}
    response_headers: Mapping[str, str] = {"request-id": REQUEST_ID}

    def is_chat(self, method: str, path: str) -> bool:
        return method == "POST" and path.endswith("/messages")

    def refusal(self, hit: Hit) -> tuple[int, str] | None:
        if not hit.headers.get("anthropic-version"):
            return 400, "anthropic-version: header is required"
        body = hit.body
        if not isinstance(body, dict):
            return 400, "The request body must be a JSON object."
        if not hit.model:
            return 400, "model: Field required"
        tokens = body.get("max_tokens")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
            return 400, "max_tokens: Field required"
        if not isinstance(body.get("messages"), list) or not body["messages"]:
            return 400, "messages: Field required"
        last = body["messages"][-1]
        if isinstance(last, dict) and last.get("role") == "assistant":
            content = last.get("content")
            text = content if isinstance(content, str) else ""
            if isinstance(content, list) and content and isinstance(content[-1], dict):
                text = str(content[-1].get("text", ""))
            if text != text.rstrip():
                return 400, "messages: final assistant content cannot end with trailing whitespace"
        return None

    def usage(self, body: Any, completion_tokens: int) -> dict[str, int]:
        prompt = 0
        if isinstance(body, dict):
            prompt = content_words(body.get("messages")) + content_words([{"content": body.get("system")}])
        return {"input_tokens": prompt, "output_tokens": completion_tokens}

    def completion(self, answer: ScriptedAnswer) -> bytes:
        content: list[dict[str, Any]] = []
        if answer.text or answer.tool is None:
            content.append({"type": "text", "text": answer.text})
        if answer.tool is not None:
            tool = answer.tool
            arguments = json.loads(tool.arguments)
            content.append({"type": "tool_use", "id": tool.id or TOOL_USE_ID, "name": tool.name, "input": arguments})
        return _dumps(self._message(answer, content, "end_turn" if answer.tool is None else "tool_use"))

    def _message(self, answer: ScriptedAnswer, content: list[dict[str, Any]], stop: str | None) -> dict[str, Any]:
        return {
            "id": MESSAGE_ID,
            "type": "message",
            "role": "assistant",
            "model": answer.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": dict(answer.usage),
        }

    def stream(self, body: Any, answer: ScriptedAnswer) -> list[bytes]:
        started = self._message(answer, [], None)
        started["usage"] = {**answer.usage, "output_tokens": min(answer.usage.get("output_tokens", 1), 1)}
        events = [_event({"type": "message_start", "message": started})]
        blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        if answer.text or answer.tool is None:
            deltas = [{"type": "text_delta", "text": piece} for piece in answer.pieces]
            blocks.append(({"type": "text", "text": ""}, deltas))
        tool = answer.tool
        if tool is not None:
            opened = {"type": "tool_use", "id": tool.id or TOOL_USE_ID, "name": tool.name, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in ("", *tool.pieces)]
            blocks.append((opened, deltas))
        for index, (opened, deltas) in enumerate(blocks):
            events.append(_event({"type": "content_block_start", "index": index, "content_block": opened}))
            if index == 0:
                events.append(_PING)
            events += [_event({"type": "content_block_delta", "index": index, "delta": delta}) for delta in deltas]
            events.append(_event({"type": "content_block_stop", "index": index}))
        stop = "end_turn" if tool is None else "tool_use"
        finished = {"stop_reason": stop, "stop_sequence": None}
        output = {"output_tokens": answer.usage.get("output_tokens", 0)}
        events.append(_event({"type": "message_delta", "delta": finished, "usage": output}))
        events.append(_event({"type": "message_stop"}))
        return events

    def error(self, code: int, message: str) -> dict[str, Any]:
        return {**_error_object(code, message), "request_id": REQUEST_ID}

    def stream_error(self, code: int, message: str) -> bytes:
        return _event(_error_object(code, message))

    def unknown_route(self, method: str, path: str) -> dict[str, Any]:
        return self.error(404, f"Not Found: {method} {path}")

    def model_list(self, ids: Sequence[str]) -> dict[str, Any]:
        models = [{"type": "model", "id": model, "display_name": model, "created_at": _CREATED_AT} for model in ids]
        return {
            "data": models,
            "has_more": False,
            "first_id": ids[0] if ids else None,
            "last_id": ids[-1] if ids else None,
        }
