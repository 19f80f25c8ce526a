"""A fleet's response-cache entries, in Redis: every process serves what any one stored
(the response cache itself is ``caching/``; this is its store when ``state_url`` names a Redis).

Each entry is a key of its own with its time to live (``SET ... EX``); the whole is bounded by
``cache_max_bytes`` across the fleet: a sorted set indexes the entries by when they were stored,
a hash keeps each one's size and a counter their total, and a put evicts the oldest until the
total fits (one Lua script: atomic, one round trip). An entry that expired by itself stays
counted until it is the oldest, which it soon is.

A semantic lookup's index is each process's own (Debian's Redis has no vector search); a new
entry's context, key and vector are appended to a Redis stream (trimmed near the groups'
``max_entries``), which every process reads from where it left off before its next semantic
lookup: :meth:`RedisEntries.announce`, :meth:`RedisEntries.news`.

Every call goes through the shared state's :class:`~asgi_router.fleet.link.Link`: a store that is
down (or slow past the link's request timeout) reads as a miss and a put is skipped, never a
failed request; the link reconnects in the background.
"""

from __future__ import annotations

import time
from typing import Final

from redis.asyncio import Redis

from asgi_router.fleet.link import Link

__all__ = ["RedisEntries"]

#: KEYS: the entry, the index, the sizes, the total. ARGV: the value, its TTL, the score (now),
#: the fleet's bound in bytes. Answers the total after evictions.
_PUT: Final = """
local old = redis.call('HGET', KEYS[3], KEYS[1])
if old then redis.call('DECRBY', KEYS[4], old) end
local size = string.len(ARGV[1])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], KEYS[1])
redis.call('HSET', KEYS[3], KEYS[1], size)
local total = redis.call('INCRBY', KEYS[4], size)
local bound = tonumber(ARGV[4])
while total > bound do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not oldest then break end
  local gone = tonumber(redis.call('HGET', KEYS[3], oldest) or '0')
  redis.call('ZREM', KEYS[2], oldest)
  redis.call('HDEL', KEYS[3], oldest)
  redis.call('DEL', oldest)
  total = redis.call('DECRBY', KEYS[4], gone)
end
return total
"""


#: The most semantic entries one read of the stream takes (the rest on the next lookups).
_NEWS_BATCH: Final = 1000


class RedisEntries:
    """The entries under ``prefix`` in the store ``link`` reaches, bounded by ``max_bytes``."""

    __slots__ = ("_keys", "_link", "_prefix", "_seen", "_stream", "_total", "max_bytes")

    def __init__(self, link: Link, prefix: str, max_bytes: int) -> None:
        self._link = link
        self._prefix = f"{prefix}:cache"
        self._keys = (f"{self._prefix}:index", f"{self._prefix}:sizes", f"{self._prefix}:bytes")
        self.max_bytes = max_bytes
        #: The fleet's total as the last put saw it (the gauge's reading).
        self._total = 0
        self._stream = f"{self._prefix}:semantic"
        #: The last id of the semantic stream this process read.
        self._seen = b"0-0"

    async def get(self, key: str) -> bytes | None:
        name = f"{self._prefix}:e:{key}"

        async def read(client: Redis) -> bytes | None:
            value = await client.get(name)
            return value.encode() if isinstance(value, str) else value

        return await self._link.call(read, request=True)

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        if len(value) > self.max_bytes:
            return
        name = f"{self._prefix}:e:{key}"

        async def write(client: Redis) -> int:
            total = await client.eval(
                _PUT, 4, name, *self._keys, value, max(1, int(ttl * 1000)), time.time(), self.max_bytes
            )
            return int(total)

        total = await self._link.call(write)
        if total is not None:
            self._total = total

    def size(self) -> int:
        return self._total

    async def announce(self, group: str, context: str, key: str, vector: bytes, keep: int) -> None:
        """Append a new semantic entry to the fleet's stream (about ``keep`` kept)."""

        async def append(client: Redis) -> None:
            await client.xadd(self._stream, {"g": group, "c": context, "k": key, "v": vector}, maxlen=keep)

        await self._link.call(append)

    async def news(self) -> list[tuple[str, str, str, bytes]]:
        """The fleet's semantic entries since this process last read (at most a batch)."""

        async def read(client: Redis) -> list[tuple[bytes, dict[bytes, bytes]]]:
            answer: list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]] = await client.xread(  # type: ignore[assignment]
                {self._stream: self._seen}, count=_NEWS_BATCH
            )
            return [item for _, items in answer for item in items]

        items = await self._link.call(read, request=True)
        news: list[tuple[str, str, str, bytes]] = []
        for entry_id, fields in items or ():
            self._seen = entry_id
            try:
                news.append((fields[b"g"].decode(), fields[b"c"].decode(), fields[b"k"].decode(), fields[b"v"]))
            except (KeyError, UnicodeDecodeError):  # not one of ours: skipped
                continue
        return news
