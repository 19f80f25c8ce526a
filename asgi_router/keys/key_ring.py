"""This process's copy of the virtual keys: what a request's inbound auth reads.

A known key never costs a database round trip: the ring maps each secret's digest to its key, in
memory, read synchronously on the request's path. The ring stays true in the background
(:meth:`KeyRing.keep_fresh`): every ``refresh`` seconds (0.5 s) it asks the table for the keys
changed since its last look (an indexed ``updated_at``), so a key revoked or disabled on any
process or host is refused here within a second, and a key created elsewhere is known here as
soon. Changes from this process (the admin API) reach it at once (:meth:`KeyRing.learn`).

A key created elsewhere may be presented before the refresh brings it: a presented secret the
ring does not know is looked up once in the table before it is refused (:meth:`KeyRing.look_up`).
So that a client sending random keys cannot turn every request into a database query, a miss is
remembered for a second (bounded), and look-ups are rate-limited (a token bucket: ``lookups``
a second); past the rate an unknown key is simply refused. A table that fails (the database
away) is logged once per outage and the ring answers from what it has.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

from asgi_router.keys.key_table import KeyTable
from asgi_router.keys.virtual_key import VirtualKey
from asgi_router.observability.events import logger

__all__ = ["KeyRing"]

#: How long an unknown secret's miss is remembered, and how many are (the oldest go first).
MISS_SECONDS: Final = 1.0
_MOST_MISSES: Final = 10_000
#: Seconds of changes read again on each refresh: a change committed late by another writer,
#: stamped a little before the last one seen, is still found.
_OVERLAP: Final = 5.0


class KeyRing:
    """Virtual keys by digest, kept fresh (see the module docstring)."""

    def __init__(
        self,
        table: KeyTable,
        *,
        refresh: float = 0.5,
        lookups: float = 20.0,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.table = table
        self.refresh_every = refresh
        self.wall = wall
        self._clock = clock
        self._by_digest: dict[bytes, VirtualKey] = {}
        self._by_id: dict[str, VirtualKey] = {}
        self._misses: OrderedDict[bytes, float] = OrderedDict()
        self._rate = lookups
        self._tokens = lookups
        self._filled = clock()
        self._since = 0.0
        self._failing = False
        #: Told the caller of every key learned (the per-caller metrics give each its label).
        self.on_caller: Callable[[str], None] | None = None

    def __len__(self) -> int:
        return len(self._by_id)

    def find(self, digest: bytes) -> VirtualKey | None:
        """The key a secret's digest belongs to, as this process knows it (no I/O)."""
        return self._by_digest.get(digest)

    def learn(self, key: VirtualKey) -> None:
        """Keep ``key`` as it now is (its old digests forgotten)."""
        old = self._by_id.get(key.id)
        if old is not None:
            self._by_digest.pop(old.digest, None)
            if old.previous_digest is not None:
                self._by_digest.pop(old.previous_digest, None)
        self._by_id[key.id] = key
        self._by_digest[key.digest] = key
        if key.previous_digest is not None:
            self._by_digest[key.previous_digest] = key
        self._misses.pop(key.digest, None)
        if self.on_caller is not None:
            self.on_caller(key.caller)

    def may_look_up(self, digest: bytes) -> bool:
        """Whether an unknown secret may be looked up now (not missed within a second, and the
        rate allows one); counts the look-up when it may."""
        now = self._clock()
        missed = self._misses.get(digest)
        if missed is not None:
            if now < missed:
                return False
            del self._misses[digest]
        self._tokens = min(self._rate, self._tokens + (now - self._filled) * self._rate)
        self._filled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    async def look_up(self, digest: bytes) -> VirtualKey | None:
        """The key for an unknown secret, from the table (a miss is remembered for a second)."""
        try:
            key = await self.table.find(digest)
        except Exception:
            self._failed()
            key = None
        if key is None:
            self._misses[digest] = self._clock() + MISS_SECONDS
            if len(self._misses) > _MOST_MISSES:
                self._misses.popitem(last=False)
            return None
        self.learn(key)
        return key

    async def load(self) -> None:
        """Every key, once (at start)."""
        started = self.wall()
        for key in await self.table.every():
            self.learn(key)
        self._since = started - _OVERLAP

    async def refresh(self) -> None:
        """The keys changed since the last look, learnt."""
        started = self.wall()
        changed = await self.table.changed_since(self._since)
        for key in changed:
            self.learn(key)
        self._since = started - _OVERLAP

    async def keep_fresh(self) -> None:
        """Refresh every ``refresh`` seconds until cancelled (the router's lifespan runs it)."""
        loaded = False
        while True:
            try:
                if loaded:
                    await self.refresh()
                else:
                    await self.load()
                    loaded = True
                if self._failing:
                    logger.info("virtual keys: the key table answers again")
                    self._failing = False
            except Exception:
                self._failed()
            await asyncio.sleep(self.refresh_every)

    def _failed(self) -> None:
        if not self._failing:
            logger.warning("virtual keys: the key table cannot be read; known keys are answered as last seen")
            self._failing = True
