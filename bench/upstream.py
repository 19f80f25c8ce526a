"""The fast mock upstream: an OpenAI-shaped answer at the lowest cost Python can serve it.

It must be much faster than what it serves so that the proxies, not it, are what a run
measures: it is raw ASGI (no framework), never parses the request JSON (a 100 KB request
would cost it more than the proxy), and sends prebuilt bytes. What to answer is read off the
request body with a byte search, which works because both the router and the bench's clients
send compact JSON:

* ``"stream":true`` — SSE: 20 ``chat.completion.chunk`` events then ``data: [DONE]``, each in
  its own ``http.response.body`` message (so each is its own HTTP chunk on the wire);
* ``"model":"slow"`` with ``"stream":true`` — a slow stream: the first event at once, then one
  every :data:`SLOW_INTERVAL` seconds until :data:`SLOW_EVENTS` or the client leaves
  (the "1,000 open streams" scenario holds these open);
* anything else — one ~300-byte ``chat.completion`` JSON body with its ``content-length``.

``POST /v1/messages`` speaks Anthropic's Messages API for the translated-streaming scenario (an
OpenAI client served by an Anthropic provider): with ``"stream":true``, the same 19 text pieces
as Messages events (``message_start``, ``content_block_start``, 19 ``content_block_delta``,
``content_block_stop``, ``message_delta``, ``message_stop``), each in its own body message;
otherwise one ``message`` JSON body.

``GET /health`` answers 200 for readiness checks.

It is not the test kit's ``FakeUpstream`` (which the tests and the demo use): that one parses
each request and renders its answer, and serves about a quarter of this one's requests per
second, fewer than the router itself serves, so a bench on it would measure the fake.
"""

from __future__ import annotations

import asyncio
import json
from typing import Final

from starlette.types import Message, Receive, Scope, Send

__all__ = ["CHUNKS", "COMPLETION", "MESSAGE", "SLOW_EVENTS", "SLOW_INTERVAL", "app", "messages_events", "sse_events"]

CHUNKS: Final = 20
SLOW_INTERVAL: Final = 1.0
SLOW_EVENTS: Final = 120

COMPLETION: Final = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "ok",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello from the bench upstream."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16},
    },
    separators=(",", ":"),
).encode()


def _event(index: int) -> bytes:
    chunk = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "ok",
        "choices": [{"index": 0, "delta": {"content": f"w{index} "}, "finish_reason": None}],
    }
    return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"


def sse_events() -> list[bytes]:
    """The exact frames of one streamed answer: :data:`CHUNKS` events, the last being DONE."""
    return [_event(index) for index in range(CHUNKS - 1)] + [b"data: [DONE]\n\n"]


def responses_events() -> list[bytes]:
    """The exact frames of one streamed Responses API answer, :data:`CHUNKS` events as the API
    sends them (``event:`` and ``data:``): the response created and in progress, its message item
    and text part added, the text in deltas, the text done, and ``response.completed``."""
    response: dict[str, object] = {"id": "resp_bench", "object": "response", "status": "in_progress", "model": "ok"}
    response.update(created_at=1700000000, output=[], usage=None)
    item = {"type": "message", "id": "msg_bench", "status": "in_progress", "role": "assistant", "content": []}
    where = {"item_id": "msg_bench", "output_index": 0, "content_index": 0}
    text = "".join(f"w{index} " for index in range(CHUNKS - 5))
    done = {**item, "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]}
    usage = {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": CHUNKS - 5}
    events: list[dict[str, object]] = [
        {"type": "response.created", "response": response},
        {"type": "response.in_progress", "response": response},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        *(
            {"type": "response.output_text.delta", **where, "delta": f"w{index} ", "logprobs": []}
            for index in range(CHUNKS - 5)
        ),
        {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
        {
            "type": "response.completed",
            "response": {**response, "status": "completed", "output": [done], "usage": usage},
        },
    ]
    return [
        b"event: %s\ndata: %s\n\n"
        % (str(event["type"]).encode(), json.dumps({**event, "sequence_number": at}, separators=(",", ":")).encode())
        for at, event in enumerate(events)
    ]


MESSAGE: Final = json.dumps(
    {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "ok",
        "content": [{"type": "text", "text": "Hello from the bench upstream."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 9, "output_tokens": 7},
    },
    separators=(",", ":"),
).encode()


def _anthropic_event(data: dict[str, object]) -> bytes:
    return (
        b"event: "
        + str(data["type"]).encode()
        + b"\ndata: "
        + json.dumps(data, separators=(",", ":")).encode()
        + b"\n\n"
    )


def messages_events() -> list[bytes]:
    """The exact frames of one streamed Messages answer: the text of :func:`sse_events` as events."""
    start: dict[str, object] = {"id": "msg_bench", "type": "message", "role": "assistant", "model": "ok"}
    start.update(content=[], stop_reason=None, stop_sequence=None, usage={"input_tokens": 9, "output_tokens": 1})
    deltas = [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"w{index} "}}
        for index in range(CHUNKS - 1)
    ]
    events: list[dict[str, object]] = [
        {"type": "message_start", "message": start},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *deltas,
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 19},
        },
        {"type": "message_stop"},
    ]
    return [_anthropic_event(event) for event in events]


_EVENTS: Final = sse_events()
_MESSAGES_EVENTS: Final = messages_events()
_MESSAGE_HEADERS: Final = [(b"content-type", b"application/json"), (b"content-length", str(len(MESSAGE)).encode())]
_JSON_HEADERS: Final = [(b"content-type", b"application/json"), (b"content-length", str(len(COMPLETION)).encode())]
_SSE_HEADERS: Final = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_EMPTY: Final = {"type": "http.response.body", "body": b"", "more_body": False}


async def _read(receive: Receive) -> bytes:
    parts: list[bytes] = []
    while True:
        message = await receive()
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def _slow(receive: Receive, send: Send) -> None:
    gone = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.get_running_loop().create_task(watch())
    try:
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        for index in range(SLOW_EVENTS):
            await send({"type": "http.response.body", "body": _event(index), "more_body": True})
            try:
                await asyncio.wait_for(gone.wait(), SLOW_INTERVAL)
                return
            except TimeoutError:
                pass
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
    finally:
        watcher.cancel()


async def _messages(body: bytes, send: Send) -> None:
    if b'"stream":true' not in body:
        await send({"type": "http.response.start", "status": 200, "headers": _MESSAGE_HEADERS})
        await send({"type": "http.response.body", "body": MESSAGE})
        return
    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
    for event in _MESSAGES_EVENTS:
        await send({"type": "http.response.body", "body": event, "more_body": True})
    await send(_EMPTY)


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        while True:
            message: Message = await receive()
            kind = message["type"].rsplit(".", 1)[-1]
            await send({"type": f"lifespan.{kind}.complete"})
            if kind == "shutdown":
                return
    if scope["type"] != "http":
        return
    if scope["method"] == "GET":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    body = await _read(receive)
    if scope["path"].endswith("/messages"):
        await _messages(body, send)
        return
    if b'"stream":true' in body:
        if b'"model":"slow"' in body:
            await _slow(receive, send)
            return
        await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
        for event in _EVENTS:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send(_EMPTY)
        return
    await send({"type": "http.response.start", "status": 200, "headers": _JSON_HEADERS})
    await send({"type": "http.response.body", "body": COMPLETION})
