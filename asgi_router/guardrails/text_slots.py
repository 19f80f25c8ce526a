"""Where a request's or an answer's checked texts are, so that masked ones can be put back.

A slot is a container and a key (a dict and a field name, or a list and an index): reading the
slots gives the texts a check sees, writing them puts masked texts back in place, so every
candidate (and every continuation of a stream, built from the same payload) is sent them.

The prompt's texts, by route: chat completions' messages (system, user, assistant, tool results,
text parts) and tool-call ``arguments``; Anthropic Messages' ``system``, text blocks, tool
results and tool-use ``input`` strings; the Responses API's ``instructions`` and ``input`` (a
string, or items' text, ``output`` and ``arguments``); embeddings' ``input``; a legacy
completion's ``prompt``. An answer's: a chat completion's message content and tool-call
arguments; a Messages answer's text blocks and tool-use input strings; a Responses answer's
output text and arguments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

__all__ = ["Slot", "answer_slots", "prompt_slots", "read_slots", "write_slots"]

#: A text's place: its container and its key there.
Slot: TypeAlias = tuple[Any, Any]

# Nesting deeper than this is not walked (tool-use inputs are the caller's JSON).
_DEPTH = 32


def read_slots(slots: list[Slot]) -> tuple[str, ...]:
    return tuple(container[key] for container, key in slots)


def write_slots(slots: list[Slot], texts: tuple[str, ...] | list[str]) -> None:
    for (container, key), text in zip(slots, texts, strict=True):
        container[key] = text


def _text(slots: list[Slot], container: Any, key: Any) -> None:
    if isinstance(container[key], str):
        slots.append((container, key))


def _leaves(slots: list[Slot], value: Any, depth: int = 0) -> None:
    """Every string inside a JSON value (a tool-use ``input``)."""
    if depth > _DEPTH:
        return
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(item, str):
            slots.append((value, key))
        else:
            _leaves(slots, item, depth + 1)


def _content(slots: list[Slot], holder: dict[str, Any], key: str = "content") -> None:
    """A message's content: a string, or a list of parts/blocks."""
    content = holder.get(key)
    if isinstance(content, str):
        slots.append((holder, key))
        return
    if not isinstance(content, list):
        return
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if "text" in part:
            _text(slots, part, "text")
        if kind == "tool_result" or kind == "function_call_output":
            _content(slots, part, "content" if kind == "tool_result" else "output")
        elif kind == "tool_use":
            _leaves(slots, part.get("input"))


def _tool_calls(slots: list[Slot], message: dict[str, Any]) -> None:
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and "arguments" in function:
                _text(slots, function, "arguments")


def prompt_slots(payload: Mapping[str, Any], path: str) -> list[Slot]:
    """The slots of the texts a request's input checks see, for the route at ``path``."""
    slots: list[Slot] = []
    route = path.rstrip("/")
    if route.endswith("/embeddings"):
        if "input" in payload:
            _text(slots, payload, "input")
            items = payload["input"]
            if isinstance(items, list):
                for at, item in enumerate(items):
                    if isinstance(item, str):
                        slots.append((items, at))
        return slots
    if route.endswith("/responses"):
        if "instructions" in payload:
            _text(slots, payload, "instructions")
        items = payload.get("input")
        if isinstance(items, str):
            slots.append((payload, "input"))
        elif isinstance(items, list):
            for item in items:
                if isinstance(item, dict):
                    _content(slots, item)
                    for key in ("output", "arguments"):
                        if key in item:
                            _text(slots, item, key)
        return slots
    system = payload.get("system")  # Anthropic's
    if isinstance(system, (str, list)):
        _content(slots, payload, "system")  # type: ignore[arg-type]
    messages = payload.get("messages")
    if isinstance(messages, list):
        for message in messages:
            if isinstance(message, dict):
                _content(slots, message)
                _tool_calls(slots, message)
    if "prompt" in payload:  # a legacy completion
        _text(slots, payload, "prompt")
    return slots


def answer_slots(answer: Mapping[str, Any]) -> list[Slot]:
    """The slots of the texts an answer's output checks see (any of the three answer shapes)."""
    slots: list[Slot] = []
    choices = answer.get("choices")
    if isinstance(choices, list):  # a chat completion
        for choice in choices:
            message = choice.get("message") if isinstance(choice, dict) else None
            if isinstance(message, dict):
                _content(slots, message)
                _tool_calls(slots, message)
            elif isinstance(choice, dict) and "text" in choice:  # a legacy completion
                _text(slots, choice, "text")
        return slots
    if answer.get("type") == "message":  # Anthropic's
        _content(slots, answer)  # type: ignore[arg-type]
        return slots
    output = answer.get("output")
    if isinstance(output, list):  # the Responses API's
        for item in output:
            if isinstance(item, dict):
                _content(slots, item)
                if "arguments" in item:
                    _text(slots, item, "arguments")
    return slots
