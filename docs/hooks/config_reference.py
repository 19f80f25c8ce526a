"""The configuration reference, generated from the settings models (an mkdocs hook).

The models are the one source: every field carries its ``description``, its type and its
default, so the reference cannot drift from the code. This hook walks ``RouterSettings`` and
every table nested in it and renders one section per table: for each key its TOML path, its
description, its type, its default and the environment variable that sets it.

The rendered reference is committed in ``docs/configuration.md``, between :data:`MARKER` and
:data:`END`, so that the page reads on GitHub too. One command regenerates it after a settings
field changes::

    python docs/hooks/config_reference.py --write

(``--check`` exits 1 when the committed text is stale; with no option the reference is printed.)
As an mkdocs hook it refuses to build the site from a stale page, and a test does the same.

Environment variables follow pydantic-settings: ``ASGI_ROUTER_`` plus the key's names joined
with ``__``, upper-cased. A key below a list (``rules[]``) or below a name that cannot be part of
a variable's name (a catalog's ``provider/model-id``) is set through the nearest variable above
it, whose value is JSON.
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from annotated_types import Ge, Gt, Le, Lt, MinLen
from pydantic import BaseModel, ImportString, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import NoDecode

from asgi_router import RouterSettings
from asgi_router.config.config_error import ENV_DELIMITER, ENV_PREFIX
from asgi_router.core.reasons import Reason

__all__ = [
    "END",
    "MARKER",
    "PAGE",
    "PATH",
    "REGENERATE",
    "Key",
    "Table",
    "committed",
    "main",
    "on_page_markdown",
    "page_with",
    "render",
    "tables",
]

#: The page the reference goes into, and the lines it sits between there.
PAGE = "configuration.md"
PATH = Path(__file__).resolve().parents[1] / PAGE
MARKER = "<!-- configuration reference: generated from the settings models -->"
END = "<!-- end of the generated configuration reference -->"
#: The one command that regenerates it.
REGENERATE = "python docs/hooks/config_reference.py --write"

#: What a key of a table of tables stands for, where ``<name>`` would mislead.
_PLACEHOLDERS = {"catalog": '"<provider/model-id>"'}
_REASONS_LINK = "[reason](errors-and-headers.md#reasons)"
_MIB = 1024 * 1024


@dataclass(frozen=True)
class Key:
    """One configuration key: where it is written, what it takes, what it means."""

    toml: str
    #: The variable that sets it; ``env_json``: the variable's value is JSON holding it.
    env: str
    env_json: bool
    type: str
    default: str
    description: str


@dataclass
class Table:
    """One settings model and where it sits in the configuration."""

    model: type[BaseModel]
    toml: str
    keys: list[Key] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return self.model.__name__.lower()


def tables() -> list[Table]:
    """Every settings table, ``RouterSettings`` first, each nested one after the table holding it."""
    found: list[Table] = []
    _walk(RouterSettings, "", ENV_PREFIX.rstrip("_"), False, found)
    return found


def _walk(model: type[BaseModel], toml: str, env: str, env_json: bool, found: list[Table]) -> None:
    table = Table(model, toml)
    found.append(table)
    nested: list[tuple[type[BaseModel], str, str, bool]] = []
    for name, info in model.model_fields.items():
        key = f"{toml}.{name}" if toml else name
        variable = env if env_json else f"{env}{ENV_DELIMITER if toml else '_'}{name.upper()}"
        structured = _is_structured(info.annotation)
        table.keys.append(
            Key(
                toml=key,
                env=variable,
                env_json=env_json or (structured and NoDecode not in info.metadata),
                type=_type(info.annotation, info.metadata).replace(" by name", f" by {_key_name(name)}"),
                default=_default(info),
                description=_description(model, name, info),
            )
        )
        for inner, suffix, inner_json in _nested_models(name, info.annotation):
            nested.append((inner, key + suffix, variable, env_json or inner_json))
    for inner, key, variable, inner_json in nested:
        if all(existing.model is not inner for existing in found):
            if inner_json:
                _walk(inner, key, variable, True, found)
            else:
                # a nested table of tables: its variable names the table's own key
                _walk(inner, key, variable + _placeholder_variable(key), False, found)


def _key_name(field_name: str) -> str:
    """What the keys of a table-valued field are: names, or (a catalog's) model references."""
    placeholder = _PLACEHOLDERS.get(field_name)
    return "name" if placeholder is None else f"`{placeholder.strip(chr(34))}`"


def _placeholder_variable(key: str) -> str:
    """``__<NAME>`` for a table of named tables (``providers.<name>``), else nothing."""
    return ENV_DELIMITER + "<NAME>" if key.endswith(".<name>") else ""


def _nested_models(name: str, annotation: Any) -> list[tuple[type[BaseModel], str, bool]]:
    """The models a field holds, with the TOML suffix that reaches one and whether only JSON can."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if _is_model(annotation):
        return [(annotation, "", False)]
    if origin in (typing.Union, types.UnionType):
        return [found for arg in args for found in _nested_models(name, arg)]
    if origin is dict and _is_model(args[1]):
        placeholder = _PLACEHOLDERS.get(name, "<name>")
        return [(args[1], f".{placeholder}", placeholder != "<name>")]
    if origin is list:
        return [(model, "[]", True) for arg in args for model, _, _ in _nested_models(name, arg)]
    return []


def _is_model(annotation: Any) -> bool:
    return inspect.isclass(annotation) and issubclass(annotation, BaseModel)


def _is_structured(annotation: Any) -> bool:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_is_structured(arg) for arg in args if arg is not type(None))
    return origin in (list, dict, frozenset, set) or _is_model(annotation)


# --- types, defaults, descriptions ---------------------------------------------------------


def _type(annotation: Any, metadata: list[Any]) -> str:
    text = _type_of(annotation)
    bounds = _bounds(metadata)
    return f"{text} ({bounds})" if bounds else text


def _type_of(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is type(None):
        return "unset"
    if annotation is Reason:
        return _REASONS_LINK
    if origin is typing.Annotated:
        if any(type(arg) is ImportString for arg in args[1:]):
            return 'callable, or its import string `"module:function"`'
        bounds = _bounds(list(args[1:]))
        inner = _type_of(args[0])
        return f"{inner} ({bounds})" if bounds else inner
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_of(arg) for arg in args if arg is not type(None))
    if origin is Literal:
        return " or ".join(f"`{json.dumps(arg)}`" for arg in args)
    if origin is list:
        return f"list of {_plural(args[0])}"
    if origin in (frozenset, set):
        return f"list of {_plural(args[0])} (a set)"
    if origin is dict:
        return f"{_plural(args[1])} by name"
    if _is_model(annotation):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()}) table"
    if annotation is SecretStr:
        return "secret string"
    if inspect.isclass(annotation):
        return {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    raise TypeError(f"the reference cannot name the type {annotation!r}: teach _type_of")


def _plural(annotation: Any) -> str:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join(_plural(arg) for arg in typing.get_args(annotation) if arg is not type(None))
    if annotation is Reason:
        return "[reasons](errors-and-headers.md#reasons)"
    text = _type_of(annotation)
    if text.endswith(" table"):
        return text + "s"
    return {"string": "strings", "secret string": "secret strings"}.get(text, text)


def _bounds(metadata: list[Any]) -> str:
    said = []
    for item in metadata:
        if isinstance(item, Gt):
            said.append(f"> {item.gt:g}")
        elif isinstance(item, Ge):
            said.append(f"≥ {item.ge:g}")
        elif isinstance(item, Lt):
            said.append(f"< {item.lt:g}")
        elif isinstance(item, Le):
            said.append(f"≤ {item.le:g}")
        elif isinstance(item, MinLen):
            said.append("not empty" if item.min_length == 1 else f"at least {item.min_length} long")
    return ", ".join(said)


def _default(info: FieldInfo) -> str:
    if info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    elif info.default is PydanticUndefined:
        return "*required*"
    else:
        value = info.default
    return _value(value)


def _value(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, BaseModel):
        name = type(value).__name__
        return f"[its defaults](#{name.lower()})"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, frozenset | set):
        return f"`{json.dumps(sorted(value))}`"
    if isinstance(value, int) and value >= _MIB and value % _MIB == 0:
        return f"`{value}` ({value // _MIB} MiB)"
    return f"`{json.dumps(value)}`"


def _description(model: type[BaseModel], name: str, info: FieldInfo) -> str:
    if not info.description:
        raise ValueError(f"{model.__name__}.{name} has no description: give its Field(description=...)")
    return info.description


def _docstring(model: type[BaseModel]) -> str:
    text = inspect.cleandoc(model.__doc__ or "")
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"``\1``", text)


# --- the page ------------------------------------------------------------------------------


def _where(toml: str) -> str:
    """Where a table is written in TOML, said the way a TOML reader looks for it."""
    if not toml:
        return "the top level of the file"
    if toml.endswith("[]"):
        listed = toml.removesuffix("[]")
        return f"`[[{listed}]]` tables" if "." not in listed else f"the tables listed in `{listed}`"
    return f"`[{toml}]`"


def render() -> str:
    """The reference, as Markdown: one section per table, a list item per key (a list reads the
    same on the site and on GitHub)."""
    out: list[str] = []
    for table in tables():
        name = table.model.__name__
        out.append(f"## {name}\n")  # its anchor is the name lower-cased, on the site as on GitHub
        where = _where(table.toml)
        out.append(f"In TOML: {where}.\n")
        out.append(_docstring(table.model) + "\n")
        for key in table.keys:
            env = f"`{key.env}`" + (" (JSON)" if key.env_json else "")
            out.append(f"- **`{key.toml}`**: {key.description}\n")
            out.append(f"    Type: {key.type}. Default: {key.default}. Environment: {env}.\n")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def committed(page: str) -> str:
    """The reference ``page`` holds between its markers; ``ValueError`` if it lost one."""
    if MARKER not in page or END not in page:
        raise ValueError(f"{PAGE} lost its marker lines {MARKER!r} and {END!r}: the reference has nowhere to go")
    return page.split(MARKER, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def page_with(page: str, reference: str) -> str:
    """``page`` with ``reference`` between its markers."""
    committed(page)  # both markers present
    head, rest = page.split(MARKER, 1)
    tail = rest.split(END, 1)[1]
    return f"{head}{MARKER}\n\n{reference}\n{END}{tail}"


def on_page_markdown(markdown: str, *, page: Any, config: Any, files: Any) -> str:
    """mkdocs hook: a site is not built from a stale :data:`PAGE`."""
    if page.file.src_uri != PAGE:
        return markdown
    from mkdocs.exceptions import PluginError

    try:
        stale = committed(markdown) != render()
    except ValueError as exc:
        raise PluginError(str(exc)) from None
    if stale:
        raise PluginError(f"{PAGE} is stale: the settings models changed since it was generated; run {REGENERATE}")
    return markdown


def main(argv: Sequence[str] | None = None) -> int:
    """Print the reference, write it into :data:`PATH` (``--write``) or check it (``--check``)."""
    parser = argparse.ArgumentParser(prog="python docs/hooks/config_reference.py", description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"regenerate the reference in docs/{PAGE}")
    parser.add_argument("--check", action="store_true", help=f"exit 1 when docs/{PAGE} is stale")
    args = parser.parse_args(argv)
    reference = render()
    if not (args.write or args.check):
        sys.stdout.write(reference)
        return 0
    page = PATH.read_text(encoding="utf-8")
    if args.check:
        if committed(page) == reference:
            return 0
        print(f"docs/{PAGE} is stale: run {REGENERATE}", file=sys.stderr)
        return 1
    PATH.write_text(page_with(page, reference), encoding="utf-8")
    print(f"wrote the configuration reference into docs/{PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
