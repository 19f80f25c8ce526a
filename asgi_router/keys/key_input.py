"""What an operator may ask of a key, checked before anything is kept.

The admin API and ``asgi-router keys`` take the same fields, checked by the same models: an
unknown field is a 400 naming it (a misspelt ``rmp`` must not be silently ignored, as settings
refuse it), a bad value a 422 naming the field. ``expires_at`` is RFC 3339 (kept in UTC);
``metadata`` an object of at most 4 KiB of JSON; ``groups`` and ``downgrade_to`` name refs, and
``caller`` a principal's name (letters, digits, ``_.:@-``), as ``callers.<name>`` does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from asgi_router.config.caller_settings import CALLER_NAME
from asgi_router.core.refs import InvalidRef, parse_model_ref

__all__ = ["MAX_METADATA_BYTES", "InputProblem", "KeyChanges", "KeyRequest", "parse_input", "parse_time"]

#: The largest ``metadata`` object, as compact JSON.
MAX_METADATA_BYTES: Final = 4096


@dataclass(frozen=True, slots=True)
class InputProblem:
    """Why an admin request's body was refused: its status (400 or 422), the field, the words."""

    status: int
    field: str | None
    message: str


def parse_time(text: str) -> float:
    """An RFC 3339 time as Unix seconds (a time without offset is UTC)."""
    value = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()


def _check_ref(value: str | None) -> str | None:
    if value is not None and isinstance(parse_model_ref(value), InvalidRef):
        raise ValueError("is not a model reference (provider/model-id, group/name or an alias)")
    return value


class _Fields(BaseModel):
    """The fields a key takes from an operator (all optional: a change names only what changes)."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    name: str | None = Field(default=None, min_length=1, max_length=128)
    groups: list[str] | None = Field(default=None, max_length=256)
    usd_per_day: PositiveFloat | None = None
    tokens_per_day: PositiveInt | None = None
    rpm: PositiveInt | None = None
    downgrade_to: str | None = None
    hard_limit: float | None = Field(default=None, ge=1.0)
    expires_at: str | None = None
    metadata: dict[str, Any] | None = None
    disabled: bool | None = None

    @field_validator("groups")
    @classmethod
    def _check_groups(cls, value: list[str] | None) -> list[str] | None:
        for ref in value or ():
            _check_ref(ref)
        return value

    @field_validator("downgrade_to")
    @classmethod
    def _check_downgrade(cls, value: str | None) -> str | None:
        return _check_ref(value)

    @field_validator("expires_at")
    @classmethod
    def _check_expiry(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_time(value)
            except ValueError:
                raise ValueError("is not an RFC 3339 time (2026-01-31T12:00:00Z)") from None
        return value

    @field_validator("metadata")
    @classmethod
    def _check_metadata(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(json.dumps(value, separators=(",", ":")).encode()) > MAX_METADATA_BYTES:
            raise ValueError(f"is larger than {MAX_METADATA_BYTES} bytes of JSON")
        return value

    def expiry(self) -> float | None:
        return parse_time(self.expires_at) if self.expires_at is not None else None


class KeyRequest(_Fields):
    """A new key: its caller, and any of the other fields."""

    caller: str = Field(min_length=1, max_length=64)

    @field_validator("caller")
    @classmethod
    def _check_caller(cls, value: str) -> str:
        if not CALLER_NAME.fullmatch(value):
            raise ValueError("is a principal's name: letters, digits, '_.:@-', 1 to 64")
        return value

    @model_validator(mode="after")
    def _check_hard_limit(self) -> Self:
        if self.hard_limit is not None and self.downgrade_to is None:
            raise ValueError("hard_limit needs downgrade_to (without it the cap itself refuses)")
        return self


class KeyChanges(_Fields):
    """A change to a key: the fields named are set (``null`` clears an optional one)."""


M = TypeVar("M", bound=_Fields)


def parse_input(model: type[M], body: bytes | Mapping[str, Any]) -> M | InputProblem:
    """``body`` (JSON bytes, or a mapping already parsed) as ``model``, or why not."""
    if isinstance(body, bytes):
        try:
            data = json.loads(body) if body.strip() else {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            return InputProblem(400, None, "the body is not JSON")
    else:
        data = dict(body)
    if not isinstance(data, dict):
        return InputProblem(400, None, "the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"]) or None
        if error["type"] == "extra_forbidden":
            return InputProblem(400, where, f"unknown field {where!r}")
        words = error["msg"].removeprefix("Value error, ")
        return InputProblem(422, where, f"{where}: {words}" if where else words)
