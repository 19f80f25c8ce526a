"""The ledger in PostgreSQL, for a fleet: ``asyncpg`` with a small pool (the ``postgres`` extra).

Every process of a fleet names the same database; the schema is brought up to date under an
advisory lock, so processes starting together migrate once. SQL arrives with ``?``
placeholders (the one dialect the ledger writes) and is numbered here (``$1``, ``$2``...).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import asyncpg

from asgi_router.ledger.database import Database, LedgerConflict, LedgerRefused, LedgerUnavailable, Params
from asgi_router.ledger.schema import VERSION, VERSION_TABLE, SchemaTooNew, pending

__all__ = ["PostgresDatabase", "numbered"]

#: Connections per process: the writer's batches and the odd read (keys, tallies at start).
POOL_SIZE: Final = 4
#: Seconds a statement may take before the database counts as unavailable.
STATEMENT_TIMEOUT: Final = 30.0
#: The advisory lock key taken while migrating ("asgi_router ledger", as a number).
_MIGRATION_LOCK: Final = 0x61737267_6C656467

_PLACEHOLDER: Final = re.compile(r"\?")

#: What a connection lost, refused or timed out raises (asyncpg's own and the OS's).
_UNAVAILABLE: Final = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.QueryCanceledError,
)


def numbered(sql: str) -> str:
    """``sql`` with its ``?`` placeholders numbered for PostgreSQL (the ledger's SQL quotes no ``?``)."""
    count = 0

    def number(_: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return f"${count}"

    return _PLACEHOLDER.sub(number, sql)


class PostgresDatabase(Database):
    """See the module docstring."""

    kind = "postgresql"

    def __init__(self, pool: asyncpg.Pool, shown: str) -> None:
        self._pool = pool
        self.shown = shown

    @classmethod
    async def open(cls, url: str, shown: str) -> PostgresDatabase:
        try:
            pool = await asyncpg.create_pool(
                url, min_size=1, max_size=POOL_SIZE, command_timeout=STATEMENT_TIMEOUT, timeout=10.0
            )
        except _UNAVAILABLE as exc:
            raise LedgerUnavailable(f"ledger_url: {shown}: cannot connect ({type(exc).__name__})") from None
        except asyncpg.PostgresError as exc:  # a wrong password, an unknown database: not a retry away
            raise LedgerRefused(f"ledger_url: {shown}: {type(exc).__name__}: {exc}") from None
        database = cls(pool, shown)
        try:
            await database._migrate()
        except BaseException:
            await pool.close()
            raise
        return database

    async def _migrate(self) -> None:
        try:
            async with self._pool.acquire() as connection, connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
                await connection.execute(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version INTEGER NOT NULL)")
                found = await connection.fetchval(f"SELECT MAX(version) FROM {VERSION_TABLE}")
                statements = pending(int(found or 0), self.shown)
                for statement in statements:
                    await connection.execute(statement)
                if statements or found is None:
                    await connection.execute(f"DELETE FROM {VERSION_TABLE}")
                    await connection.execute(f"INSERT INTO {VERSION_TABLE} (version) VALUES ($1)", VERSION)
        except SchemaTooNew as exc:
            raise LedgerRefused(str(exc)) from None
        except _UNAVAILABLE as exc:
            raise LedgerUnavailable(f"ledger_url: {self.shown}: {type(exc).__name__}") from None

    async def execute(self, sql: str, params: Params = ()) -> int:
        try:
            status = await self._pool.execute(numbered(sql), *params)
        except asyncpg.UniqueViolationError as exc:
            raise LedgerConflict(str(exc)) from None
        except _UNAVAILABLE as exc:
            raise LedgerUnavailable(f"ledger_url: {self.shown}: {type(exc).__name__}") from None
        tail = str(status).rpartition(" ")[2]
        return int(tail) if tail.isdigit() else 0

    async def execute_many(self, sql: str, rows: Sequence[Params]) -> None:
        try:
            async with self._pool.acquire() as connection, connection.transaction():
                await connection.executemany(numbered(sql), [tuple(row) for row in rows])
        except asyncpg.UniqueViolationError as exc:
            raise LedgerConflict(str(exc)) from None
        except _UNAVAILABLE as exc:
            raise LedgerUnavailable(f"ledger_url: {self.shown}: {type(exc).__name__}") from None

    async def fetch(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        try:
            records = await self._pool.fetch(numbered(sql), *params)
        except _UNAVAILABLE as exc:
            raise LedgerUnavailable(f"ledger_url: {self.shown}: {type(exc).__name__}") from None
        return [tuple(record) for record in records]

    async def close(self) -> None:
        await self._pool.close()
