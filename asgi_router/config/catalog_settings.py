"""The catalog's settings: what the router knows about each ``provider/model-id`` it may call.

Configured under ``[catalog."provider/model-id"]``: context window, output cap and prices. The
lookups over it live in :mod:`asgi_router.routing.catalog`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt

__all__ = ["ModelInfo"]


class ModelInfo(BaseModel):
    """One catalog entry; every field is optional (prices in USD per million tokens)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context_window: PositiveInt | None = Field(
        default=None,
        description="Tokens the model can hold, prompt and output together (the context-window pre-check).",
    )
    max_output_tokens: PositiveInt | None = Field(
        default=None, description="The largest `max_tokens` the model accepts (the context-window pre-check)."
    )
    input_price: NonNegativeFloat | None = Field(
        default=None, description="US dollars per million prompt tokens (the `cost` strategy, `cost_usd`)."
    )
    output_price: NonNegativeFloat | None = Field(
        default=None, description="US dollars per million completion tokens (the `cost` strategy, `cost_usd`)."
    )
    cached_input_price: NonNegativeFloat | None = Field(
        default=None,
        description="US dollars per million prompt tokens read from the provider's prompt cache (unset: "
        "`input_price`).",
    )
    cache_write_price: NonNegativeFloat | None = Field(
        default=None,
        description="US dollars per million prompt tokens written to the provider's prompt cache (Anthropic's "
        "`cache_creation_input_tokens`; unset: `input_price`).",
    )
