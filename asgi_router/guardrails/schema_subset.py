"""An answer validated against the JSON schema its request asked for (``response_format``).

OpenAI's structured outputs accept a subset of JSON Schema, and this checks that subset:
``type`` (one or a list), ``properties``, ``required``, ``additionalProperties`` (false or a
schema), ``items``, ``enum``, ``const``, ``anyOf``, ``$ref`` into ``$defs``/``definitions``,
and the bounds ``minLength``/``maxLength``, ``pattern``, ``minimum``/``maximum`` (and their
exclusive forms), ``minItems``/``maxItems``. Keywords outside it (``format``, say) are not
checked: an answer is refused only for what the schema clearly says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["schema_of", "violation"]

_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}
# Nesting deeper than this is not followed (a recursive ``$ref`` would loop for ever).
_DEPTH: Final = 64


def schema_of(payload: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The JSON schema a chat request's ``response_format`` asks for (``None``: none)."""
    wanted = payload.get("response_format")
    if isinstance(wanted, dict) and wanted.get("type") == "json_schema":
        spec = wanted.get("json_schema")
        if isinstance(spec, dict) and isinstance(spec.get("schema"), dict):
            schema: Mapping[str, Any] = spec["schema"]
            return schema
    text = payload.get("text")  # the Responses API's spelling
    if isinstance(text, dict):
        fmt = text.get("format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
            found: Mapping[str, Any] = fmt["schema"]
            return found
    return None


def _is(value: object, kind: str) -> bool:
    if kind in ("integer", "number") and isinstance(value, bool):
        return False
    if kind == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(kind, (object,)))


def violation(
    value: object, schema: Mapping[str, Any], root: Mapping[str, Any] | None = None, at: str = "$", depth: int = 0
) -> str | None:
    """Where ``value`` breaks ``schema`` and how (``None``: it is valid)."""
    root = schema if root is None else root
    if depth > _DEPTH:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        if isinstance(target, dict):
            return violation(value, target, root, at, depth + 1)
        return None
    kind = schema.get("type")
    if isinstance(kind, str) and not _is(value, kind):
        return f"{at}: not of type {kind}"
    if isinstance(kind, list) and not any(_is(value, k) for k in kind if isinstance(k, str)):
        return f"{at}: not of type {' or '.join(map(str, kind))}"
    if "const" in schema and value != schema["const"]:
        return f"{at}: not the constant value"
    enum = schema.get("enum")
    if isinstance(enum, list) and value not in enum:
        return f"{at}: not one of the enum values"
    any_of = schema.get("anyOf")
    if isinstance(any_of, list) and any_of:
        if all(
            violation(value, option, root, at, depth + 1) is not None for option in any_of if isinstance(option, dict)
        ):
            return f"{at}: matches none of anyOf"
    if isinstance(value, dict):
        return _object(value, schema, root, at, depth)
    if isinstance(value, list):
        return _array(value, schema, root, at, depth)
    if isinstance(value, str):
        return _string(value, schema, at)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _number(value, schema, at)
    return None


def _object(
    value: dict[str, Any], schema: Mapping[str, Any], root: Mapping[str, Any], at: str, depth: int
) -> str | None:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    for name in schema.get("required") or ():
        if name not in value:
            return f"{at}: '{name}' is required"
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        sub = properties.get(name)
        if isinstance(sub, dict):
            found = violation(item, sub, root, f"{at}.{name}", depth + 1)
            if found is not None:
                return found
        elif extra is False:
            return f"{at}: '{name}' is not allowed"
        elif isinstance(extra, dict):
            found = violation(item, extra, root, f"{at}.{name}", depth + 1)
            if found is not None:
                return found
    return None


def _array(value: list[Any], schema: Mapping[str, Any], root: Mapping[str, Any], at: str, depth: int) -> str | None:
    low, high = schema.get("minItems"), schema.get("maxItems")
    if isinstance(low, int) and len(value) < low:
        return f"{at}: fewer than {low} items"
    if isinstance(high, int) and len(value) > high:
        return f"{at}: more than {high} items"
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            found = violation(item, items, root, f"{at}[{index}]", depth + 1)
            if found is not None:
                return found
    return None


def _string(value: str, schema: Mapping[str, Any], at: str) -> str | None:
    low, high, pattern = schema.get("minLength"), schema.get("maxLength"), schema.get("pattern")
    if isinstance(low, int) and len(value) < low:
        return f"{at}: shorter than {low}"
    if isinstance(high, int) and len(value) > high:
        return f"{at}: longer than {high}"
    if isinstance(pattern, str):
        try:
            if re.search(pattern, value) is None:
                return f"{at}: does not match its pattern"
        except re.error:
            return None
    return None


def _number(value: float, schema: Mapping[str, Any], at: str) -> str | None:
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bound = schema.get(key)
        if not isinstance(bound, (int, float)) or isinstance(bound, bool):
            continue
        below, above = value < bound, value > bound
        fails = {"minimum": below, "maximum": above, "exclusiveMinimum": not above, "exclusiveMaximum": not below}
        if fails[key]:
            return f"{at}: {key} {bound}"
    return None
