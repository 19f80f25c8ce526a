"""The ledger's database, whichever it is: one small async interface over the two real drivers.

The router writes and reads the ledger through :class:`Database`: ``execute`` one statement,
``execute_many`` one statement over many rows in one transaction (a batch of spend rows),
``fetch`` rows as plain tuples, ``close``. SQL is written once with ``?`` placeholders and the
types :mod:`asgi_router.ledger.schema` names; the PostgreSQL side numbers the placeholders
(``$1``, ``$2``...) in one place. Driver errors are translated at this boundary into three of
the router's own (httpx's way with its transports), so nothing above imports a driver:

* :class:`LedgerRefused`: the database can never be this router's ledger as it is (a corrupted
  or foreign SQLite file, a directory it cannot write, a schema newer than the router's); the
  router refuses to start, and the message names the path or the masked URL;
* :class:`LedgerUnavailable`: not now (the server is down, the file is locked or unwritable);
  whoever wrote tries again later: spend rows wait in memory meanwhile;
* :class:`LedgerConflict`: a unique constraint refused the row (a duplicate name).

``opening.open_database`` connects and brings the schema up to date (creating the tables on first
start). Drivers, not an ORM: the ledger is a handful of fixed statements, and the drivers
directly import in a fraction of the time and write a batch in a fraction of the CPU that
SQLAlchemy's async engine costs over the same drivers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from asgi_router.config.ledger_settings import LedgerKind

__all__ = [
    "Database",
    "LedgerConflict",
    "LedgerRefused",
    "LedgerUnavailable",
    "Params",
]

#: The values of one statement's ``?`` placeholders, in order.
Params = Sequence[object]


class LedgerRefused(Exception):
    """This database cannot be the router's ledger as it is (see the module docstring)."""


class LedgerUnavailable(Exception):
    """The ledger's database cannot be reached or written now; try again later."""


class LedgerConflict(Exception):
    """A unique constraint of the ledger refused the row."""


class Database(ABC):
    """One ledger database (see the module docstring). Every method may raise
    :class:`LedgerUnavailable`; writes may raise :class:`LedgerConflict`."""

    #: ``sqlite`` (a file, or ``memory://``) or ``postgresql``.
    kind: LedgerKind
    #: The URL as logs and pages show it (its password masked).
    shown: str

    @abstractmethod
    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement in a transaction of its own; the number of rows it changed."""

    @abstractmethod
    async def execute_many(self, sql: str, rows: Sequence[Params]) -> None:
        """Run one statement once per row, all in one transaction (all written, or none)."""

    @abstractmethod
    async def fetch(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        """The rows one query returns, as tuples."""

    @abstractmethod
    async def close(self) -> None:
        """Release the connection(s); the object is not used again."""
