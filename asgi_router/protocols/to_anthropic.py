"""A chat-completion request as a Messages API request, or why it cannot be one.

Called once per request and Anthropic provider setting (``default_max_tokens``), never per
chunk. Every top-level field is in one of three tables or refused, and the docs' Protocols page
lists the same tables (a test holds them together):

* :data:`TRANSLATED`: carried over with its meaning (``messages`` to ``system`` and turns,
  ``tools``, ``tool_choice``, ``stop`` to ``stop_sequences``, ``user`` to
  ``metadata.user_id``, ...);
* :data:`AT_DEFAULT_ONLY`: accepted at OpenAI's default value only (``n = 1``,
  ``presence_penalty = 0``, ``logprobs = false``, ...): Anthropic has no such knob;
* :data:`IGNORED`: meaningful to OpenAI only and harmless to drop (``store``, ``metadata``,
  ``seed``, ``service_tier``), or read by the answer's translation (``stream_options``);
* anything else is *untranslatable*, and so is a translated field whose value has no Messages
  API equivalent (``n`` above 1, ``logprobs = true``, a ``response_format`` other than text, an
  ``input_audio`` part, a ``temperature`` above Anthropic's 1, ...). The result is then
  :class:`Untranslatable`, whose ``detail`` names the field: the attempt loop skips that
  candidate (reason ``protocol_mismatch``) and tries the next, so a request one member cannot
  take is still served by another, and a request no member can take is a 400 naming why.

A field set to ``null`` counts as not set. Anthropic's prompt cache marks (``cache_control``), which
clients of OpenRouter or LiteLLM put on content parts and tools, stay on the blocks made from
them (``cache_marks.py``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from asgi_router.protocols.cache_marks import MARK

__all__ = [
    "AT_DEFAULT_ONLY",
    "IGNORED",
    "TRANSLATED",
    "Untranslatable",
    "include_usage",
    "number_field",
    "to_messages_request",
    "translate_fields",
]


@dataclass(frozen=True, slots=True)
class Untranslatable:
    """Why a request cannot be sent to an Anthropic provider (one line, names the field)."""

    detail: str


_Out = dict[str, Any]
# A field's translation: writes into the Messages request, or says why it cannot.
_Field = Callable[[Any, _Out], str | None]

#: Media types the Messages API takes for an image.
_IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
#: OpenAI ``tool_choice`` strings and what the Messages API calls them.
_TOOL_CHOICE: Final = {"auto": "auto", "required": "any", "none": "none"}


# What of a client's field name or value an explanation may repeat: plain names and short
# scalars only (the explanation goes back in an error body; nothing else of the request does).
_PLAIN: Final = re.compile(r"[A-Za-z0-9_.-]{1,40}")


def _shown(value: object) -> str:
    """``value`` as an explanation may quote it, or ``""``."""
    if isinstance(value, bool) or (_number(value) and len(repr(value)) <= 20):
        return json.dumps(value)
    if isinstance(value, str) and _PLAIN.fullmatch(value):
        return json.dumps(value)
    return ""


def _unsupported(name: str, value: object) -> str:
    named = name if _PLAIN.fullmatch(name) else "a field"
    shown = _shown(value)
    return f"{named}{' ' + shown if shown else ''} has no equivalent in Anthropic's Messages API"


def _marked(block: dict[str, Any], *sources: Any) -> dict[str, Any]:
    """``block`` with the first source's prompt cache mark (a ``cache_control`` object) kept."""
    for source in sources:
        if isinstance(source, dict) and source.get(MARK) is not None:
            mark = source[MARK]
            if not isinstance(mark, dict):
                raise ValueError("cache_control must be an object")
            block[MARK] = mark
            break
    return block


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _stream(value: Any, out: _Out) -> str | None:
    if not isinstance(value, bool):
        return "stream must be true or false"
    if value:
        out["stream"] = True
    return None


def _max_tokens(name: str) -> _Field:
    def carry(value: Any, out: _Out) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{name} must be a positive integer"
        if name == "max_completion_tokens" or "max_tokens" not in out:  # OpenAI's newer name wins
            out["max_tokens"] = value
        return None

    return carry


def _temperature(value: Any, out: _Out) -> str | None:
    if not _number(value) or not 0 <= value <= 1:
        return f"temperature {_shown(value)} is outside Anthropic's range (0 to 1)"
    out["temperature"] = value
    return None


def number_field(name: str) -> _Field:
    """A field whose number is carried as it is, under the same name (every translation's
    sampling fields: ``temperature``, ``top_p``...)."""

    def carry(value: Any, out: _Out) -> str | None:
        if not _number(value):
            return f"{name} must be a number"
        out[name] = value
        return None

    return carry


def _stop(value: Any, out: _Out) -> str | None:
    sequences = [value] if isinstance(value, str) else value
    if not isinstance(sequences, list) or not all(isinstance(item, str) for item in sequences):
        return "stop must be a string or a list of strings"
    if sequences:
        out["stop_sequences"] = sequences
    return None


def _user(value: Any, out: _Out) -> str | None:
    if not isinstance(value, str):
        return "user must be a string"
    out["metadata"] = {"user_id": value}
    return None


def _tools(value: Any, out: _Out) -> str | None:
    if not isinstance(value, list):
        return "tools must be a list"
    tools = []
    for tool in value:
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return "tools: only function tools with a name translate"
        if function.get("strict"):
            return "tools: strict function schemas have no equivalent in Anthropic's Messages API"
        translated: dict[str, Any] = {"name": function["name"]}
        if isinstance(function.get("description"), str):
            translated["description"] = function["description"]
        parameters = function.get("parameters")
        translated["input_schema"] = parameters if isinstance(parameters, dict) else {"type": "object"}
        tools.append(_marked(translated, tool, function))
    if tools:
        out["tools"] = tools
    return None


def _tool_choice(value: Any, out: _Out) -> str | None:
    if isinstance(value, str) and value in _TOOL_CHOICE:
        out["tool_choice"] = {"type": _TOOL_CHOICE[value]}
        return None
    function = value.get("function") if isinstance(value, dict) and value.get("type") == "function" else None
    if isinstance(function, dict) and isinstance(function.get("name"), str):
        out["tool_choice"] = {"type": "tool", "name": function["name"]}
        return None
    return _unsupported("tool_choice", value)


def _parallel_tool_calls(value: Any, out: _Out) -> str | None:
    if not isinstance(value, bool):
        return "parallel_tool_calls must be true or false"
    if not value:
        out["_parallel"] = False  # folded into tool_choice once both are known
    return None


def _response_format(value: Any, out: _Out) -> str | None:
    if isinstance(value, dict) and value.get("type") == "text":
        return None
    return _unsupported("response_format", value)


def _messages(value: Any, out: _Out) -> str | None:
    if not isinstance(value, list):
        return "messages must be a list"
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    for index, message in enumerate(value):
        role = message.get("role") if isinstance(message, dict) else None
        where = f"messages[{index}]"
        if role in ("system", "developer"):
            blocks = _text_blocks(message.get("content"))
            if blocks is None:
                return f"{where}: a {role} message's content must be text"
            system += blocks
            continue
        translate = _ROLES.get(role) if isinstance(role, str) else None
        if translate is None:
            return f"{where}: {_unsupported('role', role)}"
        turn = translate(message)
        if isinstance(turn, str):
            return f"{where}: {turn}"
        previous = turns[-1] if turns else None
        if role == "tool" and previous is not None and previous.get("_results"):
            previous["content"] += turn["content"]  # parallel tool results answer in one turn
        else:
            turns.append(turn)
    for turn in turns:
        turn.pop("_results", None)
    if system:
        out["system"] = system
    out["messages"] = turns
    return None


def _texts(content: Any) -> list[str] | None:
    """The texts of a system or tool message's content (a string or text parts)."""
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return None
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            return None
        texts.append(part["text"])
    return texts


def _text_blocks(content: Any) -> list[dict[str, Any]] | None:
    """A system or tool message's content as text blocks (empty texts left out), each part's
    prompt cache mark kept; ``None`` when it is not text."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if _texts(content) is None:
        return None
    return [_marked({"type": "text", "text": part["text"]}, part) for part in content if part["text"]]


def _user_turn(message: Mapping[str, Any]) -> dict[str, Any] | str:
    content = message.get("content")
    if isinstance(content, str):
        return {"role": "user", "content": content}
    if not isinstance(content, list):
        return "a user message's content must be a string or a list of parts"
    blocks = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            blocks.append(_marked({"type": "text", "text": part["text"]}, part))
        elif kind == "image_url":
            image = _image(part.get("image_url"))
            if isinstance(image, str):
                return image
            blocks.append(_marked(image, part))
        else:
            shown = _shown(kind)
            return f"a content part{' of type ' + shown if shown else ''} has no equivalent in Anthropic's Messages API"
    return {"role": "user", "content": blocks}


def _image(image_url: Any) -> dict[str, Any] | str:
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str):
        return "an image_url part needs a url"
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    header, comma, data = url.partition(",")
    media_type, _, encoding = header.removeprefix("data:").partition(";")
    if not url.startswith("data:") or not comma or encoding != "base64" or media_type not in _IMAGE_TYPES:
        return "an image must be an http(s) URL or a base64 data URL of a JPEG, PNG, GIF or WebP image"
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _assistant_turn(message: Mapping[str, Any]) -> dict[str, Any] | str:
    content, calls = message.get("content"), message.get("tool_calls")
    if message.get("function_call") is not None or message.get("audio") is not None:
        return "function_call and audio have no equivalent in Anthropic's Messages API"
    if calls is not None and not isinstance(calls, list):
        return "an assistant message's tool_calls must be a list"
    if isinstance(content, str) and not calls:
        return {"role": "assistant", "content": content}
    blocks: list[dict[str, Any]] = []
    if content is not None:
        parts = [content] if isinstance(content, str) else content
        if not isinstance(parts, list):
            return "an assistant message's content must be a string or a list of parts"
        for part in parts:
            text = part if isinstance(part, str) else _part_text(part)
            if text is None:
                return "an assistant message's parts must be text or refusal"
            if text:
                blocks.append(_marked({"type": "text", "text": text}, part))
    for call in calls or ():
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(function, dict)
            or not isinstance(call.get("id"), str)
            or not isinstance(function.get("name"), str)
        ):
            return "a tool call needs an id and a function name"
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError, RecursionError):
            arguments = None
        if not isinstance(arguments, dict):
            return "a tool call's arguments must be a JSON object"
        blocks.append({"type": "tool_use", "id": call["id"], "name": function.get("name"), "input": arguments})
    return {"role": "assistant", "content": blocks}


def _part_text(part: Any) -> str | None:
    if isinstance(part, dict):
        for key in ("text", "refusal"):
            if part.get("type") == key and isinstance(part.get(key), str):
                return str(part[key])
    return None


def _tool_turn(message: Mapping[str, Any]) -> dict[str, Any] | str:
    call_id, content = message.get("tool_call_id"), message.get("content")
    blocks = _text_blocks(content)
    if not isinstance(call_id, str) or blocks is None:
        return "a tool message needs a tool_call_id and text content"
    result: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id}
    result["content"] = content if isinstance(content, str) else blocks
    return {"role": "user", "content": [result], "_results": True}


_ROLES: Final[dict[str, Callable[[Mapping[str, Any]], dict[str, Any] | str]]] = {
    "user": _user_turn,
    "assistant": _assistant_turn,
    "tool": _tool_turn,
}

#: Fields carried over to the Messages API, each with its translation.
TRANSLATED: Final[dict[str, _Field]] = {
    "messages": _messages,
    "max_tokens": _max_tokens("max_tokens"),
    "max_completion_tokens": _max_tokens("max_completion_tokens"),
    "stream": _stream,
    "temperature": _temperature,
    "top_p": number_field("top_p"),
    "top_k": number_field("top_k"),
    "stop": _stop,
    "user": _user,
    "tools": _tools,
    "tool_choice": _tool_choice,
    "parallel_tool_calls": _parallel_tool_calls,
    "response_format": _response_format,
}
#: Fields accepted at OpenAI's default only: Anthropic has no such knob, so any other value
#: would be silently lost.
AT_DEFAULT_ONLY: Final[dict[str, object]] = {"n": 1, "presence_penalty": 0, "frequency_penalty": 0, "logprobs": False}
#: Fields dropped: OpenAI's bookkeeping, or read by the answer's translation (``stream_options``).
IGNORED: Final = frozenset({"model", "store", "metadata", "seed", "service_tier", "stream_options"})


def translate_fields(
    payload: Mapping[str, Any],
    translated: Mapping[str, _Field],
    at_default_only: Mapping[str, object],
    ignored: frozenset[str],
    unsupported: Callable[[str, object], str],
) -> dict[str, Any] | Untranslatable:
    """``payload``'s top-level fields through a translation's tables, each field in exactly one:
    ``translated`` (written into the new body, or refused with why), ``at_default_only`` (taken at
    that value only), ``ignored``; any other field is refused as ``unsupported`` words it. A field
    set to ``null`` counts as not set."""
    out: _Out = {}
    for name, value in payload.items():
        if value is None or name in ignored:
            continue
        translate = translated.get(name)
        if translate is None:
            default = at_default_only.get(name, ...)
            if value == default and isinstance(value, bool) == isinstance(default, bool):
                continue
            return Untranslatable(unsupported(name, value))
        try:
            refused = translate(value, out)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, RecursionError):
            # A shape no rule above foresaw: untranslatable (the next member is tried), never a 500.
            refused = f"{name if _PLAIN.fullmatch(name) else 'a field'} has a shape the translation cannot read"
        if refused is not None:
            return Untranslatable(refused)
    return out


def include_usage(payload: Mapping[str, Any]) -> bool:
    """Whether a streamed answer ends with a usage chunk (``stream_options.include_usage``)."""
    options = payload.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def to_messages_request(payload: Mapping[str, Any], default_max_tokens: int) -> dict[str, Any] | Untranslatable:
    """The Messages API body for ``payload`` (without ``model``: the wire body adds it per
    candidate), or why it has none."""
    out = translate_fields(payload, TRANSLATED, AT_DEFAULT_ONLY, IGNORED, _unsupported)
    if isinstance(out, Untranslatable):
        return out
    if "messages" not in out:
        return Untranslatable("messages is required")
    out.setdefault("max_tokens", default_max_tokens)
    if out.pop("_parallel", True) is False and "tools" in out:
        out.setdefault("tool_choice", {"type": "auto"})["disable_parallel_tool_use"] = True
    if "tools" not in out:
        out.pop("tool_choice", None)  # the Messages API takes a choice only with tools to choose from
    return out
