"""``[[rules]]`` settings: one entry's conditions and the ref they route to.

How a table of rules picks a route for a request lives in :mod:`asgi_router.routing.rules`.
"""

from __future__ import annotations

from typing import Final

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, field_validator

from asgi_router.core.refs import is_valid_name

__all__ = ["DEFAULT_ROUTE", "RuleSettings"]

#: The rule name the router's route header says when no rule chose the plan.
DEFAULT_ROUTE: Final = "default"


class RuleSettings(BaseModel):
    """One ``[[rules]]`` entry: conditions (all must hold) and the ref they route to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        description="Sent back in the router's route header and recorded with the request; unique, letters, digits, "
        "`_`, `.` and `-`, and not `default`."
    )
    route: str = Field(
        description="What to resolve when the rule matches: `group/<id>` (not a group with rules itself) or "
        "`provider/model-id`."
    )
    applies_to: list[str] | None = Field(
        default=None, description="The groups with `rules = true` this rule is for; all of them when unset."
    )
    min_prompt_tokens: NonNegativeInt | None = Field(
        default=None, description="Holds when the request's estimated prompt tokens are at least this."
    )
    max_prompt_tokens: PositiveInt | None = Field(
        default=None, description="Holds when the request's estimated prompt tokens are below this."
    )
    images: bool | None = Field(
        default=None, description="Holds when some message has an image part (`true`), or none has (`false`)."
    )
    tools: bool | None = Field(
        default=None, description="Holds when the request offers `tools` (or legacy `functions`) (`true`), or does not."
    )
    stream: bool | None = Field(
        default=None, description="Holds when the request streams (`true`), or does not (`false`)."
    )
    reasoning: bool | None = Field(
        default=None,
        description="Holds when `reasoning_effort` (or a `reasoning` object) is present (`true`), or absent.",
    )
    headers: dict[str, str] = Field(
        default_factory=dict,
        description="Inbound header values that must all be equal (names are case-insensitive).",
    )
    metadata: dict[str, str] = Field(
        default_factory=dict, description="Entries of the request body's `metadata` that must all be equal."
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not is_valid_name(value) or value == DEFAULT_ROUTE:
            raise ValueError(f"rule name {value!r} must be letters, digits, '_', '.', '-' and not 'default'")
        return value

    @field_validator("headers")
    @classmethod
    def _lower_header_names(cls, value: dict[str, str]) -> dict[str, str]:
        return {name.lower(): expected for name, expected in value.items()}
