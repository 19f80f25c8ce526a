"""Sticky sessions across a fleet: a key's member kept in the shared store.

With ``state_url``, a conversation whose turns a load balancer spreads over several processes
must still reach one member, so the affinity lives in Redis: one ``GET`` on the request's path
(the key's member, before the walk) and one ``SET`` with the group's ``ttl`` in the background
once a member served it. The ``GET`` is the one round trip a request of a sticky group waits
for (bounded like a rotate counter's, ``link.REQUEST_TIMEOUT``); while the store is unreachable,
or slow, the process's own table answers (``resilience/affinity.py``), which every process keeps
too. Keys are hashes (``routing/sticky_keys.py``): no prompt text reaches the store.
"""

from __future__ import annotations

import math

from redis.asyncio import Redis

from asgi_router.fleet.link import Link

__all__ = ["FleetAffinities"]


class FleetAffinities:
    """Affinities in the shared store, under ``<prefix>:stick:<group>:<key>``."""

    __slots__ = ("_link", "_prefix")

    def __init__(self, link: Link, prefix: str) -> None:
        self._link = link
        self._prefix = prefix

    def _name(self, group: str, key: str) -> str:
        return f"{self._prefix}:stick:{group}:{key}"

    @property
    def up(self) -> bool:
        """Whether the store answers (else the process's own table decides)."""
        return self._link.up

    async def member(self, group: str, key: str) -> str | None:
        """The key's member as the fleet knows it; ``None`` when it has none or cannot say."""
        name = self._name(group, key)

        async def get(client: Redis) -> bytes | str | None:
            value: bytes | str | None = await client.get(name)
            return value

        value = await self._link.call(get, request=True)
        return value.decode() if isinstance(value, bytes) else value

    def remember(self, group: str, key: str, member: str, ttl: float) -> None:
        """``member`` served ``key``: the fleet's affinity is (re)set for ``ttl`` seconds."""
        name, milliseconds = self._name(group, key), max(1, math.ceil(ttl * 1000))

        async def put(client: Redis) -> None:
            await client.set(name, member, px=milliseconds)

        self._link.spawn(put)
