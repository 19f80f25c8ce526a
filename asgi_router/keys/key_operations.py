"""What an operator does to keys: create, change, disable, revoke, rotate.

The admin API and ``asgi-router keys`` both run these, over a :class:`KeyTable`, so a key made
from the command line and one made through the API are the same key. Every change stamps the
key's ``updated_at`` (how other processes find it within a second) and tells this process's ring
at once (``on_change``), so the process that made a change never answers from before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from asgi_router.keys.key_input import KeyChanges, KeyRequest
from asgi_router.keys.key_secrets import key_digest, new_key_id, new_secret, shown_prefix
from asgi_router.keys.key_table import KeyTable
from asgi_router.keys.virtual_key import VirtualKey

__all__ = ["KeyOperations"]


def _nothing(key: VirtualKey) -> None:
    return None


class KeyOperations:
    """Key changes over one table (see the module docstring)."""

    def __init__(
        self,
        table: KeyTable,
        wall: Callable[[], float] = time.time,
        on_change: Callable[[VirtualKey], None] = _nothing,
    ) -> None:
        self.table = table
        self._wall = wall
        self._on_change = on_change

    async def _kept(self, key: VirtualKey, new: bool = False) -> VirtualKey:
        if new:
            await self.table.add(key)
        else:
            await self.table.put(key)
        self._on_change(key)
        return key

    async def create(self, request: KeyRequest) -> tuple[VirtualKey, str]:
        """A new key and its secret (shown this once); :class:`DuplicateName` for a name taken."""
        secret = new_secret()
        now = self._wall()
        key = VirtualKey(
            id=new_key_id(),
            caller=request.caller,
            digest=key_digest(secret.encode()),
            prefix=shown_prefix(secret),
            created_at=now,
            name=request.name,
            groups=tuple(request.groups) if request.groups is not None else None,
            usd_per_day=request.usd_per_day,
            tokens_per_day=request.tokens_per_day,
            rpm=request.rpm,
            downgrade_to=request.downgrade_to,
            hard_limit=request.hard_limit,
            expires_at=request.expiry(),
            metadata=request.metadata or {},
            disabled=bool(request.disabled),
            updated_at=now,
        )
        return await self._kept(key, new=True), secret

    async def change(self, key_id: str, changes: KeyChanges) -> VirtualKey | None:
        """The key with the fields ``changes`` names set (``None``: no such key)."""
        key = await self.table.get(key_id)
        if key is None:
            return None
        named = changes.model_fields_set
        fields: dict[str, object] = {name: getattr(changes, name) for name in named}
        if "groups" in named:
            fields["groups"] = tuple(changes.groups) if changes.groups is not None else None
        if "expires_at" in named:
            fields["expires_at"] = changes.expiry()
        if "metadata" in named:
            fields["metadata"] = changes.metadata or {}
        if "disabled" in named:
            fields["disabled"] = bool(changes.disabled)
        changed = replace(key, **fields, updated_at=self._wall())  # type: ignore[arg-type]
        if changed.hard_limit is not None and changed.downgrade_to is None:
            raise ValueError("hard_limit needs downgrade_to (without it the cap itself refuses)")
        return await self._kept(changed)

    async def set_disabled(self, key_id: str, disabled: bool) -> VirtualKey | None:
        key = await self.table.get(key_id)
        if key is None:
            return None
        return await self._kept(replace(key, disabled=disabled, updated_at=self._wall()))

    async def revoke(self, key_id: str) -> VirtualKey | None:
        """The key revoked for good (its rotated secret's grace too)."""
        key = await self.table.get(key_id)
        if key is None:
            return None
        revoked = replace(key, revoked=True, previous_digest=None, previous_until=None, updated_at=self._wall())
        return await self._kept(revoked)

    async def rotate(self, key_id: str, grace: float = 0.0) -> tuple[VirtualKey, str] | None:
        """A new secret for the key; the old one still opens for ``grace`` seconds."""
        key = await self.table.get(key_id)
        if key is None:
            return None
        secret = new_secret()
        now = self._wall()
        rotated = replace(
            key,
            digest=key_digest(secret.encode()),
            prefix=shown_prefix(secret),
            previous_digest=key.digest if grace > 0 else None,
            previous_until=now + grace if grace > 0 else None,
            updated_at=now,
        )
        return await self._kept(rotated), secret
