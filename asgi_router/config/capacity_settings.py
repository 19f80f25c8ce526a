"""A group's capacity settings: sticky sessions (``sticky``) and waiting for capacity (``queue``).

Both are off unless the group's table names them, and neither costs a request of a group
without them anything. ``sticky`` keeps a conversation on the member that served it last, so
the provider's prompt cache stays warm; ``queue`` lets a request wait for a member that is at
its budget or concurrency cap instead of being refused at once. Their behaviour is described on
the Routing page; here they are checked at load.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from asgi_router.config.strict_settings import StrictSettings

__all__ = ["PRIORITIES", "Priority", "QueueSettings", "StickyKey", "StickySettings"]

#: What a sticky group keys a request's affinity on.
StickyKey = Literal["session", "principal", "prefix"]
#: The values ``priority_header`` may carry, highest first.
Priority = Literal["high", "normal", "low"]
PRIORITIES: Final[tuple[Priority, ...]] = ("high", "normal", "low")


class StickySettings(StrictSettings):
    """``[groups.<id>.sticky]``: send a key's requests to the member that served it last."""

    key: StickyKey = Field(
        default="session",
        description="What a request's affinity is keyed on: `\"session\"` (the router's `session_header`), "
        '`"principal"` (the caller inbound auth admitted) or `"prefix"` (a hash of the system message(s) and the '
        "first user message; never the text).",
    )
    ttl: PositiveFloat = Field(
        default=300.0, description="Seconds an affinity lasts after the last request that used it."
    )
    max_keys: PositiveInt = Field(
        default=100_000, description="Affinities kept per process; past it the least recently used is dropped first."
    )


class QueueSettings(StrictSettings):
    """``[groups.<id>.queue]``: wait for capacity instead of answering 429/503 at once."""

    max_wait: PositiveFloat = Field(
        default=10.0,
        description="Seconds a request may wait for a member with capacity (within its `deadline`), then it gets "
        "today's answer (429 with Retry-After, or 503 `upstream_saturated`).",
    )
    max_size: PositiveInt = Field(
        default=100, description="Requests that may wait at once in this process; one more gets today's answer."
    )
    priority_header: str = Field(
        default="x-priority",
        description="The request header saying `high`, `normal` or `low`; honoured only for `priority_callers`.",
    )
    priority_callers: list[str] = Field(
        default_factory=list,
        description='The principals whose `priority_header` is honoured (`"anonymous"`: requests without '
        "one; everyone else waits as `normal`: a client cannot promote itself).",
    )

    @field_validator("priority_header")
    @classmethod
    def _check_header(cls, value: str) -> str:
        if not value or any(not (33 <= ord(ch) < 127) or ch in ':"(),/;<=>?@[\\]{}' for ch in value):
            raise ValueError(f"priority_header {value!r} is not a valid HTTP header name")
        return value.lower()
