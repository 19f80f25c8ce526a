"""The model catalog: what the router knows about each ``provider/model-id`` it may call.

Configured under ``[catalog."provider/model-id"]``. Three features read it: the ``cost``
strategy (prices), the context-window pre-check (window and output cap), and cost accounting
(``cost_usd`` on served events: prompt tokens the provider read from its prompt cache, or wrote
to it, at their own prices where the entry has them). A model missing from the catalog is never skipped for its
context and sorts last by cost: the catalog refines routing, it never gates it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from asgi_router.config.catalog_settings import ModelInfo

__all__ = ["Catalog", "DEFAULT_EXPECTED_OUTPUT_TOKENS"]

#: Output tokens a cost estimate assumes when the request sets no ``max_tokens``.
DEFAULT_EXPECTED_OUTPUT_TOKENS: Final = 256

_PER_MILLION: Final = 1_000_000


class Catalog:
    """Lookups over the configured entries, keyed by ``provider/model-id``."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Mapping[str, ModelInfo]) -> None:
        self._entries = dict(entries)

    def get(self, key: str) -> ModelInfo | None:
        return self._entries.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def keys(self) -> frozenset[str]:
        return frozenset(self._entries)

    def fits(self, key: str, prompt_tokens: int, max_tokens: int | None) -> bool:
        """Whether ``key`` can take this prompt plus ``max_tokens`` of output (True when unknown)."""
        info = self._entries.get(key)
        if info is None:
            return True
        wanted = max_tokens or 0
        if info.max_output_tokens is not None and wanted > info.max_output_tokens:
            return False
        return info.context_window is None or prompt_tokens + wanted <= info.context_window

    def is_priced(self, key: str) -> bool:
        info = self._entries.get(key)
        return info is not None and info.input_price is not None and info.output_price is not None

    def cost(
        self, key: str, prompt_tokens: int, completion_tokens: int, cache_read: int = 0, cache_write: int = 0
    ) -> float | None:
        """USD for this many tokens on ``key``; ``None`` when the catalog has no prices for it.

        ``prompt_tokens`` includes the ``cache_read`` and ``cache_write`` tokens among them: the
        uncached rest costs ``input_price``, reads ``cached_input_price`` and writes
        ``cache_write_price`` (each ``input_price`` when unset)."""
        info = self._entries.get(key)
        if info is None or info.input_price is None or info.output_price is None:
            return None
        price = info.input_price
        if not (cache_read or cache_write):  # the usual response: no cache in its usage
            return (prompt_tokens * price + completion_tokens * info.output_price) / _PER_MILLION
        read_price = info.cached_input_price if info.cached_input_price is not None else price
        write_price = info.cache_write_price if info.cache_write_price is not None else price
        uncached = max(0, prompt_tokens - cache_read - cache_write)
        prompt = uncached * price + cache_read * read_price + cache_write * write_price
        return (prompt + completion_tokens * info.output_price) / _PER_MILLION
