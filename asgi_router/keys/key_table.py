"""Where virtual keys are kept: the seam a database fills, and a table in memory.

:class:`KeyTable` is what the key ring (requests' copy), the admin API and the command line need
of storage: add, replace, find by id or by digest, list, and what changed since a time (the
background refresh that makes a key revoked on one host refused on every other within a second).
A key's name is unique within its caller (:class:`DuplicateName`, a 409). :class:`MemoryKeyTable`
keeps keys in this process only (``ledger_url = "memory://"``: tests, and nothing lasts); the
ledger's database implements the same table for SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Protocol

from asgi_router.keys.virtual_key import VirtualKey

__all__ = ["DuplicateName", "KeyTable", "MemoryKeyTable"]


class DuplicateName(Exception):
    """A key of the same caller already has this name."""


class KeyTable(Protocol):
    """Virtual keys as kept (see the module docstring). Every method may raise the store's own
    errors when it is unreachable; the callers on a request's path catch them."""

    async def add(self, key: VirtualKey) -> None:
        """Keep a new key; :class:`DuplicateName` if its caller has a key of that name."""
        ...

    async def put(self, key: VirtualKey) -> None:
        """Replace the key with the same id; :class:`DuplicateName` as :meth:`add`."""
        ...

    async def get(self, key_id: str) -> VirtualKey | None:
        """The key with this id."""
        ...

    async def find(self, digest: bytes) -> VirtualKey | None:
        """The key whose secret (or whose rotated secret, in its grace) has this digest."""
        ...

    async def every(self) -> list[VirtualKey]:
        """Every key, oldest first."""
        ...

    async def changed_since(self, since: float) -> list[VirtualKey]:
        """The keys whose ``updated_at`` is at or after ``since``."""
        ...


class MemoryKeyTable:
    """Keys in this process's memory (see the module docstring)."""

    def __init__(self) -> None:
        self._keys: dict[str, VirtualKey] = {}

    def _check_name(self, key: VirtualKey) -> None:
        if key.name is not None and any(
            other.id != key.id and other.caller == key.caller and other.name == key.name
            for other in self._keys.values()
        ):
            raise DuplicateName(key.name)

    async def add(self, key: VirtualKey) -> None:
        self._check_name(key)
        self._keys[key.id] = key

    async def put(self, key: VirtualKey) -> None:
        self._check_name(key)
        self._keys[key.id] = key

    async def get(self, key_id: str) -> VirtualKey | None:
        return self._keys.get(key_id)

    async def find(self, digest: bytes) -> VirtualKey | None:
        return next(
            (key for key in self._keys.values() if digest in (key.digest, key.previous_digest)),
            None,
        )

    async def every(self) -> list[VirtualKey]:
        return sorted(self._keys.values(), key=lambda key: key.created_at)

    async def changed_since(self, since: float) -> list[VirtualKey]:
        return [key for key in self._keys.values() if key.updated_at >= since]
