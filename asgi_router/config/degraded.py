"""The degraded answer: a configured canned reply sent when every candidate of a group failed.

Opt-in per group (``degraded = {content = "..."}``). Some products would rather show "the
assistant is busy, try again in a minute" inside their chat UI than surface a 502; this gives
them that without a code path of their own. The reply is shaped as the request asked: one
``chat.completion`` JSON object, or an SSE stream of ``chat.completion.chunk`` events ending
in ``data: [DONE]``, so the ``openai`` SDK reads it like any answer. It is always marked
``x-router-degraded: 1`` so that callers who care can tell it from a model's answer.

Only failures that say "no capacity right now" degrade (5xx-class and 429); a request that
fits no model's context window is the client's problem and keeps its 400.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DegradedSettings"]


class DegradedSettings(BaseModel):
    """A group's canned reply."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    content: str = Field(min_length=1, description="The assistant message's text; must not be empty.")
