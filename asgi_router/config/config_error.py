"""How a refused configuration is described: the key, where its value came from, what is wrong.

pydantic renders a validation error for its own readers: the schema of every member of a union
it tried (``lax-or-strict[lax=json-or-python[...]]``), a documentation URL per error, and no
word of where a value came from. An operator needs the key (``providers.openai.base_url``), the
source to edit (the environment variable that set it, else the TOML file) and the complaint,
one line each. A value is shown only where it is one of a few fixed words (a strategy, a kind,
a failure reason) or a name the configuration uses, with the closest allowed word when there is
one (``got 'ordr'; did you mean 'order'?``); never any other value, which may be a key. An
unknown key gets the closest known key of its table.

The environment variable is found the way pydantic-settings reads them: ``ASGI_ROUTER_`` and
the key's names joined with ``__``, case-insensitive; of the names that exist, the longest is
the one that set the value (``ASGI_ROUTER_PROVIDERS__OPENAI__BASE_URL`` over
``ASGI_ROUTER_PROVIDERS``). A keyword override beats the environment, so a key given as a
keyword is never blamed on it.
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ValidationError
from pydantic_settings import SettingsError

from asgi_router.config.cross_checks import did_you_mean

__all__ = ["ENV_DELIMITER", "ENV_PREFIX", "ConfigError", "Loc", "describe_refusal", "describe_undecodable"]

ENV_PREFIX: Final = "ASGI_ROUTER_"
ENV_DELIMITER: Final = "__"

#: How pydantic names the members of a union it tried, besides model class names.
_SCALAR_TAGS: Final = frozenset({"str", "int", "float", "bool", "bytes", "none", "list", "dict", "set", "frozenset"})

Loc = tuple[int | str, ...]


class ConfigError(ValueError):
    """The router's configuration cannot be used; the message names the offending key."""


def _model_names(model: type[BaseModel]) -> frozenset[str]:
    """The class names of ``model`` and of every model its fields can hold."""
    names: set[str] = set()
    stack: list[object] = [model]
    while stack:
        kind = stack.pop()
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            if kind.__name__ in names:
                continue
            names.add(kind.__name__)
            stack += [field.annotation for field in kind.model_fields.values()]
        else:
            stack += typing.get_args(kind)
    return frozenset(names)


def _names(loc: Loc, tags: frozenset[str]) -> list[str | int]:
    """``loc`` without the names of the union members pydantic tried."""
    return [part for part in loc if isinstance(part, int) or not (part in tags or re.search(r"[\[(]", part))]


def _key(parts: list[str | int]) -> str:
    """``["groups", "g", "members", 0]`` as ``groups.g.members[0]``."""
    key = ""
    for part in parts:
        key += f"[{part}]" if isinstance(part, int) else f".{part}" if key else part
    return key


def _environment_variable(parts: list[str | int], overrides: Collection[str]) -> str | None:
    """The environment variable that set the value at ``parts``, if one did."""
    if not parts or parts[0] in overrides:
        return None
    names: list[str] = []
    for part in parts:
        if isinstance(part, int):  # a list item is never a variable of its own
            break
        names.append(part)
    present = {name.upper(): name for name in os.environ}
    for end in range(len(names), 0, -1):
        found = present.get((ENV_PREFIX + ENV_DELIMITER.join(names[:end])).upper())
        if found is not None:
            return found
    return None


def _source(parts: list[str | int], file: Path | None, overrides: Collection[str]) -> str | None:
    """Where the value at ``parts`` came from, said as a parenthesis does; ``None``: a keyword."""
    variable = _environment_variable(parts, overrides)
    if variable is not None:
        return f"from the environment variable {variable}"
    if parts and file is not None and parts[0] not in overrides:
        return f"in {file}"
    return None


def _field_names(model: type[BaseModel], parts: list[str | int]) -> list[str]:
    """The keys a table at ``parts`` may hold (empty when ``parts`` leads to no model)."""
    kinds: list[object] = [model]
    for part in parts:
        found: list[object] = []
        for kind in kinds:
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                field = kind.model_fields.get(str(part))
                if field is not None:
                    found.append(field.annotation)
            else:
                args = typing.get_args(kind)
                origin = typing.get_origin(kind)
                if origin is dict and len(args) == 2:
                    found.append(args[1])  # ``part`` is the table's own key
                elif origin in (list, tuple, set, frozenset) and args and isinstance(part, int):
                    found.append(args[0])
                else:
                    kinds.extend(args)  # a union (or Annotated): look into its members
                    continue
        kinds = found
    names: list[str] = []
    for kind in kinds:
        for member in (kind, *typing.get_args(kind)):
            if isinstance(member, type) and issubclass(member, BaseModel):
                names += list(member.model_fields)
    return names


def _hint(error: Mapping[str, Any], parts: list[str | int], model: type[BaseModel]) -> str:
    """What the operator most likely meant: the value refused when it is a choice among fixed
    words (never any other value: it may be a key), and the closest word that is allowed."""
    if error["type"] in ("literal_error", "enum") and isinstance(error.get("input"), str):
        given = str(error.get("input"))[:64]
        choices = re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))
        return f" (got {given!r}{did_you_mean(given, choices)})"
    if error["type"] == "extra_forbidden" and parts and isinstance(parts[-1], str):
        close = did_you_mean(parts[-1], _field_names(model, parts[:-1]))
        return f" ({close[2:]})" if close else ""
    return ""


def describe_refusal(
    exc: ValidationError, model: type[BaseModel], file: Path | None, overrides: Collection[str]
) -> str:
    """One line per refused key: ``key (source): what is wrong``; a value only where it is a
    fixed word or a name (see :func:`_hint`), never a key."""
    tags = _model_names(model) | _SCALAR_TAGS
    lines: dict[str, list[str]] = {}
    for error in exc.errors(include_url=False):
        ctx = error.get("ctx") or {}
        cause = ctx.get("error")
        message = str(cause) if error["type"] == "value_error" and cause is not None else error["msg"]
        if error["type"] == "extra_forbidden":
            message = "unknown key"
        parts = _names(tuple(error["loc"]), tags)
        message += _hint(error, parts, model)
        contradicting = ctx.get("sources") or ()
        if contradicting:
            message = ctx.get("plain") or message
            said = [f"{name} {_source([name], file, overrides) or 'as a keyword argument'}" for name in contradicting]
            message += f" ({'; '.join(said)})"
        key = _key(parts)
        source = _source(parts, file, overrides)
        where = f"{key} ({source})" if key and source else key  # no source: a keyword, or a check across keys
        said_here = lines.setdefault(where, [])
        if message not in said_here:  # a value no member of a union accepts: one line for them all
            said_here.append(message)
    rendered: list[str] = []
    for where, said in lines.items():
        if where:
            rendered.append(f"  {where}: {' or '.join(said)}")
        else:
            rendered += [f"  {message}" for message in said]
    body = "\n".join(rendered)
    count = sum(len(said) if not where else 1 for where, said in lines.items())
    head = "invalid router configuration" + (f" ({count} problems)" if count > 1 else "")
    return f"{head}:\n{body}"


def describe_undecodable(exc: SettingsError) -> str:
    """An environment variable pydantic-settings could not decode (malformed JSON), named."""
    field = re.search(r'field "([^"]+)"', str(exc))
    wanted = f"{ENV_PREFIX}{field[1]}".upper() if field is not None else None
    names = sorted(
        name
        for name in os.environ
        if wanted is not None and (name.upper() == wanted or name.upper().startswith(wanted + ENV_DELIMITER))
    )
    where = " or ".join(names) if names else f"an {ENV_PREFIX}... environment variable"
    return f"invalid router configuration: {where} is not valid JSON ({exc})"
