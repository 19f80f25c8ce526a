"""Anthropic's prompt cache marks (``cache_control``) in a chat-completion request: found,
stripped for an OpenAI-protocol upstream, and added to a translated request's long prefix.

Clients of OpenRouter and LiteLLM mark the content parts (and tools) of a chat request with
Anthropic's ``cache_control: {"type": "ephemeral"}`` so that Claude caches the prompt up to
there. The marks mean something only to Anthropic: an OpenAI-compatible server ignores them at
best and, if strict, refuses the request for an unknown field, which after a failover to such a
member would turn a cache hint into an error. So a request sent to an OpenAI-protocol provider
goes without them (:func:`without_marks`), and the translation to the Messages API keeps them on
the blocks the client marked (``to_anthropic.py``).

A request that carries no marks of its own still benefits from Anthropic's cache when its tools
or its system prompt are long: :func:`add_breakpoints` marks the last tool and the last system
block of a translated request when each is long enough for Anthropic to cache (a shorter prefix
is not cached, and a mark on it would only spend one of the four breakpoints a request may have).

Finding the marks is one search of the body's bytes (:data:`MARK_BYTES`, once per request): a
request without them, nearly every one, costs nothing more. ``"cache_control"`` between quotes cannot
occur inside a JSON string (its quotes would be escaped), only as a member name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

__all__ = [
    "EPHEMERAL",
    "MARK",
    "MARK_BYTES",
    "MAX_BREAKPOINTS",
    "MIN_CACHED_TOKENS",
    "add_breakpoints",
    "has_marks",
    "may_carry_marks",
    "without_marks",
]

#: The member that marks a block as the end of a cached prefix.
MARK: Final = "cache_control"
#: The mark as it appears in a body's bytes (only ever as a member name: see the module docstring).
MARK_BYTES: Final = b'"cache_control"'
#: The mark the router adds: Anthropic's default cache lifetime (five minutes).
EPHEMERAL: Final[Mapping[str, str]] = {"type": "ephemeral"}
#: The shortest prefix Anthropic's larger models cache, in tokens.
MIN_CACHED_TOKENS: Final = 1024
#: The most marks the Messages API takes in one request.
MAX_BREAKPOINTS: Final = 4
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def may_carry_marks(body: bytes) -> bool:
    """Whether a request body may carry marks (a member named ``cache_control`` somewhere):
    ``False`` means it carries none. (``find``: ``in`` on bytes first tries its operand as an
    integer, an exception raised and cleared; docs/performance.md.)"""
    return body.find(MARK_BYTES) >= 0


def _marked_part(part: object) -> bool:
    return isinstance(part, dict) and MARK in part


def _marked_tool(tool: object) -> bool:
    if not isinstance(tool, dict):
        return False
    function = tool.get("function")
    return MARK in tool or (isinstance(function, dict) and MARK in function)


def has_marks(payload: Mapping[str, Any]) -> bool:
    """Whether a chat request marks a message, a content part or a tool (a walk of the payload,
    for a request with no body bytes to search: a continuation the router built)."""
    messages = payload.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if isinstance(message, dict):
            content = message.get("content")
            if MARK in message or (isinstance(content, list) and any(_marked_part(p) for p in content)):
                return True
    tools = payload.get("tools")
    return isinstance(tools, list) and any(_marked_tool(tool) for tool in tools)


def _unmarked(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in item.items() if key != MARK}


def _message_without(message: object) -> object:
    if not isinstance(message, dict):
        return message
    content = message.get("content")
    if isinstance(content, list) and any(_marked_part(part) for part in content):
        message = {**message, "content": [_unmarked(p) if _marked_part(p) else p for p in content]}
    return _unmarked(message) if MARK in message else message


def _tool_without(tool: object) -> object:
    if not _marked_tool(tool):
        return tool
    assert isinstance(tool, dict)
    function = tool.get("function")
    stripped = _unmarked(tool)
    if isinstance(function, dict) and MARK in function:
        stripped["function"] = _unmarked(function)
    return stripped


def without_marks(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """``payload`` without a mark on any message, content part or tool (a copy: the client's
    payload is left as it is); ``None`` when it has none to strip."""
    if not has_marks(payload):
        return None
    stripped = dict(payload)
    messages = payload.get("messages")
    if isinstance(messages, list):
        stripped["messages"] = [_message_without(message) for message in messages]
    tools = payload.get("tools")
    if isinstance(tools, list):
        stripped["tools"] = [_tool_without(tool) for tool in tools]
    return stripped


def _count_marks(request: Mapping[str, Any]) -> int:
    """The marks a Messages API request carries (on tools, system blocks and content blocks)."""
    marks = 0
    for block in _blocks(request.get("tools")) + _blocks(request.get("system")):
        marks += MARK in block
    messages = request.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for block in _blocks(content):
            marks += MARK in block
            marks += sum(MARK in inner for inner in _blocks(block.get("content")))  # a tool result's
    return marks


def _blocks(value: object) -> list[dict[str, Any]]:
    return [block for block in value if isinstance(block, dict)] if isinstance(value, list) else []


def add_breakpoints(request: dict[str, Any], chars_per_token: int) -> None:
    """Mark the last system block and the last tool of a translated Messages API request when
    each is at least :data:`MIN_CACHED_TOKENS` long (estimated at ``chars_per_token``), unmarked,
    and the request has a breakpoint left: the system prompt first (its prefix holds the tools
    too)."""
    system, tools = _blocks(request.get("system")), _blocks(request.get("tools"))
    if not system and not tools:
        return
    least = MIN_CACHED_TOKENS * chars_per_token
    left = MAX_BREAKPOINTS - _count_marks(request)
    system_chars = sum(len(block["text"]) for block in system if isinstance(block.get("text"), str))
    if left > 0 and system and MARK not in system[-1] and system_chars >= least:
        system[-1][MARK] = dict(EPHEMERAL)
        left -= 1
    if left > 0 and tools and MARK not in tools[-1] and len(_COMPACT.encode(tools)) >= least:
        tools[-1][MARK] = dict(EPHEMERAL)
