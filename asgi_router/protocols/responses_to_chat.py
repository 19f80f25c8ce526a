"""A Responses API request as a chat-completions request, or why it cannot be one.

A member whose provider serves the Responses route translated (``responses = "translate"``, and
every Anthropic provider) is sent chat completions: to an OpenAI-protocol provider as they are,
to an Anthropic one further translated to its Messages API (``to_anthropic.py``: one translation
each way, composed, rather than a second table that would drift from the first). Called once per
request, when the first translated candidate is reached, never per chunk. As in
``to_anthropic.py``, every top-level field is in one of three tables or refused, and the docs'
Protocols page lists the same tables (a test holds them together):

* :data:`TRANSLATED`: carried over with its meaning (``input`` to ``messages``, ``instructions``
  to a first system message, flat function ``tools`` to chat's nested ``function``,
  ``max_output_tokens`` to ``max_tokens``, ``text.format`` to ``response_format``, ...);
* :data:`AT_DEFAULT_ONLY`: accepted at the Responses API's default only (``truncation``
  ``"disabled"``, ``background`` false, ``include`` empty): chat completions have no such knob;
* :data:`IGNORED`: about stored responses, which a translated member never makes (``store``:
  the answer says ``"store": false``), or the provider's bookkeeping (``metadata``,
  ``service_tier``, ``prompt_cache_key``);
* anything else, and a translated field whose value chat completions cannot say (a built-in
  tool such as ``web_search``, an ``input_file``, an image by ``file_id``, an ``item_reference``),
  is :class:`~asgi_router.protocols.to_anthropic.Untranslatable`, whose ``detail`` names the
  field: the attempt loop skips the member (``protocol_mismatch``) and tries the next.

``previous_response_id`` names a response stored with the provider that made it: a translated
member stores nothing, so it can never continue one (:data:`STATEFUL`, the decision point's
row). ``reasoning`` items of earlier turns are dropped: they are a native model's own state
(often encrypted), which no chat model reads. A ``strict`` function schema is kept for an
OpenAI-protocol member and dropped for an Anthropic one (:func:`without_strict`): the Messages
API has no strict mode, and the agents SDK marks every schema strict.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from asgi_router.protocols.to_anthropic import Untranslatable, number_field, translate_fields

__all__ = [
    "AT_DEFAULT_ONLY",
    "IGNORED",
    "STATEFUL",
    "TRANSLATED",
    "to_chat_request",
    "without_strict",
]

#: Why a request that continues a stored response cannot go to a translated member.
STATEFUL: Final = (
    "previous_response_id: a translated member stores no responses (stateless); only a native Responses "
    "provider can continue one"
)

_Out = dict[str, Any]
# A field's translation: writes into the chat request, or says why it cannot.
_Field = Callable[[Any, _Out], str | None]

#: Roles of a Responses message and the chat role each becomes (``developer``: a system message,
#: which every chat server reads; not all know ``developer``).
_ROLES: Final = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
#: ``tool_choice`` strings, the same in both APIs.
_CHOICES: Final = frozenset({"auto", "none", "required"})


def _plain(value: object) -> str:
    """``value`` as an explanation may quote it: short plain strings only (it goes back to the client)."""
    if isinstance(value, str) and len(value) <= 40 and value.replace("_", "").replace("-", "").isalnum():
        return f' "{value}"'
    return ""


def _input(value: Any, out: _Out) -> str | None:
    if isinstance(value, str):
        out["messages"] = [{"role": "user", "content": value}]
        return None
    if not isinstance(value, list):
        return "input must be a string or a list of items"
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            return f"input[{index}] must be an object"
        refused = _item(item, messages)
        if refused is not None:
            return f"input[{index}]: {refused}"
    out["messages"] = messages
    return None


def _item(item: Mapping[str, Any], messages: list[dict[str, Any]]) -> str | None:
    """Append what one input item becomes to ``messages``, or say why it cannot."""
    kind = item.get("type", "message")
    if kind == "message":
        return _message(item, messages)
    if kind == "function_call":
        call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
        if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, str):
            return "a function_call needs a call_id, a name and arguments (a string)"
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        previous = messages[-1] if messages else None
        if previous is not None and previous["role"] == "assistant" and "_open" in previous:
            previous.setdefault("tool_calls", []).append(call)  # parallel calls: one assistant turn
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call], "_open": True})
        return None
    if kind == "function_call_output":
        call_id, output = item.get("call_id"), item.get("output")
        if isinstance(output, list):
            output = _texts(output)
        if not isinstance(call_id, str) or not isinstance(output, str):
            return "a function_call_output needs a call_id and an output (a string or text parts)"
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        return None
    if kind == "reasoning":
        return None  # a native model's own state: nothing a chat model reads
    return f"an item of type{_plain(kind)} has no equivalent in chat completions"


def _texts(parts: list[Any]) -> str | None:
    """The text of ``input_text``/``output_text`` parts, joined; ``None`` if any is not text."""
    texts = []
    for part in parts:
        if not isinstance(part, dict) or part.get("type") not in ("input_text", "output_text", "text"):
            return None
        if not isinstance(part.get("text"), str):
            return None
        texts.append(part["text"])
    return "".join(texts)


def _message(item: Mapping[str, Any], messages: list[dict[str, Any]]) -> str | None:
    said = item.get("role")
    role = _ROLES.get(said) if isinstance(said, str) else None
    if role is None:
        return f"a message's role{_plain(item.get('role'))} has no equivalent in chat completions"
    content = item.get("content")
    if isinstance(content, str):
        messages.append({"role": role, "content": content})
        if role == "assistant":
            messages[-1]["_open"] = True  # the calls that follow are this turn's
        return None
    if not isinstance(content, list):
        return "a message's content must be a string or a list of parts"
    if role != "user":  # system and assistant turns are text (an assistant's refusal said as text)
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            text = part.get("refusal" if kind == "refusal" else "text") if isinstance(part, dict) else None
            if kind not in ("input_text", "output_text", "text", "refusal") or not isinstance(text, str):
                return f"a {item['role']} message's parts must be text"
            texts.append(text)
        messages.append({"role": role, "content": "".join(texts)})
        if role == "assistant":
            messages[-1]["_open"] = True  # the calls that follow are this turn's
        return None
    parts: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "input_text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "input_image":
            url = part.get("image_url")
            if not isinstance(url, str):
                return "an input_image needs an image_url (one by file_id has no equivalent in chat completions)"
            image: dict[str, Any] = {"url": url}
            if part.get("detail") in ("low", "high", "auto"):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            return f"a content part of type{_plain(kind)} has no equivalent in chat completions"
    messages.append({"role": "user", "content": parts})
    return None


def _instructions(value: Any, out: _Out) -> str | None:
    if not isinstance(value, str):
        return "instructions must be a string"
    if value:
        out["_instructions"] = value  # the first message, once ``input`` is known
    return None


def _tools(value: Any, out: _Out) -> str | None:
    if not isinstance(value, list):
        return "tools must be a list"
    tools = []
    for tool in value:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind != "function":
            return f"tools: a tool of type{_plain(kind)} has no equivalent in chat completions (function tools only)"
        if not isinstance(tool.get("name"), str):
            return "tools: a function tool needs a name"
        function: dict[str, Any] = {"name": tool["name"]}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        if isinstance(tool.get("parameters"), dict):
            function["parameters"] = tool["parameters"]
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
        tools.append({"type": "function", "function": function})
    if tools:
        out["tools"] = tools
    return None


def _tool_choice(value: Any, out: _Out) -> str | None:
    if isinstance(value, str) and value in _CHOICES:
        out["tool_choice"] = value
        return None
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("name"), str):
        out["tool_choice"] = {"type": "function", "function": {"name": value["name"]}}
        return None
    return f"tool_choice{_plain(value)} has no equivalent in chat completions"


def _max_output_tokens(value: Any, out: _Out) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return "max_output_tokens must be a positive integer"
    out["max_tokens"] = value  # the name every chat server knows
    return None


def _flag(name: str) -> _Field:
    def carry(value: Any, out: _Out) -> str | None:
        if not isinstance(value, bool):
            return f"{name} must be true or false"
        out[name] = value
        return None

    return carry


def _stream(value: Any, out: _Out) -> str | None:
    if not isinstance(value, bool):
        return "stream must be true or false"
    if value:  # the translated stream's last event states the usage: ask for it
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return None


def _user(value: Any, out: _Out) -> str | None:
    if not isinstance(value, str):
        return "user must be a string"
    out["user"] = value
    return None


def _text(value: Any, out: _Out) -> str | None:
    if not isinstance(value, dict):
        return "text must be an object"
    if value.get("verbosity") not in (None, "medium"):
        return f"text.verbosity{_plain(value.get('verbosity'))} has no equivalent in chat completions"
    form = value.get("format")
    kind = form.get("type") if isinstance(form, dict) else None
    if form is None or kind == "text":
        return None
    if kind == "json_object":
        out["response_format"] = {"type": "json_object"}
        return None
    if kind == "json_schema" and isinstance(form.get("schema"), dict) and isinstance(form.get("name"), str):
        schema: dict[str, Any] = {"name": form["name"], "schema": form["schema"]}
        for key in ("description", "strict"):
            if form.get(key) is not None:
                schema[key] = form[key]
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
        return None
    return f"text.format of type{_plain(kind)} has no equivalent in chat completions"


def _reasoning(value: Any, out: _Out) -> str | None:
    if not isinstance(value, dict):
        return "reasoning must be an object"
    effort = value.get("effort")
    if effort is not None:
        if not isinstance(effort, str):
            return "reasoning.effort must be a string"
        out["reasoning_effort"] = effort  # a summary is not asked: chat answers carry none
    return None


def _previous(value: Any, out: _Out) -> str | None:
    return STATEFUL


#: Fields carried over to chat completions, each with its translation.
TRANSLATED: Final[dict[str, _Field]] = {
    "input": _input,
    "instructions": _instructions,
    "tools": _tools,
    "tool_choice": _tool_choice,
    "max_output_tokens": _max_output_tokens,
    "temperature": number_field("temperature"),
    "top_p": number_field("top_p"),
    "parallel_tool_calls": _flag("parallel_tool_calls"),
    "stream": _stream,
    "user": _user,
    "text": _text,
    "reasoning": _reasoning,
    "previous_response_id": _previous,
}
#: Fields accepted at the Responses API's default only: chat completions have no such knob.
AT_DEFAULT_ONLY: Final[dict[str, object]] = {"truncation": "disabled", "background": False, "include": []}
#: Fields dropped: about stored responses (a translated member stores none), or bookkeeping.
IGNORED: Final = frozenset({"model", "store", "metadata", "service_tier", "prompt_cache_key", "safety_identifier"})


def _unsupported(name: str, value: object) -> str:
    named = name if name.replace("_", "").isalnum() and len(name) <= 40 else "a field"
    return f"{named} has no equivalent in chat completions"


def to_chat_request(payload: Mapping[str, Any]) -> dict[str, Any] | Untranslatable:
    """The chat-completions body for the Responses request ``payload`` (without ``model``: the
    wire body adds it per candidate), or why it has none."""
    out = translate_fields(payload, TRANSLATED, AT_DEFAULT_ONLY, IGNORED, _unsupported)
    if isinstance(out, Untranslatable):
        return out
    messages = out.get("messages")
    if messages is None:
        return Untranslatable("input is required")
    for message in messages:
        message.pop("_open", None)
    instructions = out.pop("_instructions", None)
    if instructions is not None:
        messages.insert(0, {"role": "system", "content": instructions})
    if "tools" not in out:
        out.pop("tool_choice", None)
        out.pop("parallel_tool_calls", None)  # servers refuse it without tools
    return out


def without_strict(chat: Mapping[str, Any]) -> dict[str, Any]:
    """``chat`` with its function tools' ``strict`` flags dropped (their schemas kept): for a
    Messages API member, which has no strict mode."""
    tools = chat.get("tools")
    if not isinstance(tools, list):
        return dict(chat)
    kept = []
    for tool in tools:
        function = {key: value for key, value in tool["function"].items() if key != "strict"}
        kept.append({**tool, "function": function})
    return {**chat, "tools": kept}
