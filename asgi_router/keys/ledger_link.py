"""The ledger's database as the key table reaches it: opened on first use, closed on shutdown.

The router is built synchronously, before any event loop runs; the database is opened (and its
schema brought up to date) the first time the key table is asked for something, which is the
key ring's first load at the lifespan's start, or the admin API's first call. Opening is done
once, under a lock; the router's lifespan closes it (:meth:`LedgerLink.aclose`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from asgi_router.ledger.database import Database
from asgi_router.ledger.opening import open_database

__all__ = ["LedgerLink"]


class LedgerLink:
    """One database, opened once when first needed (see the module docstring)."""

    def __init__(self, url: str, opener: Callable[[str], Awaitable[Database]] = open_database) -> None:
        self._url = url
        self._opener = opener
        self._database: Database | None = None
        self._lock: asyncio.Lock | None = None

    def start(self) -> None:
        """Nothing at start-up: the first use opens the database (the lifespan's hook)."""

    async def database(self) -> Database:
        """The open database (opened now, if this is the first use)."""
        database = self._database
        if database is not None:
            return database
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._database is None:
                self._database = await self._opener(self._url)
            return self._database

    async def aclose(self) -> None:
        database, self._database = self._database, None
        if database is not None:
            await database.close()
