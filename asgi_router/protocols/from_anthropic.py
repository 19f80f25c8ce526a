"""A Messages API answer as a chat completion: a whole body, or a stream event by event.

Whole (:func:`completion_from_message`): the ``message`` object becomes one ``chat.completion``:
its text blocks the ``content``, its ``tool_use`` blocks ``tool_calls`` (``input`` serialised
as the ``arguments`` string), ``stop_reason`` the ``finish_reason`` (:data:`FINISH_REASONS`),
``usage`` OpenAI's (cache reads and writes count as prompt tokens, as OpenAI counts cached
ones, and are stated in ``prompt_tokens_details``), ``thinking`` text ``reasoning_content``.

Streamed (:class:`StreamTranslation`): each upstream chunk is fed as it arrives and what its
complete events translate to comes straight back, so nothing is held but the unfinished tail of
an event. ``message_start`` gives the chunks' ``id``, ``model`` and a first chunk with the
assistant role; ``content_block_start`` of a ``tool_use`` block opens a tool call (its id and
name); ``text_delta``, ``input_json_delta`` and ``thinking_delta`` become ``content``, the tool
call's ``arguments`` and ``reasoning_content`` deltas, byte for byte; ``message_delta`` gives
the ``finish_reason`` chunk; ``message_stop`` the usage chunk (when the client asked with
``stream_options.include_usage``) and ``data: [DONE]``. An ``error`` event is kept as
:attr:`~StreamTranslation.failure`: before commit the attempt fails over on it, after commit the
relay ends the stream with the router's in-band error. A stream that ends before
``message_stop`` is not :attr:`~StreamTranslation.finished`: the relay treats it as broken.

Each output chunk is the fixed head built at ``message_start`` plus one encoded delta: no
dictionary is built or serialised whole per event. Text deltas, nearly every event of a stream,
are not even parsed when they come as the Messages API writes them (compact JSON, keys in its
documented order: :data:`_TEXT_DELTA`): their ``text`` is a JSON string already, valid as it
is in a chat-completion chunk, so its bytes are framed anew; any other spelling takes the parse.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Final

from asgi_router.core.usage_bounds import plausible_tokens
from asgi_router.protocols.anthropic_errors import error_event_words
from asgi_router.protocols.sse import EventSplitter

__all__ = [
    "FINISH_REASONS",
    "MAX_EVENT_BYTES",
    "StreamTranslation",
    "Usage",
    "completion_from_message",
    "usage_of",
]

#: The largest stream event translated unless the settings say otherwise (``max_event_bytes``).
MAX_EVENT_BYTES: Final = 1024 * 1024

#: An answer's usage: prompt and completion tokens, and the prompt tokens the provider read from
#: its prompt cache and wrote to it (the prompt includes both).
Usage = tuple[int, int, int, int]
#: Anthropic's ``stop_reason`` and the ``finish_reason`` it becomes (anything else: ``stop``).
FINISH_REASONS: Final[dict[str, str]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_COMPACT_ASCII: Final = json.JSONEncoder(separators=(",", ":"))
_DONE: Final = b"data: [DONE]\n\n"
#: A ``text_delta`` event's data as the Messages API writes it; group 1 is the text's JSON string
#: (no unescaped quote or control character, only JSON's own escapes).
_TEXT_DELTA: Final = re.compile(
    rb'\{"type":"content_block_delta","index":[0-9]{1,9},"delta":\{"type":"text_delta","text":'
    rb'("(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*")\}\}'
)
_DECODE: Final = json.JSONDecoder().decode
# What follows a text delta's JSON string in its chunk.
_TEXT_END: Final = b'},"finish_reason":null}]}\n\n'


def _encode(value: object) -> bytes:
    try:
        return _COMPACT.encode(value).encode()
    except UnicodeEncodeError:  # a lone surrogate the upstream escaped: keep it escaped
        return _COMPACT_ASCII.encode(value).encode()


def usage_of(usage: object, prompt: int = 0, completion: int = 0, read: int = 0, written: int = 0) -> Usage:
    """``(prompt_tokens, completion_tokens, cache reads, cache writes)`` from an Anthropic
    ``usage`` object, keeping what it does not say (or says implausibly:
    ``core/usage_bounds.py``). The prompt is whole: its input plus the cache's reads and writes."""
    if not isinstance(usage, dict):
        return prompt, completion, read, written
    keys = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    counts = [plausible_tokens(usage.get(key)) for key in keys]
    if counts[0] is not None:
        prompt = sum(count for count in counts if count is not None)
        written, read = counts[1] or 0, counts[2] or 0
    output = plausible_tokens(usage.get("output_tokens"))
    return prompt, completion if output is None else output, read, written


def _usage_json(prompt: int, completion: int, read: int = 0, written: int = 0) -> dict[str, Any]:
    """OpenAI's ``usage``; the cache's reads as OpenAI states them (``cached_tokens``), its writes
    beside them (``cache_write_tokens``, as OpenRouter states them), only when there are any."""
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion}
    usage["total_tokens"] = prompt + completion
    if read or written:
        usage["prompt_tokens_details"] = {"cached_tokens": read, "cache_write_tokens": written}
    return usage


def completion_from_message(body: bytes, created: int | None = None) -> bytes | None:
    """The ``chat.completion`` for a Messages API ``message`` body; ``None`` if it is not one."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if (
        not isinstance(message, dict)
        or message.get("type") != "message"
        or not isinstance(message.get("content"), list)
    ):
        return None
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in message["content"]:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thinking.append(block["thinking"])
        elif kind == "tool_use":
            arguments = _COMPACT.encode(block.get("input", {}))
            function = {"name": block.get("name"), "arguments": arguments}
            calls.append({"id": block.get("id"), "type": "function", "function": function})
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        reply["tool_calls"] = calls
    if thinking:
        reply["reasoning_content"] = "".join(thinking)
    stop = message.get("stop_reason")
    completion = {
        "id": message.get("id"),
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": message.get("model"),
        "choices": [
            {
                "index": 0,
                "message": reply,
                "finish_reason": FINISH_REASONS.get(stop, "stop") if isinstance(stop, str) else "stop",
                "logprobs": None,
            }
        ],
        "usage": _usage_json(*usage_of(message.get("usage"))),
    }
    return _encode(completion)


class StreamTranslation:
    """One streamed answer's translation: feed upstream chunks in order, send what comes back."""

    __slots__ = (
        "_blocks",
        "_content",
        "_events",
        "_finish_sent",
        "_head",
        "_include_usage",
        "_tools",
        "empty",
        "failure",
        "finished",
        "ready",
        "usage",
    )

    def __init__(self, include_usage: bool, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._events = EventSplitter(max_event_bytes)
        self._include_usage = include_usage
        self._head = self._content = b""
        self._set_head("chatcmpl-router", "", int(time.time()))
        #: Content block index -> tool call index, for the ``tool_use`` blocks seen so far.
        self._blocks: dict[int, int] = {}
        self._tools = 0
        self._finish_sent = False
        #: Something a client can show has been translated (content, a tool call, the end):
        #: the attempt may commit.
        self.ready = False
        #: ``message_stop`` was translated and ``[DONE]`` written.
        self.finished = False
        #: The message stopped before anything a client shows (no content, tool call or
        #: ``stop_reason``): an empty answer, which fails over before commit.
        self.empty = False
        #: ``(type, message)`` of an ``error`` event; nothing is translated after one.
        self.failure: tuple[str, str] | None = None
        #: ``(prompt_tokens, completion_tokens, cache reads, cache writes)`` as the upstream
        #: counted them so far.
        self.usage: Usage = (0, 0, 0, 0)

    def _set_head(self, message_id: str, model: str, created: int) -> None:
        """The fields every chunk starts with, and a text delta's whole start, built once."""
        self._head = (
            b'{"id":'
            + _encode(message_id)
            + b',"object":"chat.completion.chunk","created":%d,"model":' % created
            + _encode(model)
        )
        self._content = b"data: " + self._head + b',"choices":[{"index":0,"delta":{"content":'

    def _chunk(self, delta: bytes, finish: bytes = b"null") -> bytes:
        head = b"data: " + self._head + b',"choices":[{"index":0,"delta":'
        return head + delta + b',"finish_reason":' + finish + b"}]}\n\n"

    def feed(self, chunk: bytes) -> bytes:
        """What the complete events in ``chunk`` (with what was held before it) translate to."""
        if self.finished or self.failure is not None:
            return b""
        out = b""
        for data in self._events.feed(chunk):
            text = _TEXT_DELTA.fullmatch(data)
            if text is not None:
                if text[1] != b'""':
                    self.ready = True
                    out += self._content + text[1] + _TEXT_END
                continue
            try:
                event = _DECODE(data.decode())
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                event = None
            if not isinstance(event, dict):
                self.failure = ("api_error", "the upstream sent an event that is not a JSON object")
                break
            out += self._translate(event)
            if self.finished or self.failure is not None:
                break
        if self._events.too_large and self.failure is None and not self.finished:
            # Failed as the upstream's own server error: before commit the next member is tried,
            # after it the client's stream ends with the in-band error.
            self.failure = ("api_error", f"the upstream sent an event larger than {self._events.limit} bytes")
        return out

    def _translate(self, event: dict[str, Any]) -> bytes:
        kind = event.get("type")
        if kind == "content_block_delta":
            return self._delta(event)
        if kind == "content_block_start":
            return self._block_start(event)
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                model, message_id = message.get("model"), message.get("id")
                self._set_head(
                    message_id if isinstance(message_id, str) else "chatcmpl-router",
                    model if isinstance(model, str) else "",
                    int(time.time()),
                )
                self.usage = usage_of(message.get("usage"), *self.usage)
            return self._chunk(b'{"role":"assistant","content":""}')
        if kind == "message_delta":
            self.usage = usage_of(event.get("usage"), *self.usage)
            delta = event.get("delta")
            stop = delta.get("stop_reason") if isinstance(delta, dict) else None
            return self._finish(stop if isinstance(stop, str) else None)
        if kind == "message_stop":
            return self._stop()
        if kind == "error":
            self.failure = error_event_words(event)
        return b""  # ping, content_block_stop, and types added after this was written

    def _delta(self, event: dict[str, Any]) -> bytes:
        delta = event.get("delta")
        if not isinstance(delta, dict):
            return b""
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if isinstance(text, str) and text:
                self.ready = True
                return self._content + _encode(text) + _TEXT_END
        elif kind == "input_json_delta":
            partial = delta.get("partial_json")
            index = event.get("index")
            tool = self._blocks.get(index) if isinstance(index, int) else None
            if isinstance(partial, str) and partial and tool is not None:
                self.ready = True
                arguments = b'{"arguments":' + _encode(partial) + b"}"
                return self._chunk(b'{"tool_calls":[{"index":%d,"function":' % tool + arguments + b"}]}")
        elif kind == "thinking_delta":
            thinking = delta.get("thinking")
            if isinstance(thinking, str) and thinking:
                self.ready = True
                return self._chunk(b'{"reasoning_content":' + _encode(thinking) + b"}")
        return b""  # signature_delta, citations_delta

    def _block_start(self, event: dict[str, Any]) -> bytes:
        block, index = event.get("content_block"), event.get("index")
        if not isinstance(block, dict) or not isinstance(index, int):
            return b""
        if block.get("type") == "text" and isinstance(block.get("text"), str) and block["text"]:
            self.ready = True
            return self._content + _encode(block["text"]) + _TEXT_END
        if block.get("type") != "tool_use":
            return b""
        tool = self._blocks[index] = self._tools
        self._tools += 1
        self.ready = True
        call = {"index": tool, "id": block.get("id"), "type": "function"}
        call["function"] = {"name": block.get("name"), "arguments": ""}
        return self._chunk(b'{"tool_calls":[' + _encode(call) + b"]}")

    def _finish(self, stop: str | None) -> bytes:
        if self._finish_sent:
            return b""
        self._finish_sent = self.ready = True
        reason = FINISH_REASONS.get(stop, "stop") if stop is not None else "stop"
        return self._chunk(b"{}", b'"' + reason.encode() + b'"')

    def _stop(self) -> bytes:
        self.empty = not self.ready
        out = self._finish(None)
        if self._include_usage:
            usage = _encode(_usage_json(*self.usage))
            out += b"data: " + self._head + b',"choices":[],"usage":' + usage + b"}\n\n"
        self.finished = True
        return out + _DONE
