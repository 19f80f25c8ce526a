"""The semantic cache's index in this process: which stored answers a paraphrase may reach.

Debian's Redis has no vector search, so each process keeps its own index (a fleet feeds it
through a Redis stream of new entries, ``fleet/shared_cache.py``). An entry is indexed under its
*context* (the hash of its request without the last user message, ``cache_key.py``) with its
last user message's embedding, normalised once; a lookup compares only the entries of the same
context, so a short answer like "Yes" never reaches across conversations, and the comparison is
one matrix product over a handful of vectors. At most ``max_entries`` per group are kept, the
oldest dropped first; an entry whose answer has expired from the store is found here and then
missed there, which is a miss.

Needs numpy (the ``semantic`` extra): imported only by a router with a ``cache.semantic``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["SemanticIndex"]

Vector = npt.NDArray[np.float32]


class SemanticIndex:
    """One group's entries by context, each with its unit vector; bounded by ``max_entries``."""

    __slots__ = ("_by_context", "_entries", "max_entries")

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        #: Entry key -> its context, in the order they were added (oldest first).
        self._entries: OrderedDict[str, str] = OrderedDict()
        #: Context -> its entries' keys and unit vectors.
        self._by_context: dict[str, dict[str, Vector]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def has(self, context: str) -> bool:
        """Whether any entry of ``context`` is indexed (else a lookup needs no embedding)."""
        return context in self._by_context

    def add(self, context: str, key: str, embedding: Sequence[float] | bytes) -> None:
        """Index entry ``key`` of ``context`` by ``embedding`` (floats, or float32 bytes)."""
        vector = unit(embedding)
        if vector is None:
            return
        if key in self._entries:
            self._forget(key)
        self._entries[key] = context
        self._by_context.setdefault(context, {})[key] = vector
        while len(self._entries) > self.max_entries:
            self._forget(next(iter(self._entries)))

    def nearest(self, context: str, embedding: Sequence[float]) -> tuple[str, float] | None:
        """The entry of ``context`` most similar to ``embedding`` and its cosine similarity."""
        entries = self._by_context.get(context)
        query = unit(embedding)
        if not entries or query is None:
            return None
        keys = [key for key, vector in entries.items() if vector.shape == query.shape]
        if not keys:
            return None
        scores = np.stack([entries[key] for key in keys]) @ query
        best = int(np.argmax(scores))
        return keys[best], float(scores[best])

    def _forget(self, key: str) -> None:
        context = self._entries.pop(key)
        entries = self._by_context[context]
        del entries[key]
        if not entries:
            del self._by_context[context]


def unit(embedding: Sequence[float] | bytes) -> Vector | None:
    """``embedding`` as a float32 unit vector (``None``: empty, zero or not finite)."""
    vector = (
        np.frombuffer(embedding, dtype=np.float32)
        if isinstance(embedding, bytes)
        else np.asarray(embedding, dtype=np.float32)
    )
    if vector.ndim != 1 or not vector.size:
        return None
    norm = float(np.linalg.norm(vector))
    if not np.isfinite(norm) or norm == 0.0:
        return None
    result: Vector = vector / norm
    return result
