"""Parse the request's ``model`` string into a :class:`ModelRef`.

One string carries two meanings (``docs/routing.md``): ``provider/model-id`` names a concrete upstream
model, ``group/<id>`` names a routing group, and a bare name is looked up among the configured
aliases. The string is split at the *first* ``/`` so that ids which contain slashes themselves
(``openrouter/deepseek/deepseek-chat``) are kept whole.

Parsing is total: :func:`parse_model_ref` returns either a :class:`ModelRef` or an
:class:`InvalidRef` carrying a user-facing message, and never raises. The character sets are
strict on purpose: whatever passes here is later written into response headers and log lines,
so nothing that could split a header or forge a log line (CR, LF, NUL, escapes) may pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Final

__all__ = [
    "GROUP_NAMESPACE",
    "InvalidRef",
    "MAX_MODEL_ID_LENGTH",
    "ModelRef",
    "RefKind",
    "is_valid_name",
    "parse_model_ref",
]

#: The reserved first segment that names a routing group; no provider may be called so.
GROUP_NAMESPACE: Final = "group"
#: Longest model id accepted (provider model ids are far shorter in practice).
MAX_MODEL_ID_LENGTH: Final = 256

# Names of providers, groups and aliases: what a config key may reasonably be.
_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
# Upstream model ids: letters, digits and the punctuation real ids use
# (``qwen2.5-coder:7b``, ``deepseek/deepseek-chat``, ``model@2024-05-13``, ``ft:gpt-4o:org::id``).
_MODEL_ID_RE: Final = re.compile(r"[A-Za-z0-9._:@+~/\-]+")

_SPELLINGS: Final = "use 'provider/model-id' (e.g. 'openai/gpt-4o-mini') or 'group/<id>'"


class RefKind(Enum):
    """What a parsed ``model`` string points at."""

    DIRECT = "direct"
    GROUP = "group"
    ALIAS = "alias"


@dataclass(frozen=True, slots=True)
class ModelRef:
    """A parsed ``model`` field: a direct provider model, a group, or a bare alias name."""

    kind: RefKind
    #: The provider name (DIRECT), the group id (GROUP) or the alias (ALIAS).
    name: str
    #: The upstream model id for DIRECT refs; empty otherwise.
    model_id: str = ""

    def __str__(self) -> str:
        if self.kind is RefKind.DIRECT:
            return f"{self.name}/{self.model_id}"
        if self.kind is RefKind.GROUP:
            return f"{GROUP_NAMESPACE}/{self.name}"
        return self.name


@dataclass(frozen=True, slots=True)
class InvalidRef:
    """Why a ``model`` string could not be parsed; ``message`` is safe to show the client."""

    message: str


def is_valid_name(name: str) -> bool:
    """Whether ``name`` is a legal provider, group or alias name."""
    return _NAME_RE.fullmatch(name) is not None


def _is_valid_model_id(model_id: str) -> bool:
    return (
        len(model_id) <= MAX_MODEL_ID_LENGTH
        and _MODEL_ID_RE.fullmatch(model_id) is not None
        and not model_id.startswith("/")
        and not model_id.endswith("/")
        and "//" not in model_id
    )


def parse_model_ref(value: object) -> ModelRef | InvalidRef:
    """Parse ``value`` (the request's ``model`` field) into a ref, or say why it is not one."""
    if not isinstance(value, str):
        return InvalidRef(f"'model' must be a string; {_SPELLINGS}")
    if not value:
        return InvalidRef(f"'model' is empty; {_SPELLINGS}")
    if len(value) > MAX_MODEL_ID_LENGTH + 65:
        return InvalidRef(f"'model' is longer than {MAX_MODEL_ID_LENGTH + 65} characters")
    head, sep, tail = value.partition("/")
    if not sep:
        if is_valid_name(value):
            return ModelRef(RefKind.ALIAS, value)
        return InvalidRef(f"'model' has characters that are not allowed; {_SPELLINGS}")
    if not is_valid_name(head):
        return InvalidRef(f"'model' has an invalid provider or 'group' prefix; {_SPELLINGS}")
    if head == GROUP_NAMESPACE:
        if is_valid_name(tail):
            return ModelRef(RefKind.GROUP, tail)
        return InvalidRef("'model' names an invalid group id; group ids are letters, digits, '_', '.', '-'")
    if not _is_valid_model_id(tail):
        return InvalidRef(f"'model' has an empty or invalid model id after '{head}/'; {_SPELLINGS}")
    return ModelRef(RefKind.DIRECT, head, tail)
