"""A chat completion as a Responses API answer: the whole object, or its event stream.

The other half of ``responses_to_chat.py``. A translated member's answer is a chat completion (an
Anthropic member's, first made one by ``from_anthropic.py``); the client asked the Responses API,
so it gets a ``response`` object: an id the router makes (``resp_...``: a translated member
stores nothing, so the id names nothing anyone can fetch or continue, and the router does not
remember it for affinity), ``"store": false``, ``status`` ``completed`` (``incomplete`` when the
answer was cut by its token limit or a content filter), ``output`` a ``message`` item with one
``output_text`` part and a ``function_call`` item per tool call, and ``usage`` in the Responses
API's words. The request's own settings are echoed as OpenAI echoes them (:func:`echo_of`).

Streamed (:class:`ResponsesStream`), each upstream chunk is fed as it arrives and what its
complete events translate to comes straight back: ``response.created`` and
``response.in_progress`` first (held by the attempt like a native stream's opening events), then
``output_item.added`` and ``content_part.added`` when the text begins, an ``output_text.delta``
per content delta, ``output_item.added`` and ``function_call_arguments.delta`` per tool call, and
at the upstream's ``[DONE]`` the closing events (``output_text.done``, ``content_part.done``,
``function_call_arguments.done``, ``output_item.done``) and ``response.completed`` (or
``response.incomplete``) with the usage. Every event has its ``sequence_number``. The closing
events state each item whole, as the protocol (and the ``openai`` SDK's stream helper, which
checks them) wants: so the text and the arguments said so far are kept, nothing else. An error
chunk is kept as :attr:`ResponsesStream.failure` (before commit the attempt fails over on it,
after it the relay ends the stream with the route's in-band error); a stream that ends before
``[DONE]`` is not :attr:`~ResponsesStream.finished`, a break.

For an Anthropic member the stream is composed: its events go through
:class:`~asgi_router.protocols.from_anthropic.StreamTranslation` first (it writes chat chunks),
whose failure, emptiness and usage (cache writes included) are the composed stream's.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any, Final

from asgi_router.core.usage_bounds import plausible_tokens
from asgi_router.protocols.from_anthropic import MAX_EVENT_BYTES, StreamTranslation, Usage
from asgi_router.protocols.sse import EventSplitter

__all__ = ["ResponsesStream", "echo_of", "new_response_id", "response_from_completion"]

#: Request fields a Responses object states back, and what it says when the request set none.
_ECHOED: Final[dict[str, object]] = {
    "instructions": None,
    "max_output_tokens": None,
    "metadata": {},
    "parallel_tool_calls": True,
    "temperature": None,
    "text": {"format": {"type": "text"}},
    "tool_choice": "auto",
    "tools": [],
    "top_p": None,
}
#: A chat ``finish_reason`` that cuts the answer short, and the Responses API's word for why.
_INCOMPLETE: Final = {"length": "max_output_tokens", "content_filter": "content_filter"}
#: An upstream error's words and the Anthropic error type the attempt reads them as (the type
#: decides the status it fails over as: ``anthropic_errors.status_of_error_type``).
_ERROR_TYPES: Final = {
    "rate_limit_exceeded": "rate_limit_error",
    "rate_limit_error": "rate_limit_error",
    "overloaded_error": "overloaded_error",
}
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"))


def new_response_id() -> str:
    """An id for a translated answer's response (``resp_`` as OpenAI's, random: it names nothing stored)."""
    return "resp_" + uuid.uuid4().hex


def echo_of(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The request's settings a Responses object states back (once per request)."""
    return {name: payload[name] if payload.get(name) is not None else default for name, default in _ECHOED.items()}


def _usage(usage: object) -> Usage:
    """``(prompt, completion, cache reads, 0)`` from a chat ``usage`` (``(0, 0, 0, 0)``: none)."""
    if not isinstance(usage, dict):
        return 0, 0, 0, 0
    details = usage.get("prompt_tokens_details")
    cached = plausible_tokens(details.get("cached_tokens")) if isinstance(details, dict) else None
    written = plausible_tokens(details.get("cache_write_tokens")) if isinstance(details, dict) else None
    return (
        plausible_tokens(usage.get("prompt_tokens")) or 0,
        plausible_tokens(usage.get("completion_tokens")) or 0,
        cached or 0,
        written or 0,
    )


def _reasoning_tokens(usage: object) -> int:
    details = usage.get("completion_tokens_details") if isinstance(usage, dict) else None
    return (plausible_tokens(details.get("reasoning_tokens")) if isinstance(details, dict) else None) or 0


def _usage_json(usage: Usage, reasoning: int = 0) -> dict[str, Any]:
    """The Responses API's ``usage``; the prompt cache's writes (an Anthropic member's) stated beside
    its reads as ``cache_write_tokens``, only when there are any (as the chat translation states them)."""
    prompt, completion, read, written = usage
    details: dict[str, int] = {"cached_tokens": read}
    if written:
        details["cache_write_tokens"] = written
    return {
        "input_tokens": prompt,
        "input_tokens_details": details,
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": prompt + completion,
    }


def _response(
    response_id: str,
    created: int,
    model: str,
    echo: Mapping[str, Any],
    status: str,
    output: list[dict[str, Any]],
    usage: dict[str, Any] | None,
    finish: str | None = None,
) -> dict[str, Any]:
    incomplete = _INCOMPLETE.get(finish) if finish is not None else None
    if status == "completed" and incomplete is not None:
        status = "incomplete"
    return {
        "id": response_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": incomplete} if status == "incomplete" else None,
        "model": model,
        "output": output,
        "previous_response_id": None,
        "store": False,
        "usage": usage,
        **echo,
    }


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": []}
    return {"type": "message", "id": item_id, "status": status, "role": "assistant", "content": [part]}


def _call_item(item_id: str, call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


def response_from_completion(body: bytes, echo: Mapping[str, Any], response_id: str | None = None) -> bytes | None:
    """The ``response`` object for a ``chat.completion`` body; ``None`` if it is not one."""
    try:
        completion = json.loads(body)
    except (ValueError, RecursionError):
        return None
    choices = completion.get("choices") if isinstance(completion, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        return None
    response_id = response_id or new_response_id()
    suffix = response_id.removeprefix("resp_")
    output: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, str) and content:
        output.append(_message_item(f"msg_{suffix}", content))
    calls = message.get("tool_calls")
    for index, call in enumerate(calls if isinstance(calls, list) else ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return None
        arguments = function.get("arguments")
        call_id = call.get("id") if isinstance(call.get("id"), str) else f"call_{suffix}_{index}"
        output.append(
            _call_item(
                f"fc_{suffix}_{index}", call_id, function["name"], arguments if isinstance(arguments, str) else "{}"
            )
        )
    usage = completion.get("usage")
    created = completion.get("created")
    model = completion.get("model")
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    response = _response(
        response_id,
        created if isinstance(created, int) and not isinstance(created, bool) else int(time.time()),
        model if isinstance(model, str) else "",
        echo,
        "completed",
        output,
        _usage_json(_usage(usage), _reasoning_tokens(usage)),
        finish if isinstance(finish, str) else None,
    )
    return _COMPACT.encode(response).encode()


class _Item:
    """One output item of a translated stream, as said so far."""

    __slots__ = ("call_id", "id", "index", "name", "said")

    def __init__(self, index: int, item_id: str, name: str | None = None, call_id: str = "") -> None:
        self.index = index
        self.id = item_id
        #: ``None``: the message; else the function's name.
        self.name = name
        self.call_id = call_id
        #: The text, or the arguments, so far (the closing events state them whole).
        self.said: list[str] = []

    def whole(self, status: str = "completed") -> dict[str, Any]:
        if self.name is None:
            return _message_item(self.id, "".join(self.said), status)
        return _call_item(self.id, self.call_id, self.name, "".join(self.said), status)


class ResponsesStream:
    """One translated stream: feed the upstream's chunks in order, send what comes back.

    The same face as :class:`~asgi_router.protocols.from_anthropic.StreamTranslation` (``feed``,
    ``ready``, ``finished``, ``empty``, ``failure``, ``usage``), which the attempt and the relay read.
    """

    __slots__ = (
        "_calls",
        "_created",
        "_echo",
        "_events",
        "_finish",
        "_inner",
        "_items",
        "_message",
        "_model",
        "_reasoning",
        "_sequence",
        "_started",
        "empty",
        "failure",
        "finished",
        "ready",
        "response_id",
        "usage",
    )

    def __init__(
        self, echo: Mapping[str, Any], anthropic: bool = False, max_event_bytes: int = MAX_EVENT_BYTES
    ) -> None:
        self._events = EventSplitter(max_event_bytes)
        #: An Anthropic member's events, translated to chat chunks first.
        self._inner = StreamTranslation(True, max_event_bytes) if anthropic else None
        self._echo = echo
        #: The id the router gave the response (a translated member's names nothing stored).
        self.response_id = new_response_id()
        self._created = int(time.time())
        self._model = ""
        self._sequence = 0
        self._started = False
        self._items: list[_Item] = []
        self._message: _Item | None = None
        #: Tool call index (the chat chunks') -> its item.
        self._calls: dict[int, _Item] = {}
        self._finish: str | None = None
        self._reasoning = 0
        #: Something a client shows has been translated (text, a tool call, the end): the attempt
        #: may commit.
        self.ready = False
        #: ``[DONE]`` was translated and ``response.completed`` (or ``incomplete``) written.
        self.finished = False
        #: The answer ended before anything a client shows: an empty answer, failed over.
        self.empty = False
        #: ``(Anthropic error type, message)`` of an error the upstream sent.
        self.failure: tuple[str, str] | None = None
        #: ``(prompt, completion, cache reads, cache writes)`` as the upstream counted them.
        self.usage: Usage = (0, 0, 0, 0)

    def feed(self, chunk: bytes) -> bytes:
        """What the complete events in ``chunk`` (with what was held before it) translate to."""
        if self.finished or self.failure is not None:
            return b""
        inner = self._inner
        if inner is not None:
            chunk = inner.feed(chunk)
            if inner.failure is not None:
                self.failure = inner.failure
        out = b""
        for data in self._events.feed(chunk):
            out += self._translate(data)
            if self.finished or self.failure is not None:
                break
        if self._events.too_large and self.failure is None and not self.finished:
            self.failure = ("api_error", f"the upstream sent an event larger than {self._events.limit} bytes")
        if inner is not None:
            self.empty = self.empty or inner.empty  # the message stopped before anything a client shows
            if inner.finished:
                self.usage = inner.usage  # the Messages API's count: cache writes too
        return out

    def _event(self, kind: str, fields: dict[str, Any]) -> bytes:
        payload = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return b"event: " + kind.encode() + b"\ndata: " + _COMPACT.encode(payload).encode() + b"\n\n"

    def _whole(self, status: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
        output = [item.whole() for item in self._items] if status != "in_progress" else []
        finish = self._finish if status != "in_progress" else None
        return _response(self.response_id, self._created, self._model, self._echo, status, output, usage, finish)

    def _translate(self, data: bytes) -> bytes:
        if data == b"[DONE]":
            return self._done()
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            chunk = None
        if not isinstance(chunk, dict):
            self.failure = ("api_error", "the upstream sent an event that is not a JSON object")
            return b""
        out = b""
        if not self._started:
            self._started = True
            model = chunk.get("model")
            self._model = model if isinstance(model, str) else ""
            opened = self._whole("in_progress")
            out = self._event("response.created", {"response": opened})
            out += self._event("response.in_progress", {"response": opened})
        error = chunk.get("error")
        if error is not None:
            self.failure = _failure(error)
            return out
        if "usage" in chunk and isinstance(chunk["usage"], dict):
            self.usage = _usage(chunk["usage"])
            self._reasoning = _reasoning_tokens(chunk["usage"])
        choices = chunk.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
        if choice is None:
            return out
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str) and content:
                out += self._text(content)
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                for call in calls:
                    if isinstance(call, dict):
                        out += self._call(call)
        finish = choice.get("finish_reason")
        if isinstance(finish, str):
            self._finish = finish
            self.ready = True
        return out

    def _added(self, item: _Item) -> bytes:
        self._items.append(item)
        return self._event(
            "response.output_item.added", {"output_index": item.index, "item": item.whole("in_progress")}
        )

    def _text(self, text: str) -> bytes:
        self.ready = True
        out = b""
        message = self._message
        if message is None:
            message = self._message = _Item(len(self._items), "msg_" + self.response_id.removeprefix("resp_"))
            out = self._added(message)
            part = {"type": "output_text", "text": "", "annotations": []}
            out += self._event(
                "response.content_part.added",
                {"item_id": message.id, "output_index": message.index, "content_index": 0, "part": part},
            )
        message.said.append(text)
        delta = {"item_id": message.id, "output_index": message.index, "content_index": 0, "delta": text}
        return out + self._event("response.output_text.delta", {**delta, "logprobs": []})

    def _call(self, call: Mapping[str, Any]) -> bytes:
        index = call.get("index", 0)
        said = call.get("function")
        function: Mapping[str, Any] = said if isinstance(said, dict) else {}
        item = self._calls.get(index) if isinstance(index, int) else None
        out = b""
        if item is None:
            name = function.get("name")
            if not isinstance(name, str) or not isinstance(index, int):
                return b""  # a call's first chunk names it; a stray fragment says nothing
            call_id = call.get("id")
            suffix = self.response_id.removeprefix("resp_")
            item = _Item(len(self._items), f"fc_{suffix}_{index}", name, call_id if isinstance(call_id, str) else "")
            if not item.call_id:
                item.call_id = f"call_{suffix}_{index}"
            self._calls[index] = item
            self.ready = True
            out = self._added(item)
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            item.said.append(arguments)
            delta = {"item_id": item.id, "output_index": item.index, "delta": arguments}
            out += self._event("response.function_call_arguments.delta", delta)
        return out

    def _done(self) -> bytes:
        self.empty = not self.ready
        out = b"" if self._started else self._event("response.created", {"response": self._whole("in_progress")})
        for item in self._items:
            whole = item.whole()
            at = {"item_id": item.id, "output_index": item.index}
            if item.name is None:
                part = whole["content"][0]
                out += self._event(
                    "response.output_text.done", {**at, "content_index": 0, "text": part["text"], "logprobs": []}
                )
                out += self._event("response.content_part.done", {**at, "content_index": 0, "part": part})
            else:
                out += self._event(
                    "response.function_call_arguments.done", {**at, "name": item.name, "arguments": whole["arguments"]}
                )
            out += self._event("response.output_item.done", {"output_index": item.index, "item": whole})
        if self._inner is not None and self._inner.finished:
            self.usage = self._inner.usage
        response = self._whole("completed", _usage_json(self.usage, self._reasoning))
        kind = "response.completed" if response["status"] == "completed" else "response.incomplete"
        self.finished = True
        return out + self._event(kind, {"response": response})


def _failure(error: object) -> tuple[str, str]:
    """``(Anthropic error type, message)`` for a chat stream's error object."""
    if not isinstance(error, dict):
        return "api_error", "the upstream's stream said it failed"
    code, kind, message = error.get("code"), error.get("type"), error.get("message")
    words = message if isinstance(message, str) else "the upstream's stream said it failed"
    for said in (code, kind):
        if isinstance(said, str) and said in _ERROR_TYPES:
            return _ERROR_TYPES[said], words
    return "api_error", words
