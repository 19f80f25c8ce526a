"""OpenAI's Responses API (``POST .../responses``) as the fake upstream speaks it, natively.

An ``openai`` fake answers its Responses route with this wire, as OpenAI's API serves both: a
whole answer is a ``response`` object (``output``: a ``message`` item with ``output_text``, then
a ``function_call`` item when the reply calls a tool; ``usage`` with ``input_tokens``,
``output_tokens`` and their details); a streamed one is the event stream the ``openai`` SDK's
``responses.stream()`` accumulates, each event ``event: <type>`` and ``data: <json>`` with its
``sequence_number``: ``response.created``, ``response.in_progress``, the items added, their
deltas and ends, then ``response.completed`` (no ``[DONE]``). Each answer gets a response id of
its own (``resp_fake_1``, ``resp_fake_2``, ...: numbered across every fake of the process, so
that two fakes never give the same id), so a test can follow ``previous_response_id``. An
error in the middle of a stream is ``response.failed`` with the code the status stands for
(``rate_limit_exceeded`` for a 429, ``invalid_prompt`` for a 400, else ``server_error``).

Like OpenAI's API, the fake stores each response it answered (with its request's ``input`` as
items) and answers the calls about one: ``GET .../responses/{id}`` (the response),
``DELETE .../responses/{id}`` (``deleted``, and it is gone), ``GET .../responses/{id}/input_items``
(a list, ``order`` ``desc`` by default, ``limit`` and ``after`` honoured) and
``POST .../responses/{id}/cancel`` (the response, ``cancelled``); an id it does not hold is
OpenAI's 404.
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Final
from urllib.parse import parse_qs

from asgi_router.testing.hits import Hit
from asgi_router.testing.openai_wire import CREATED, TOOL_CALL_ID, OpenAIWire
from asgi_router.testing.wire_format import ScriptedAnswer

__all__ = ["MESSAGE_ID", "RESPONSE_ID_PREFIX", "ResponsesWire", "failure_code"]

#: Response ids are this and a counter: ``resp_fake_1``, ...
RESPONSE_ID_PREFIX: Final = "resp_fake_"
MESSAGE_ID: Final = "msg_fake"
_FUNCTION_ITEM_ID: Final = "fc_fake"
_CODES: Final[dict[int, str]] = {429: "rate_limit_exceeded", 400: "invalid_prompt"}
#: One numbering for every fake of the process: two fakes never answer with the same id.
_IDS: Final = itertools.count(1)
_STORED_PATH: Final = "/responses/"


def failure_code(status: int) -> str:
    """The Responses failure code a status stands for."""
    return _CODES.get(status, "server_error")


def _dumps(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def _words(body: Any) -> int:
    """The words of a Responses request's ``instructions`` and ``input``: a rough token count."""
    if not isinstance(body, dict):
        return 0
    texts: list[str] = []
    for value in (body.get("instructions"), body.get("input")):
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, list):
            for item in value:
                content = item.get("content") if isinstance(item, dict) else None
                if isinstance(content, str):
                    texts.append(content)
                elif isinstance(content, list):
                    texts += [
                        part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
                    ]
    return sum(len(text.split()) for text in texts)


class ResponsesWire(OpenAIWire):
    """The Responses route of the ``openai`` kind."""

    def __init__(self) -> None:
        self._last = RESPONSE_ID_PREFIX + "0"
        #: Each response answered, by id: the response object and its input items.
        self._stored: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}

    def stored(self) -> dict[str, dict[str, Any]]:
        """The responses held, by id (a copy)."""
        return {response_id: dict(kept[0]) for response_id, kept in list(self._stored.items())}

    def forget(self, response_id: str | None = None) -> None:
        """Forget a response held (``None``: every one)."""
        if response_id is None:
            self._stored.clear()
        else:
            self._stored.pop(response_id, None)

    def _keep(self, response: dict[str, Any], request: Any) -> None:
        self._stored[response["id"]] = (response, _input_items(request))

    def stored_call(self, hit: Hit) -> tuple[int, dict[str, Any]] | None:
        """The status and body of a call about a stored response (``None``: ``hit`` is none)."""
        at = hit.path.rfind(_STORED_PATH)
        if at < 0:
            return None
        response_id, _, last = hit.path[at + len(_STORED_PATH) :].partition("/")
        if not response_id or last not in ("", "input_items", "cancel"):
            return None
        kept = self._stored.get(response_id)
        if kept is None:
            return 404, _not_found(response_id)
        response, items = kept
        if (hit.method, last) == ("GET", ""):
            return 200, response
        if (hit.method, last) == ("DELETE", ""):
            self._stored.pop(response_id, None)
            return 200, {"id": response_id, "object": "response", "deleted": True}
        if (hit.method, last) == ("GET", "input_items"):
            return 200, _listed(items, parse_qs(hit.query))
        if (hit.method, last) == ("POST", "cancel"):
            response["status"] = "cancelled"
            return 200, response
        return None

    def is_chat(self, method: str, path: str) -> bool:
        return method == "POST" and path.rstrip("/").endswith("/responses")

    def refusal(self, hit: Hit) -> tuple[int, str] | None:
        if not hit.model:
            return 400, "The request names no model."
        if isinstance(hit.body, dict) and "input" not in hit.body and "previous_response_id" not in hit.body:
            return 400, "Missing required parameter: 'input'."
        return None

    def usage(self, body: Any, completion_tokens: int) -> dict[str, int]:
        prompt = _words(body)
        return {"input_tokens": prompt, "output_tokens": completion_tokens, "total_tokens": prompt + completion_tokens}

    def _response(self, answer: ScriptedAnswer, status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        usage = dict(answer.usage)
        details = {"cached_tokens": usage.pop("cached_tokens", 0)}
        return {
            "id": self._last,
            "object": "response",
            "created_at": CREATED,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "max_output_tokens": None,
            "model": answer.model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "store": True,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": {**usage, "input_tokens_details": details, "output_tokens_details": {"reasoning_tokens": 0}}
            if status == "completed"
            else None,
            "metadata": {},
        }

    @staticmethod
    def _message(text: str, status: str) -> dict[str, Any]:
        content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
        return {"type": "message", "id": MESSAGE_ID, "status": status, "role": "assistant", "content": content}

    @staticmethod
    def _function_call(answer: ScriptedAnswer, arguments: str, status: str) -> dict[str, Any]:
        assert answer.tool is not None
        return {
            "type": "function_call",
            "id": _FUNCTION_ITEM_ID,
            "call_id": answer.tool.id or TOOL_CALL_ID,
            "name": answer.tool.name,
            "arguments": arguments,
            "status": status,
        }

    def _output(self, answer: ScriptedAnswer) -> list[dict[str, Any]]:
        output = [self._message(answer.text, "completed")] if answer.text or answer.tool is None else []
        if answer.tool is not None:
            output.append(self._function_call(answer, answer.tool.arguments, "completed"))
        return output

    def completion(self, answer: ScriptedAnswer) -> bytes:
        self._last = f"{RESPONSE_ID_PREFIX}{next(_IDS)}"
        response = self._response(answer, "completed", self._output(answer))
        self._keep(response, answer.request)
        return _dumps(response)

    def stream(self, body: Any, answer: ScriptedAnswer) -> list[bytes]:
        self._last = f"{RESPONSE_ID_PREFIX}{next(_IDS)}"
        self._keep(self._response(answer, "completed", self._output(answer)), body)
        events: list[bytes] = []

        def event(kind: str, **fields: Any) -> None:
            payload = {"type": kind, "sequence_number": len(events), **fields}
            events.append(b"event: " + kind.encode() + b"\ndata: " + _dumps(payload) + b"\n\n")

        event("response.created", response=self._response(answer, "in_progress", []))
        event("response.in_progress", response=self._response(answer, "in_progress", []))
        index = 0
        if answer.text or answer.tool is None:
            event("response.output_item.added", output_index=0, item=self._message("", "in_progress"))
            part = {"type": "output_text", "text": "", "annotations": []}
            event("response.content_part.added", item_id=MESSAGE_ID, output_index=0, content_index=0, part=part)
            for piece in answer.pieces:
                where = {"item_id": MESSAGE_ID, "output_index": 0, "content_index": 0}
                event("response.output_text.delta", **where, delta=piece, logprobs=[])
            where = {"item_id": MESSAGE_ID, "output_index": 0, "content_index": 0}
            event("response.output_text.done", **where, text=answer.text, logprobs=[])
            event("response.content_part.done", **where, part={**part, "text": answer.text})
            event("response.output_item.done", output_index=0, item=self._message(answer.text, "completed"))
            index = 1
        if answer.tool is not None:
            event("response.output_item.added", output_index=index, item=self._function_call(answer, "", "in_progress"))
            for piece in answer.tool.pieces:
                event(
                    "response.function_call_arguments.delta", item_id=_FUNCTION_ITEM_ID, output_index=index, delta=piece
                )
            arguments = answer.tool.arguments
            event(
                "response.function_call_arguments.done",
                item_id=_FUNCTION_ITEM_ID,
                output_index=index,
                arguments=arguments,
            )
            item = self._function_call(answer, arguments, "completed")
            event("response.output_item.done", output_index=index, item=item)
        event("response.completed", response=self._response(answer, "completed", self._output(answer)))
        return events

    def stream_error(self, code: int, message: str) -> bytes:
        response = {
            "id": self._last,
            "object": "response",
            "status": "failed",
            "error": {"code": failure_code(code), "message": message},
            "output": [],
        }
        payload = {"type": "response.failed", "sequence_number": 0, "response": response}
        return b"event: response.failed\ndata: " + _dumps(payload) + b"\n\n"


def _input_items(request: Any) -> list[dict[str, Any]]:
    """A request's ``input`` as the stored items OpenAI lists (a string is one user message),
    oldest first, each with an id."""
    given = request.get("input") if isinstance(request, dict) else None
    if isinstance(given, str):
        given = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": given}]}]
    items = [item for item in given if isinstance(item, dict)] if isinstance(given, list) else []
    kept = []
    for index, item in enumerate(items):
        item = {"type": "message", **item}
        if isinstance(item.get("content"), str):
            item["content"] = [{"type": "input_text", "text": item["content"]}]
        kept.append({"id": f"msg_in_{index}", "status": "completed", **item})
    return kept


def _listed(items: list[dict[str, Any]], query: dict[str, list[str]]) -> dict[str, Any]:
    """A page of input items, as ``order``, ``after`` and ``limit`` ask (OpenAI's defaults:
    newest first, 20)."""
    ordered = items if query.get("order", ["desc"])[-1] == "asc" else items[::-1]
    after = query.get("after", [None])[-1]
    ids = [item["id"] for item in ordered]
    if after in ids:
        ordered = ordered[ids.index(after) + 1 :]
    limit = query.get("limit", ["20"])[-1]
    size = int(limit) if limit.isdigit() else 20
    page = ordered[:size]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(ordered) > size,
    }


def _not_found(response_id: str) -> dict[str, Any]:
    message = f"Response with id '{response_id}' not found."
    return {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}}
