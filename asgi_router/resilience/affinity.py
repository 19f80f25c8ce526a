"""Sticky sessions' memory: which member last served a key, for ``ttl`` seconds, bounded.

A provider's prompt cache is per deployment: the next turn of a conversation is cheaper and
faster on the member that served the last one. :class:`Affinities` remembers, per group and
key, the member that last served the key. An entry lasts ``ttl`` seconds after its last use
(a hit renews it, like the provider's cache) and at most ``max_keys`` are kept per group, the
least recently used forgotten first: clients choose keys, so the table must not grow without
bound. Pure and synchronous, on an injected clock: a fleet shares affinities through its store
(:mod:`asgi_router.fleet`), which reads and writes through this same interface's owner.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

__all__ = ["Affinities"]


class Affinities:
    """One group's affinities: key to ``provider/model-id``, each with when it expires."""

    __slots__ = ("_clock", "_entries", "_max_keys", "_ttl")

    def __init__(self, ttl: float, max_keys: int, clock: Callable[[], float]) -> None:
        self._ttl = ttl
        self._max_keys = max_keys
        self._clock = clock
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def member(self, key: str) -> str | None:
        """The member that last served ``key``, if its affinity has not expired."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            del self._entries[key]
            return None
        return entry[0]

    def remember(self, key: str, member: str) -> None:
        """``member`` served ``key``: the affinity is (re)set for another ``ttl``."""
        entries = self._entries
        entries[key] = (member, self._clock() + self._ttl)
        entries.move_to_end(key)
        while len(entries) > self._max_keys:
            entries.popitem(last=False)

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)
