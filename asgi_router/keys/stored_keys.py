"""Virtual keys in the ledger's database: the ``keys`` table, SQLite or PostgreSQL alike.

One row per key (``ledger/schema.py`` creates the table with the ledger's first version). The
secret is not there: only its SHA-256, as hex, and the digest a rotation replaced with the end
of its grace. ``groups`` and ``metadata`` are JSON text; times are Unix seconds. The key's name
is unique within its caller (a unique index: a name taken is :class:`DuplicateName`, the admin
API's 409), and ``updated_at`` is indexed: every process asks for the keys changed since its
last look every half second, which is what makes a revocation hold fleet-wide within a second.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from asgi_router.keys.key_table import DuplicateName
from asgi_router.keys.virtual_key import VirtualKey
from asgi_router.ledger.database import Database, LedgerConflict

__all__ = ["COLUMNS", "StoredKeys"]

#: The ``keys`` table's columns, in the order every query reads and writes them.
COLUMNS: Final = (
    "id",
    "caller",
    "name",
    "digest",
    "prefix",
    "created_at",
    "updated_at",
    "groups_json",
    "usd_per_day",
    "tokens_per_day",
    "rpm",
    "downgrade_to",
    "hard_limit",
    "expires_at",
    "metadata_json",
    "disabled",
    "revoked",
    "previous_digest",
    "previous_until",
)
_SELECT: Final = f"SELECT {', '.join(COLUMNS)} FROM keys"
_INSERT: Final = f"INSERT INTO keys ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
_UPDATE: Final = f"UPDATE keys SET {', '.join(f'{column} = ?' for column in COLUMNS[1:])} WHERE id = ?"


def _row(key: VirtualKey) -> list[object]:
    return [
        key.id,
        key.caller,
        key.name,
        key.digest.hex(),
        key.prefix,
        key.created_at,
        key.updated_at,
        json.dumps(list(key.groups)) if key.groups is not None else None,
        key.usd_per_day,
        key.tokens_per_day,
        key.rpm,
        key.downgrade_to,
        key.hard_limit,
        key.expires_at,
        json.dumps(dict(key.metadata), separators=(",", ":")),
        int(key.disabled),
        int(key.revoked),
        key.previous_digest.hex() if key.previous_digest is not None else None,
        key.previous_until,
    ]


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _key(row: Sequence[Any]) -> VirtualKey:
    (id_, caller, name, digest, prefix, created, updated, groups, usd, tokens, rpm, downgrade, hard, expires,
     metadata, disabled, revoked, previous, until) = row  # fmt: skip
    return VirtualKey(
        id=str(id_),
        caller=str(caller),
        digest=bytes.fromhex(digest),
        prefix=str(prefix),
        created_at=float(created),
        updated_at=float(updated),
        name=name,
        groups=tuple(json.loads(groups)) if groups is not None else None,
        usd_per_day=_float(usd),
        tokens_per_day=_int(tokens),
        rpm=_int(rpm),
        downgrade_to=downgrade,
        hard_limit=_float(hard),
        expires_at=_float(expires),
        metadata=json.loads(metadata) if metadata else {},
        disabled=bool(disabled),
        revoked=bool(revoked),
        previous_digest=bytes.fromhex(previous) if previous is not None else None,
        previous_until=_float(until),
    )


class StoredKeys:
    """The ``keys`` table over the ledger's database (``database``: the open one, when asked)."""

    def __init__(self, database: Callable[[], Awaitable[Database]]) -> None:
        self._database = database

    async def add(self, key: VirtualKey) -> None:
        try:
            await (await self._database()).execute(_INSERT, _row(key))
        except LedgerConflict:
            raise DuplicateName(key.name or "") from None

    async def put(self, key: VirtualKey) -> None:
        row = _row(key)
        try:
            await (await self._database()).execute(_UPDATE, [*row[1:], row[0]])
        except LedgerConflict:
            raise DuplicateName(key.name or "") from None

    async def _select(self, where: str, params: Sequence[object]) -> list[VirtualKey]:
        rows = await (await self._database()).fetch(f"{_SELECT} {where}", params)
        return [_key(row) for row in rows]

    async def get(self, key_id: str) -> VirtualKey | None:
        found = await self._select("WHERE id = ?", [key_id])
        return found[0] if found else None

    async def find(self, digest: bytes) -> VirtualKey | None:
        text = digest.hex()
        found = await self._select("WHERE digest = ? OR previous_digest = ?", [text, text])
        return found[0] if found else None

    async def every(self) -> list[VirtualKey]:
        return await self._select("ORDER BY created_at", [])

    async def changed_since(self, since: float) -> list[VirtualKey]:
        return await self._select("WHERE updated_at >= ?", [since])
