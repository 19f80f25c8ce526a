"""The ledger in a SQLite file (or in memory): the stdlib's ``sqlite3`` on a thread of its own.

``sqlite3`` blocks, so every call runs on one worker thread owned by the database object, which
also owns the one connection (SQLite connections belong to their thread): the event loop never
waits on the disk, and the statements of this process are serialised without a lock of our
own. Several processes on one host (uvicorn workers) share the file: WAL lets readers run beside
the writer, and ``busy_timeout`` makes a writer wait for another process's transaction instead
of failing at once. ``synchronous=NORMAL`` is WAL's usual pairing: a process crash loses
nothing committed; a power cut may lose the last transactions, never the file.

A file that is not a SQLite database, or a database holding other tables and no ledger, is
refused at start naming its path, rather than written into; so is a directory the router cannot
create files in (found by creating one: see :meth:`SqliteDatabase._probe_directory`).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TypeVar

from asgi_router.ledger.database import Database, LedgerConflict, LedgerRefused, LedgerUnavailable, Params
from asgi_router.ledger.schema import VERSION, VERSION_TABLE, SchemaTooNew, pending

__all__ = ["SqliteDatabase"]

_T = TypeVar("_T")

#: How long a write waits for another process's transaction on the same file.
BUSY_TIMEOUT: Final = 5.0


class SqliteDatabase(Database):
    """See the module docstring."""

    kind = "sqlite"

    def __init__(self, path: str, shown: str) -> None:
        self.path = path
        self.shown = shown
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asgi-router-ledger")
        self._connection: sqlite3.Connection | None = None

    @classmethod
    async def open(cls, path: str, shown: str) -> SqliteDatabase:
        database = cls(path, shown)
        try:
            await database._run(database._connect_and_migrate)
        except BaseException:
            await database.close()
            raise
        return database

    async def _run(self, work: Callable[[], _T]) -> _T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, work)

    # --- on the database's thread ---------------------------------------------------------------

    def _refused(self, why: str) -> LedgerRefused:
        return LedgerRefused(f"ledger_url: {self.path}: {why}")

    def _connect_and_migrate(self) -> None:
        if self.path != ":memory:":
            self._probe_directory(os.path.dirname(os.path.abspath(self.path)))
        try:
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
        except sqlite3.Error as exc:
            raise self._refused(f"cannot be opened ({exc})") from None
        self._connection = connection
        try:
            if self.path != ":memory:":
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=NORMAL")
            self._migrate(connection)
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
                raise LedgerUnavailable(f"ledger_url: {self.path}: {exc}") from None
            raise self._refused(f"not a usable SQLite database ({exc})") from None
        except SchemaTooNew as exc:
            raise LedgerRefused(str(exc)) from None

    def _probe_directory(self, folder: str) -> None:
        """Refuse a directory the router cannot create files in, by creating one there.

        WAL keeps two files beside the database (``-wal``, ``-shm``), so the directory must take
        new files even when the database exists. ``os.access`` cannot tell: it answers yes to
        root for a read-only mount, an immutable directory or ``/proc``, where creating fails.
        """
        if not os.path.isdir(folder):
            up = folder
            while up and not os.path.exists(up):
                up = os.path.dirname(up)
            if up == folder:
                raise self._refused(f"its directory {folder} is a file, not a directory")
            if up and not os.path.isdir(up):
                raise self._refused(f"its directory {folder} does not exist ({up} is a file)")
            raise self._refused(f"its directory {folder} does not exist")
        try:
            handle, probe = tempfile.mkstemp(prefix=".asgi-router-probe-", dir=folder)
        except OSError as exc:
            raise self._refused(f"the router cannot create a file in {folder} ({exc.strerror})") from None
        os.close(handle)
        os.unlink(probe)

    def _migrate(self, connection: sqlite3.Connection) -> None:
        connection.execute("BEGIN IMMEDIATE")  # one process migrates; the others wait, then find it done
        try:
            tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if VERSION_TABLE not in tables and tables:
                raise self._refused(
                    f"holds tables that are not a ledger's ({', '.join(sorted(tables)[:5])}); "
                    "point ledger_url at a new file"
                )
            connection.execute(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (version INTEGER NOT NULL)")
            row = connection.execute(f"SELECT MAX(version) FROM {VERSION_TABLE}").fetchone()
            found = int(row[0]) if row and row[0] is not None else 0
            statements = pending(found, self.path)
            for statement in statements:
                connection.execute(statement)
            if statements or row is None or row[0] is None:
                connection.execute(f"DELETE FROM {VERSION_TABLE}")
                connection.execute(f"INSERT INTO {VERSION_TABLE} (version) VALUES (?)", (VERSION,))
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise

    def _write(self, work: Callable[[sqlite3.Connection], int]) -> int:
        connection = self._connection
        if connection is None:
            raise LedgerUnavailable("ledger: the database is closed")
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                changed = work(connection)
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.IntegrityError as exc:
            raise LedgerConflict(str(exc)) from None
        except sqlite3.Error as exc:
            raise LedgerUnavailable(f"ledger_url: {self.path}: {exc}") from None
        return changed

    def _read(self, sql: str, params: Params) -> list[tuple[Any, ...]]:
        connection = self._connection
        if connection is None:
            raise LedgerUnavailable("ledger: the database is closed")
        try:
            return [tuple(row) for row in connection.execute(sql, tuple(params))]
        except sqlite3.Error as exc:
            raise LedgerUnavailable(f"ledger_url: {self.path}: {exc}") from None

    # --- the interface ----------------------------------------------------------------------------

    async def execute(self, sql: str, params: Params = ()) -> int:
        return await self._run(lambda: self._write(lambda c: c.execute(sql, tuple(params)).rowcount))

    async def execute_many(self, sql: str, rows: Sequence[Params]) -> None:
        await self._run(lambda: self._write(lambda c: c.executemany(sql, [tuple(row) for row in rows]).rowcount))

    async def fetch(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        return await self._run(lambda: self._read(sql, params))

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await self._run(connection.close)
        self._thread.shutdown(wait=False)
