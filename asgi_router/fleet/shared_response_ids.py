"""Which candidate produced a Responses API response, across a fleet: kept in the shared store.

A follow-up turn (``previous_response_id``) may reach any process of a fleet; only the provider
that produced the response holds it, so every process must know which candidate that was. The
store keeps it under ``<prefix>:resp:<digest of the id>`` (no id in a key name) for
``responses_ttl``: one ``GET`` on a follow-up's path (bounded like any request's round trip,
``link.REQUEST_TIMEOUT``), one ``SET`` in the background once a response was relayed, an empty
value (awaited, bounded the same way) once its provider deleted it. While the
store is unreachable, the process's own table answers (``attempts/response_affinity.py``).
"""

from __future__ import annotations

import math

from redis.asyncio import Redis

from asgi_router.fleet.link import Link

__all__ = ["FleetResponseIds"]


class FleetResponseIds:
    """Response ids' producers in the shared store (values: ``candidate`` and the caller's digest)."""

    __slots__ = ("_link", "_prefix")

    def __init__(self, link: Link, prefix: str) -> None:
        self._link = link
        self._prefix = prefix

    def _name(self, digest: str) -> str:
        return f"{self._prefix}:resp:{digest}"

    @property
    def up(self) -> bool:
        """Whether the store answers (else the process's own table decides)."""
        return self._link.up

    async def producer(self, digest: str) -> str | None:
        """What the fleet keeps for the id whose digest is ``digest``; ``None``: nothing, or it
        cannot say."""
        name = self._name(digest)

        async def get(client: Redis) -> bytes | str | None:
            value: bytes | str | None = await client.get(name)
            return value

        value = await self._link.call(get, request=True)
        return value.decode() if isinstance(value, bytes) else value

    async def forget(self, digest: str, ttl: float) -> None:
        """Keep the id whose digest is ``digest`` as deleted (an empty value), for ``ttl``
        seconds: a process whose own table still holds it learns so when it asks. Nothing, if
        the store cannot be reached now."""
        name, milliseconds = self._name(digest), max(1, math.ceil(ttl * 1000))

        async def drop(client: Redis) -> None:
            await client.set(name, "", px=milliseconds)

        await self._link.call(drop, request=True)

    def remember(self, digest: str, value: str, ttl: float) -> None:
        """Keep ``value`` for the id whose digest is ``digest``, for ``ttl`` seconds (in the background)."""
        name, milliseconds = self._name(digest), max(1, math.ceil(ttl * 1000))

        async def put(client: Redis) -> None:
            await client.set(name, value, px=milliseconds)

        self._link.spawn(put)
