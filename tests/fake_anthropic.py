"""The suite's Anthropic upstream: the kit's ``FakeUpstream(kind="anthropic")``, scripted by model id.

The kit speaks the Messages API (``asgi_router.testing.anthropic_wire``) and refuses what the
real API refuses (no ``anthropic-version``, ``max_tokens`` or ``messages``: 400
``invalid_request_error``). This adapter adds a key check (any key but its own: 401
``authentication_error``, so a revoked key can be tested) and maps model ids onto the kit's
replies, so that a router config names it once (``claude/<scenario>``):

============================  ===============================================================
``ok`` (and any other id)     the text :data:`TEXT` ("Hello from Claude — 你好") in five
                              ``text_delta`` events (:data:`TEXT_DELTAS`), or the whole message
``tool``                      the text "Let me check.", then a ``get_weather`` ``tool_use``
                              block whose ``input_json_delta`` pieces make
                              :data:`TOOL_ARGUMENTS`; once the request's last turn holds a
                              ``tool_result``, the text "It is <result>." instead (a round trip)
``echo``                      the text is the JSON request body the upstream received
``overloaded``                529 ``overloaded_error``
``ratelimited-<s>``           429 ``rate_limit_error`` with ``retry-after: <s>``
``too-long``                  400 ``invalid_request_error`` "prompt is too long: ..."
``invalid``                   400 ``invalid_request_error`` (any other refusal)
``forbidden``                 403 ``permission_error``
``error-first``               200, then an ``error`` event (``overloaded_error``) as the first event
``error-<n>``                 200, ``n`` events of the kit's default stream ("Hello from
                              error-<n>"), then an ``error`` event
``break-<n>``                 200, ``n`` events of the kit's default stream, then the connection
                              drops
============================  ===============================================================

Streams are cut at awkward places (``reply.split_writes``): inside the ``event:`` field name,
inside a multi-byte UTF-8 character, and between the two newlines that end an event, each piece
written on its own. Every answer carries ``request-id: req_fake`` (:data:`REQUEST_ID`). Every
request is a kit :class:`~asgi_router.testing.Hit`, found by the router's ``x-request-id``
(:meth:`FakeAnthropic.received`).
"""

from __future__ import annotations

import json
from typing import Any, Final

import httpx2

from asgi_router.testing import FakeUpstream, Hit, reply
from asgi_router.testing.anthropic_wire import REQUEST_ID
from asgi_router.testing.reply import Reply

__all__ = ["REQUEST_ID", "TEXT", "TEXT_DELTAS", "TOOL_ARGUMENTS", "USAGE", "FakeAnthropic"]

TEXT_DELTAS: Final = ("Hello", " from", " Claude", " —", " 你好")
TEXT: Final = "".join(TEXT_DELTAS)
TOOL_ARGUMENTS: Final = '{"location": "Paris, FR", "unit": "°C"}'
USAGE: Final = {"input_tokens": 11, "output_tokens": 7}
_OVERLOADED: Final = "Overloaded"


def refusal(kind: str, message: str) -> dict[str, Any]:
    """An error body as the Messages API writes it (the kit's ``request_id`` included)."""
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": REQUEST_ID}


_FIXED: Final[dict[str, Reply]] = {
    "overloaded": reply.status(529),  # the kit's default body: an overloaded_error
    "too-long": reply.status(
        400, body=refusal("invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum")
    ),
    "invalid": reply.status(
        400, body=refusal("invalid_request_error", "messages.0.content: text content blocks must be non-empty")
    ),
    "forbidden": reply.status(403),  # a permission_error
    "error-first": reply.stream_error(0, 529, _OVERLOADED),
}


class FakeAnthropic(FakeUpstream):
    """The kit's Anthropic fake, accepting only ``key`` and answering by scenario (the module
    docstring)."""

    def __init__(self, key: str) -> None:
        super().__init__(kind="anthropic", api_key=key)

    def reply_for(self, hit: Hit) -> Reply:
        bearer = hit.headers.get("authorization", "").removeprefix("Bearer ")
        if self.api_key not in (hit.headers.get("x-api-key"), bearer):
            return reply.status(401)  # an authentication_error
        checked = super().reply_for(hit)
        if not isinstance(checked, reply.Ok):  # the kit's own answer: a refusal, a model list, a 404
            return checked
        return self._scenario(hit)

    def _scenario(self, hit: Hit) -> Reply:
        model = hit.model
        name, _, arg = model.partition("-")
        if model in _FIXED:
            return _FIXED[model]
        if name == "ratelimited":
            return reply.status(429, retry_after=arg)  # a rate_limit_error
        if name == "error":
            return reply.split_writes(reply.stream_error(int(arg), 529, _OVERLOADED))
        if name == "break":
            return reply.split_writes(reply.broken_stream(int(arg)))
        if model == "echo":
            return reply.ok(json.dumps(hit.body, ensure_ascii=False), usage=USAGE)
        if model == "tool":
            return reply.split_writes(_tool(hit.body))
        return reply.split_writes(reply.ok(TEXT, usage=USAGE))

    def received(self, request_id: str) -> list[Hit]:
        """What the fake received under ``request_id``, in order."""
        return [hit for hit in self.hits if hit.request_id == request_id]

    def answer(self, body: dict[str, Any]) -> bytes:
        """The bytes this upstream answers ``body`` with, asked directly (no router between)."""
        headers = {"x-api-key": self.api_key, "anthropic-version": "2023-06-01"}
        return httpx2.post(f"{self.base_url}/messages", json=body, headers=headers, timeout=10).content


def _tool(body: Any) -> Reply:
    """A call of ``get_weather``, or once its result is in the request's last turn, the answer."""
    last = body["messages"][-1]
    content = last.get("content")
    results = [
        block
        for block in (content if isinstance(content, list) else [])
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    if results:
        said = results[0]["content"]
        said = said if isinstance(said, str) else "".join(part["text"] for part in said)
        return reply.ok(f"It is {said}.", usage=USAGE)
    return reply.tool_call("get_weather", TOOL_ARGUMENTS, text="Let me check.", usage=USAGE)
