"""The response cache's entries in this process: least recently used evicted, each with its TTL.

Bounded by bytes, not entries (``cache_max_bytes``): answers differ in size by orders of
magnitude, and what an operator sizes is memory. An entry over its time is dropped when next
read; the total counts every entry still held, expired or not, so the bound holds whatever the
clock does. ``EntryStore`` is what the cache asks of any store (``fleet/shared_cache.py`` is the
fleet's).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

__all__ = ["EntryStore", "MemoryEntries"]


class EntryStore(Protocol):
    """Where entries live: read by key, written with a time to live, sized in bytes."""

    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        """Keep ``value`` under ``key`` for ``ttl`` seconds (more than 0)."""
        ...

    def size(self) -> int:
        """The bytes of entries held (this process's view, for the gauge)."""
        ...


class MemoryEntries:
    """Entries in a dict kept in use order (see the module docstring); ``clock`` in seconds."""

    __slots__ = ("_clock", "_entries", "_size", "max_bytes")

    def __init__(self, max_bytes: int, clock: Callable[[], float]) -> None:
        self.max_bytes = max_bytes
        self._clock = clock
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self._size = 0

    async def get(self, key: str) -> bytes | None:
        held = self._entries.get(key)
        if held is None:
            return None
        value, expires = held
        if self._clock() >= expires:
            self._drop(key)
            return None
        self._entries.move_to_end(key)
        return value

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        if len(value) > self.max_bytes:
            return
        if key in self._entries:
            self._drop(key)
        self._entries[key] = (value, self._clock() + ttl)
        self._size += len(value)
        while self._size > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def size(self) -> int:
        return self._size

    def _drop(self, key: str) -> None:
        value, _ = self._entries.pop(key)
        self._size -= len(value)
