"""The semantic half of a cached group's lookup and store (``cache.semantic``).

After an exact miss: the request's *context* (everything but its last user message, with its
protocol, ref and caller: ``cache_key.py``) must have indexed entries at all, else the lookup
ends without an embedding call; then the last user message is embedded (``embedder.py``) and
the nearest entry of that context is a hit when its cosine similarity reaches the group's
``threshold``. When the answer is stored, its entry is indexed under its context with the same
embedding (made now if the lookup did not need one), and announced to the fleet when the entries
live in Redis: every process's index reads the fleet's new entries from a Redis stream before
its next lookup. An embedding that cannot be had is a miss, and an answer that is not indexed.

Imported only by a router whose groups ask for a semantic lookup (it needs numpy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from asgi_router.caching.cache_key import context_key, last_user_text
from asgi_router.caching.embedder import Embedder
from asgi_router.caching.semantic_index import SemanticIndex, unit
from asgi_router.config.cache_settings import SemanticCacheSettings
from asgi_router.observability.events import logger

__all__ = ["Feed", "Probe", "SemanticLookup"]


class Feed(Protocol):
    """A fleet's stream of new semantic entries: ``(group, context, key, float32 vector)``."""

    async def announce(self, group: str, context: str, key: str, vector: bytes, keep: int) -> None: ...

    async def news(self) -> Sequence[tuple[str, str, str, bytes]]: ...


class Probe:
    """What a semantic lookup learned about a request, for indexing its answer once stored."""

    __slots__ = ("context", "embedding", "text")

    def __init__(self, context: str, text: str, embedding: Sequence[float] | None) -> None:
        self.context = context
        self.text = text
        self.embedding = embedding


class SemanticLookup:
    """The semantic lookups of one router's groups: their indexes, the embedder, the feed."""

    __slots__ = ("_embed", "_feed", "_indexes")

    def __init__(self, embed: Embedder, feed: Feed | None, sizes: Mapping[str, int]) -> None:
        self._embed = embed
        self._feed = feed
        #: One index per group with a semantic lookup, bounded by its ``max_entries``.
        self._indexes = {group: SemanticIndex(size) for group, size in sizes.items()}

    def probe_for(self, payload: Mapping[str, Any], protocol: str, ref: str, caller: str | None) -> Probe | None:
        """What to index a request's answer by, without a lookup (``None``: nothing to)."""
        context = context_key(payload, protocol, ref, caller)
        text = last_user_text(payload)
        return Probe(context, text, None) if context is not None and text is not None else None

    async def find(
        self,
        group: str,
        semantic: SemanticCacheSettings,
        payload: Mapping[str, Any],
        protocol: str,
        ref: str,
        caller: str | None,
        request_id: str,
    ) -> tuple[tuple[str, float] | None, Probe | None]:
        """The entry key a paraphrase reaches and its similarity (``None``: none reaches the
        threshold), and the probe to index the answer by (``None``: nothing to index by)."""
        context = context_key(payload, protocol, ref, caller)
        text = last_user_text(payload)
        if context is None or text is None:
            return None, None
        await self._catch_up()
        index = self._indexes[group]
        if not index.has(context):
            return None, Probe(context, text, None)
        embedding = await self._embed(semantic.embed, text, request_id)
        if embedding is None:
            return None, None
        found = index.nearest(context, embedding)
        probe = Probe(context, text, embedding)
        if found is None or found[1] < semantic.threshold:
            return None, probe
        return found, probe

    async def remember(
        self, group: str, semantic: SemanticCacheSettings, probe: Probe, key: str, request_id: str
    ) -> None:
        """Index the stored entry ``key`` under the probe's context (and tell the fleet)."""
        embedding = probe.embedding
        if embedding is None:
            embedding = await self._embed(semantic.embed, probe.text, request_id)
            if embedding is None:
                return
        index = self._indexes[group]
        index.add(probe.context, key, embedding)
        vector = unit(embedding)
        if self._feed is not None and vector is not None:
            try:
                await self._feed.announce(group, probe.context, key, vector.tobytes(), index.max_entries)
            except Exception:
                logger.warning("announcing a semantic cache entry to the fleet failed", exc_info=True)

    async def _catch_up(self) -> None:
        """Index what the fleet stored since this process last looked."""
        if self._feed is None:
            return
        try:
            news = await self._feed.news()
        except Exception:
            logger.warning("reading the fleet's semantic cache entries failed", exc_info=True)
            return
        for group, context, key, vector in news:
            index = self._indexes.get(group)
            if index is not None:
                index.add(context, key, vector)
