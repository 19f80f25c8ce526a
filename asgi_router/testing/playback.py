"""Playing a reply on one ASGI request: the fake upstream's engine.

Every reply ends in one of three ways: a proper end (the last body message), a drop (the
response was started and is never ended: the app raises :class:`DroppedConnection`, and the
server closes the connection mid-body, which a client reads as a broken response, never a clean
end), or the client leaving first. A watcher on ``receive`` notices the client leaving at once,
so a stall or a slow answer ends when its client gives up, and :class:`Hit` says it did.

A reply that answers (``ok``, ``tool_call``, and the stream that a ``broken_stream``,
``stall_after_headers`` or ``stream_error`` cuts short) is made into an :class:`ScriptedAnswer` here,
and spelled by the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Mapping
from http import HTTPStatus
from types import TracebackType
from typing import Final, NoReturn

from starlette.types import Receive, Send

from asgi_router.testing.hits import Hit
from asgi_router.testing.reply import (
    BrokenStream,
    Ok,
    Raw,
    RejectsPrefill,
    Reply,
    Slow,
    SplitWrites,
    Stall,
    StallAfterHeaders,
    Status,
    StreamError,
    ToolCall,
    seconds_text,
)
from asgi_router.testing.wire_format import ScriptedAnswer, ToolUse, Wire, choices_asked, pieces

__all__ = ["DroppedConnection", "PlayedCall", "awkward_pieces", "play", "prefilled"]

_JSON: Final = "application/json"
_SSE: Final = "text/event-stream; charset=utf-8"


class DroppedConnection(Exception):
    """Raised by the fake to make its server close the connection without ending the response."""


class _HideDeliberateDrops(logging.Filter):
    """uvicorn logs an app's exception with its traceback; a drop the test asked for is not one."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], DroppedConnection))


logging.getLogger("uvicorn.error").addFilter(_HideDeliberateDrops())


class PlayedCall:
    """One request being answered: sends, pauses that end when the client leaves, and the
    request's :class:`Hit` kept up to date. ``headers`` go on the answer whatever it is (a
    reply's own win); each write is cut in :func:`awkward_pieces`, ``split`` seconds apart,
    once ``split`` is set."""

    def __init__(self, receive: Receive, send: Send, hit: Hit, headers: Mapping[str, str] | None = None) -> None:
        self.hit = hit
        self.split: float | None = None
        self._headers = dict(headers or {})
        self._receive = receive
        self._send = send
        self._gone = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    async def __aenter__(self) -> PlayedCall:
        self._watcher = asyncio.get_running_loop().create_task(self._watch())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        if not self.hit.completed and (self._gone.is_set() or exc_type is asyncio.CancelledError):
            self.hit.disconnected = True

    async def _watch(self) -> None:
        while (await self._receive())["type"] != "http.disconnect":
            pass
        self._gone.set()

    async def pause(self, seconds: float) -> bool:
        """Wait ``seconds``; False (at once) if the client leaves meanwhile."""
        if seconds > 0 and not self._gone.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._gone.wait(), seconds)
        return not self._gone.is_set()

    async def start(self, status: int, content_type: str, headers: Mapping[str, str], length: int | None) -> None:
        fields = {"content-type": content_type}
        if length is not None:
            fields["content-length"] = str(length)
        fields.update(self._headers)
        fields.update(headers)
        raw = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in fields.items()]
        self.hit.status = status
        await self._send({"type": "http.response.start", "status": status, "headers": raw})

    async def write(self, data: bytes, *, more: bool = True) -> bool:
        """Send ``data``; False if the client has gone (nothing more is sent then)."""
        if self.split is not None and data:
            *head, data = awkward_pieces(data)
            for piece in head:
                if not (await self._write(piece, more=True) and await self.pause(self.split)):
                    return False
        return await self._write(data, more=more)

    async def _write(self, data: bytes, *, more: bool) -> bool:
        if self._gone.is_set():
            return False
        try:
            await self._send({"type": "http.response.body", "body": data, "more_body": more})
        except OSError:  # the server says the client has gone
            self._gone.set()
            return False
        if not more:
            self.hit.completed = True
        return True

    async def events(self, frames: list[bytes], interval: float, *, end: bool) -> bool:
        """Send ``frames`` one write each, ``interval`` seconds apart; end the body if ``end``."""
        for index, frame in enumerate(frames):
            if index and not await self.pause(interval):
                return False
            if not await self.write(frame):
                return False
        return await self.write(b"", more=False) if end else True

    def drop(self) -> NoReturn:
        raise DroppedConnection("the fake upstream drops the connection mid-response, as scripted")


async def play(reply: Reply, call: PlayedCall, wire: Wire) -> None:
    """ScriptedAnswer the request of ``call`` as ``reply`` says, in ``wire``'s protocol."""
    hit = call.hit
    if isinstance(reply, Slow):
        if await call.pause(reply.seconds):
            await play(reply.then, call, wire)
    elif isinstance(reply, RejectsPrefill):
        if prefilled(hit.body) is not None:
            message = (
                "This model does not support assistant message prefill: the conversation must end with a user message."
            )
            await _status(call, wire, Status(400), message)
        else:
            await play(reply.then, call, wire)
    elif isinstance(reply, SplitWrites):
        call.split = reply.interval
        await play(reply.then, call, wire)
    elif isinstance(reply, Stall):
        if await call.pause(reply.seconds):
            await _status(call, wire, Status(504), f"the fake upstream stalled for {reply.seconds:g} s, as scripted")
    elif isinstance(reply, Status):
        await _status(call, wire, reply, f"{_phrase(reply.code)}: a scripted answer of the fake upstream")
    elif isinstance(reply, Raw):
        await call.start(reply.status, _SSE, reply.headers, None)
        await call.events(list(reply.writes), reply.interval, end=True)
    elif isinstance(reply, Ok | ToolCall):
        answer = _answer(reply, hit, wire)
        if hit.stream:
            await call.start(200, _SSE, reply.headers, None)
            await call.events(wire.stream(hit.body, answer), reply.interval, end=True)
        else:
            body = wire.completion(answer)
            await call.start(200, _JSON, reply.headers, len(body))
            await call.write(body, more=False)
    elif isinstance(reply, StreamError):
        await _stream_error(reply, call, wire)
    elif isinstance(reply, StallAfterHeaders | BrokenStream):
        await _break(reply, call, wire)
    else:  # pragma: no cover - every reply type is handled above
        raise TypeError(f"not a reply: {reply!r}")


def _answer(reply: Ok | ToolCall, hit: Hit, wire: Wire) -> ScriptedAnswer:
    """What ``reply`` says to ``hit``, for the wire to spell."""
    if isinstance(reply, Ok):
        text = reply.text if reply.text is not None else _greeting(hit.model)
        prefill = prefilled(hit.body)
        if prefill and text.startswith(prefill):  # asked to continue: the rest of the text
            text = text[len(prefill) :]
        parts = pieces(text, reply.chunks)
        usage = reply.usage if reply.usage is not None else wire.usage(hit.body, len(parts))
        return ScriptedAnswer(hit.model, text, parts, usage, choices=choices_asked(hit.body), request=hit.body)
    text = reply.text or ""
    parts = pieces(text, None)
    tool = ToolUse(reply.name, reply.arguments, pieces(reply.arguments, reply.chunks), reply.id)
    usage = reply.usage if reply.usage is not None else wire.usage(hit.body, len(parts) + len(tool.pieces))
    return ScriptedAnswer(hit.model, text, parts, usage, tool, choices=choices_asked(hit.body), request=hit.body)


def prefilled(body: object) -> str | None:
    """The text of the assistant message a request ends with (it asks to continue it), if any."""
    messages = body.get("messages") if isinstance(body, dict) else None
    last = messages[-1] if isinstance(messages, list) and messages else None
    if not isinstance(last, dict) or last.get("role") != "assistant":
        return None
    content = last.get("content")
    if isinstance(content, list):
        texts = [part.get("text") for part in content if isinstance(part, dict)]
        content = "".join(text for text in texts if isinstance(text, str))
    return content if isinstance(content, str) else None


def _cut_short(hit: Hit, wire: Wire, sent: int, text: str | None = None) -> ScriptedAnswer:
    """The answer ``ok(text)`` gives (without ``text``: ``ok()``'s, its words repeated so that
    more is to come after ``sent`` chunks), for a reply that cuts a stream short."""
    if text is not None:
        return ScriptedAnswer(hit.model, text, pieces(text, None), wire.usage(hit.body, len(pieces(text, None))))
    words = pieces(_greeting(hit.model), None)
    words = words * (sent // len(words) + 2)
    return ScriptedAnswer(hit.model, "".join(words), words, wire.usage(hit.body, len(words)))


async def _break(reply: StallAfterHeaders | BrokenStream, call: PlayedCall, wire: Wire) -> None:
    """Start the answer ``ok()`` would give, send part of it, then (after a stall) drop it."""
    hit = call.hit
    answer = _cut_short(hit, wire, reply.after_chunks, reply.text)
    if hit.stream:
        await call.start(200, _SSE, {}, None)
        stream = wire.stream(hit.body, answer)
        frames = stream[: reply.after_chunks]
        if isinstance(reply, BrokenStream) and reply.mid_event and reply.after_chunks < len(stream):
            cut = stream[reply.after_chunks]
            frames = [*frames, cut[: len(cut) // 2]]
        if not await call.events(frames, reply.interval, end=False):
            return
    else:
        body = wire.completion(answer)
        await call.start(200, _JSON, {}, len(body))
        if isinstance(reply, BrokenStream) and not await call.write(body[: len(body) // 2]):
            return
    if isinstance(reply, StallAfterHeaders) and not await call.pause(reply.seconds):
        return
    call.drop()


async def _stream_error(reply: StreamError, call: PlayedCall, wire: Wire) -> None:
    """Part of the stream ``ok()`` would send, then the protocol's error event, then the end."""
    hit = call.hit
    message = reply.message if reply.message is not None else f"{_phrase(reply.code)}: a scripted stream error"
    if not hit.stream:
        await _status(call, wire, Status(reply.code), message)
        return
    await call.start(200, _SSE, {}, None)
    frames = wire.stream(hit.body, _cut_short(hit, wire, reply.after_chunks))[: reply.after_chunks]
    await call.events([*frames, wire.stream_error(reply.code, message)], reply.interval, end=True)


async def _status(call: PlayedCall, wire: Wire, reply: Status, message: str) -> None:
    headers = dict(reply.headers)
    if reply.retry_after is not None:
        after = reply.retry_after
        headers.setdefault("retry-after", after if isinstance(after, str) else seconds_text(after))
    body = reply.body if reply.body is not None else wire.error(reply.code, message)
    if isinstance(body, bytes):
        data, content_type = body, _JSON
    elif isinstance(body, str):
        data, content_type = body.encode(), "text/plain; charset=utf-8"
    else:
        data, content_type = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(), _JSON
    await call.start(reply.code, content_type, headers, len(data))
    await call.write(data, more=False)


def awkward_pieces(data: bytes) -> list[bytes]:
    """``data`` cut after its third byte, after the lead byte of its first multi-byte UTF-8
    character (if any), and before its last byte: where a reader that assumes whole events,
    whole lines or whole characters per read comes apart."""
    cuts = {3, len(data) - 1}
    for at, byte in enumerate(data):
        if byte >= 0xC0:  # the lead byte of a multi-byte character: cut after it
            cuts.add(at + 1)
            break
    bounds = [0, *sorted(cut for cut in cuts if 0 < cut < len(data)), len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


def _greeting(model: str) -> str:
    return f"Hello from {model}"


def _phrase(code: int) -> str:
    try:
        return f"{code} {HTTPStatus(code).phrase}"
    except ValueError:
        return str(code)
