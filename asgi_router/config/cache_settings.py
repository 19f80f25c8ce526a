"""A group's response cache, as configured: how long an answer is kept, how large it may be,
and whether callers share entries (``responses/``'s cache acts on it: ``caching/``).

Off unless a group asks for it (``cache = {}`` takes every default). The defaults are chosen for
a cache that is safe to turn on: five minutes is long enough for a retried or repeated prompt
(an agent's loop, a page reloaded) and short enough that an answer about "now" does not go stale
for long; an answer over 1 MB is rarer than the memory it would take from the others; and an
answer never crosses callers unless the group says so, since a prompt may carry one caller's
data and its answer repeat it.
"""

from __future__ import annotations

import importlib.util

from pydantic import Field, PositiveInt, model_validator

from asgi_router.config.strict_settings import StrictSettings

__all__ = ["DEFAULT_CACHE_MAX_BYTES", "CacheSettings", "SemanticCacheSettings"]

#: The router's whole response cache, by default (``cache_max_bytes``).
DEFAULT_CACHE_MAX_BYTES = 64 * 1024 * 1024


class SemanticCacheSettings(StrictSettings):
    """A group's semantic lookup: the last user message matched by embedding similarity."""

    embed: str = Field(
        description="The embeddings ref the last user message is embedded with (`provider/model-id` or "
        "`group/<id>`, served on an OpenAI-compatible `/embeddings`)."
    )
    threshold: float = Field(
        default=0.95,
        gt=0.0,
        le=1.0,
        description="The cosine similarity at or above which a stored answer is served for a paraphrase.",
    )
    max_entries: PositiveInt = Field(
        default=10_000, description="The most entries this process keeps in its similarity index (oldest dropped)."
    )

    @model_validator(mode="after")
    def _check_numpy(self) -> SemanticCacheSettings:
        # Refused at load rather than at the first request: the index needs numpy.
        if importlib.util.find_spec("numpy") is None:
            raise ValueError(
                "cache.semantic needs numpy, which is not installed here: pip install 'asgi-router[semantic]'"
            )
        return self


class CacheSettings(StrictSettings):
    """A group's response cache: `cache = {ttl = 300, max_entry_bytes = 1_000_000, shared = false}`."""

    ttl: PositiveInt = Field(
        default=300,
        description="Seconds a stored answer is served for; a client's cache TTL header may only shorten it "
        "(see [Caching](caching.md)).",
    )
    max_entry_bytes: PositiveInt = Field(
        default=1_000_000, description="The largest answer stored (its stored form); a larger one is not cached."
    )
    shared: bool = Field(
        default=False,
        description="Serve an entry to every caller; unset, an answer is only ever served to the caller it was "
        "made for.",
    )
    semantic: SemanticCacheSettings | None = Field(
        default=None,
        description="Also serve a stored answer for a paraphrase of the last user message (the `semantic` "
        "extra; unset: exact matches only).",
    )
