"""A group's degraded answer, as configured: the canned reply for when every candidate failed.

How the reply is built and sent lives in :mod:`asgi_router.responses.degraded`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DegradedSettings"]


class DegradedSettings(BaseModel):
    """A group's canned reply."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str = Field(min_length=1, description="The assistant message's text; must not be empty.")
