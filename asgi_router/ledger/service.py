"""The ledger as the router runs it: opened at start, written in the background, closed at shutdown.

:class:`Ledger` is made with the router (``assembly.py``) when a ledger is configured, and
driven by the lifespan: :meth:`Ledger.start` opens the database (refusing to start for a file or
schema that cannot be the router's ledger) and reads the tallies the caps had counted
(``start_tallies.py``); :meth:`Ledger.run` writes spend rows every ``ledger_flush_interval``
(and, while a PostgreSQL server that was away at start is still away, tries to reach it);
:meth:`Ledger.close` writes what is left and closes the database. Requests only call
:meth:`Ledger.add` (an append).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio

from asgi_router.config.ledger_settings import LedgerKind, ledger_target
from asgi_router.core.store_url import mask_store_url
from asgi_router.ledger.database import Database, LedgerUnavailable
from asgi_router.ledger.opening import open_database
from asgi_router.ledger.spend_writer import SpendWriter
from asgi_router.ledger.start_tallies import StartTallies, read_start_tallies

__all__ = ["Ledger"]

logger = logging.getLogger("asgi_router.ledger")


class Ledger:
    """One router's ledger (see the module docstring)."""

    def __init__(
        self,
        url: str,
        buffer: int,
        flush_interval: float,
        retention_days: int | None = None,
        session_ttl: float | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        target = ledger_target(url)
        self.url = target.url
        self.kind: LedgerKind = target.kind
        #: The URL as every log line and page shows it (a PostgreSQL password masked).
        self.shown = "memory://" if target.kind == "memory" else mask_store_url(target.url)
        self.flush_interval = flush_interval
        self.session_ttl = session_ttl
        self.wall = wall
        self.writer = SpendWriter(self.shown, buffer, flush_interval, retention_days, wall)
        #: Keep a finished request's spend row for the next write (the one call on a request's path).
        self.add = self.writer.add
        self.database: Database | None = None

    async def start(self) -> StartTallies | None:
        """Open the database and read the caps' tallies back (``None``: the database is away;
        it is tried again in the background). ``LedgerRefused`` stops the start."""
        try:
            database = await open_database(self.url)
        except LedgerUnavailable as exc:
            logger.error(
                "ledger %s is unreachable at start (%s): caps start from nothing; spend rows wait in memory",
                self.shown,
                exc,
            )
            return None
        self.database = self.writer.database = database
        logger.debug("ledger: %s (%s) opened", self.shown, self.kind)
        try:
            return await read_start_tallies(database, self.wall(), self.session_ttl)
        except LedgerUnavailable as exc:
            logger.error("ledger %s: the caps' tallies could not be read back (%s)", self.shown, exc)
            return None

    async def run(self) -> None:
        """From start to shutdown: write every ``flush_interval`` seconds (see the module docstring)."""
        while True:
            await anyio.sleep(self.flush_interval)
            if self.database is None:
                try:
                    self.database = self.writer.database = await open_database(self.url)
                except LedgerUnavailable:
                    continue
            await self.writer.tick()

    async def close(self) -> None:
        """Write what waits (once) and close the database."""
        database, self.database = self.database, None
        if database is None:
            if self.writer.buffered:
                logger.error("ledger %s: %d spend rows were never written", self.shown, self.writer.buffered)
            return
        try:
            if not await self.writer.flush():
                logger.error("ledger %s: %d spend rows could not be written", self.shown, self.writer.buffered)
        finally:
            self.writer.database = None
            await database.close()

    def readings(self) -> tuple[int, int, int, float]:
        """For the metrics: rows written, rows dropped, rows waiting, lag in seconds."""
        writer = self.writer
        return writer.written, writer.dropped, writer.buffered, writer.lag()

    def status(self) -> dict[str, object]:
        """The ledger on the status page: its kind, masked URL, lag and row counts."""
        writer = self.writer
        return {
            "kind": self.kind,
            "url": self.shown,
            "connected": self.database is not None,
            "lag_seconds": round(writer.lag(), 3),
            "buffered_rows": writer.buffered,
            "written_rows": writer.written,
            "dropped_rows": writer.dropped,
        }
