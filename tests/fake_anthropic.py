"""A fake Anthropic upstream: the Messages API as Anthropic documents it, served on 127.0.0.1.

Self-contained (Starlette and the standard library only) so that it can move into a test kit as
it is. ``POST /v1/messages`` checks a request the way the real API does first: the key in
``x-api-key`` (or ``Authorization: Bearer``; 401 ``authentication_error`` otherwise), an
``anthropic-version`` header, a JSON body with ``model``, a positive integer ``max_tokens`` and
a non-empty ``messages`` list (400 ``invalid_request_error`` otherwise). Then the model id, as
the upstream receives it, picks the answer:

============================  ===============================================================
``ok`` (and any other id)     the text :data:`TEXT` ("Hello from Claude — 你好") in four
                              ``text_delta`` events, ``end_turn``; or the whole ``message``
``tool``                      a text block, then a ``get_weather`` ``tool_use`` block whose
                              ``input_json_delta`` pieces make :data:`TOOL_ARGUMENTS`,
                              ``stop_reason`` ``tool_use``; once the request's last turn holds a
                              ``tool_result``, the text "It is <result>." instead (a round trip)
``echo``                      the text is the JSON request body the upstream received
``overloaded``                529 ``overloaded_error``
``ratelimited-<s>``           429 ``rate_limit_error`` with ``retry-after: <s>``
``too-long``                  400 ``invalid_request_error`` "prompt is too long: ..."
``invalid``                   400 ``invalid_request_error`` (any other refusal)
``forbidden``                 403 ``permission_error``
``error-first``               200, then an ``error`` event (``overloaded_error``) as the first event
``error-<n>``                 200, ``n`` events of the ``ok`` stream, then an ``error`` event
``break-<n>``                 200, ``n`` events of the ``ok`` stream, then the connection drops
============================  ===============================================================

Streams are written as Anthropic writes them (``event: <type>`` and ``data: <json>`` lines,
``ping`` included) but cut at awkward places, each piece written on its own after a short pause:
inside the ``event:`` field name, inside a multi-byte UTF-8 character, and between the two
newlines that end an event. Every request is recorded (:attr:`FakeAnthropic.seen`, under the
router's ``x-request-id``): path, query, headers and body.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["TEXT", "TEXT_DELTAS", "TOOL_ARGUMENTS", "FakeAnthropic", "Received", "stream_events"]

TEXT_DELTAS: Final = ("Hello", " from", " Claude", " — 你好")
TEXT: Final = "".join(TEXT_DELTAS)
TOOL_ARGUMENTS: Final = '{"location": "Paris, FR", "unit": "°C"}'
_OVERLOADED: Final = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
_TOOL_PIECES: Final = ('{"location', '": "Paris, ', 'FR", "unit": "°', 'C"}')
USAGE: Final = {"input_tokens": 11, "output_tokens": 7}


@dataclass
class Received:
    """One request as the fake saw it."""

    path: str
    query: str
    headers: dict[str, str]
    body: Any


def _error(status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> Response:
    body = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_fake"}
    return JSONResponse(body, status_code=status, headers=headers)


def _message(model: str, content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_fake01",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": USAGE,
    }


def _answer(model: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    """The content blocks and stop reason a model id answers ``body`` with."""
    if model == "echo":
        return [{"type": "text", "text": json.dumps(body, ensure_ascii=False)}], "end_turn"
    if model == "tool":
        last = body["messages"][-1]
        results = [
            block
            for block in (last.get("content") if isinstance(last.get("content"), list) else [])
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ]
        if results:
            said = results[0]["content"]
            said = said if isinstance(said, str) else "".join(part["text"] for part in said)
            return [{"type": "text", "text": f"It is {said}."}], "end_turn"
        call = {"type": "tool_use", "id": "toolu_fake01", "name": "get_weather", "input": json.loads(TOOL_ARGUMENTS)}
        return [{"type": "text", "text": "Let me check."}, call], "tool_use"
    return [{"type": "text", "text": TEXT}], "end_turn"


def stream_events(model: str, content: list[dict[str, Any]], stop: str) -> list[tuple[str, dict[str, Any]]]:
    """The events of a streamed answer, in order, as the Messages API sends them."""
    start = _message(model, [], stop)
    start.update(stop_reason=None, usage={"input_tokens": USAGE["input_tokens"], "output_tokens": 1})
    events: list[tuple[str, dict[str, Any]]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(content):
        if block["type"] == "text":
            opened: dict[str, Any] = {"type": "text", "text": ""}
            pieces = TEXT_DELTAS if block["text"] == TEXT else (block["text"],)
            deltas = [{"type": "text_delta", "text": piece} for piece in pieces]
        else:
            opened = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": piece} for piece in ("", *_TOOL_PIECES)]
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": opened}))
        if index == 0:
            events.append(("ping", {"type": "ping"}))
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}) for delta in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None}}
    delta["usage"] = {"output_tokens": USAGE["output_tokens"]}
    events += [("message_delta", delta), ("message_stop", {"type": "message_stop"})]
    return events


def encode_event(name: str, data: dict[str, Any]) -> bytes:
    """One event as the Messages API writes it: compact JSON, UTF-8."""
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


def awkward_pieces(event: bytes) -> list[bytes]:
    """``event`` cut inside ``event:``, inside its first multi-byte character (if any), and between
    its two final newlines."""
    cuts = {3, len(event) - 1}
    for at, byte in enumerate(event):
        if byte >= 0xC0:  # the lead byte of a multi-byte character: cut after it
            cuts.add(at + 1)
            break
    bounds = [0, *sorted(cut for cut in cuts if 0 < cut < len(event)), len(event)]
    return [event[start:end] for start, end in itertools.pairwise(bounds)]


class FakeAnthropic:
    """The fake's app and what it has seen; ``key`` is the only key it accepts."""

    def __init__(self, key: str, *, pause: float = 0.001) -> None:
        self.key = key
        self.pause = pause
        #: Its base URL as an Anthropic provider's ``base_url`` (``http://127.0.0.1:<port>/v1``),
        #: set by whoever serves it.
        self.url = ""
        self.seen: dict[str, list[Received]] = {}
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/v1/messages", self.messages, methods=["POST"])])

    def received(self, request_id: str) -> list[Received]:
        """What the fake received under ``request_id``, in order."""
        with self._lock:
            return list(self.seen.get(request_id, []))

    async def messages(self, request: Request) -> Response:
        raw = await request.body()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        received = Received(request.url.path, request.url.query, dict(request.headers), body)
        with self._lock:
            self.seen.setdefault(request.headers.get("x-request-id", "-"), []).append(received)
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if self.key not in (request.headers.get("x-api-key"), bearer):
            return _error(401, "authentication_error", "invalid x-api-key")
        if not request.headers.get("anthropic-version"):
            return _error(400, "invalid_request_error", "anthropic-version: header is required")
        refused = _check_body(body)
        if refused is not None:
            return _error(400, "invalid_request_error", refused)
        return await self._answer(body)

    async def _answer(self, body: dict[str, Any]) -> Response:
        model: str = body["model"]
        name, _, arg = model.partition("-")
        if model == "overloaded":
            return _error(529, "overloaded_error", "Overloaded")
        if name == "ratelimited":
            return _error(429, "rate_limit_error", "Number of requests exceeds your rate limit", {"retry-after": arg})
        if model == "too-long":
            return _error(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum")
        if model == "invalid":
            return _error(400, "invalid_request_error", "messages.0.content: text content blocks must be non-empty")
        if model == "forbidden":
            return _error(403, "permission_error", "Your API key does not have permission to use this model")
        content, stop = _answer(model, body)
        if body.get("stream") is not True:
            return JSONResponse(_message(model, content, stop), headers={"request-id": "req_fake"})
        events = stream_events(model, content, stop)
        return StreamingResponse(
            self._stream(events, name, arg), media_type="text/event-stream", headers={"request-id": "req_fake"}
        )

    async def _stream(self, events: list[tuple[str, dict[str, Any]]], name: str, arg: str) -> AsyncIterator[bytes]:
        if name == "error" and arg == "first":
            yield encode_event("error", _OVERLOADED)
            return
        limit = int(arg) if name in ("error", "break") else len(events)
        for event in events[:limit]:
            for piece in awkward_pieces(encode_event(*event)):
                yield piece
                await asyncio.sleep(self.pause)
        if name == "error":
            yield encode_event("error", _OVERLOADED)
        elif name == "break":
            raise ConnectionAbortedError("the fake Anthropic upstream drops the connection mid-stream")


def _check_body(body: Any) -> str | None:
    """What the real API would refuse in ``body`` (the fields it requires), or ``None``."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    if not isinstance(body.get("model"), str):
        return "model: Field required"
    tokens = body.get("max_tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        return "max_tokens: Field required"
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        return "messages: Field required"
    return None
