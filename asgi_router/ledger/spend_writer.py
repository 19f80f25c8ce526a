"""Spend rows written in the background, in batches: no database round trip on a request's path.

A finished request's record is appended to a bounded in-memory buffer (:meth:`SpendWriter.add`:
a length check and a deque append, the only work on the request's path). Every
``ledger_flush_interval`` seconds :meth:`SpendWriter.tick` turns what waits into rows and writes
them in one transaction per batch. While the database is unreachable the rows wait (the batch
that failed first, with its row ids, so a batch whose commit was lost is not counted twice) and
are written when it is back; past ``ledger_buffer`` rows waiting, new ones are dropped,
counted, and logged once per outage: the request has been answered already and never fails for
the ledger. On shutdown :meth:`SpendWriter.flush` writes what is left. A crash loses at most the
rows of the last interval.

``ledger_retention_days`` prunes older rows in the background, once an hour.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from asgi_router.ledger.database import Database, LedgerConflict, LedgerUnavailable
from asgi_router.ledger.spend_rows import DAY, INSERT_SPEND, RowIds, SpendRow, spend_row_from_record
from asgi_router.observability.events import RequestRecord

__all__ = ["BATCH", "PRUNE_EVERY", "SpendWriter"]

logger = logging.getLogger("asgi_router.ledger")

#: Rows written in one transaction at most (a long outage's backlog goes in several).
BATCH: Final = 5_000
#: Seconds between two prunings of rows older than ``ledger_retention_days``.
PRUNE_EVERY: Final = 3_600.0


class SpendWriter:
    """The buffer of spend rows and the background work that writes them (see the module docstring)."""

    def __init__(
        self,
        shown: str,
        capacity: int,
        interval: float,
        retention_days: int | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        #: The ledger's URL as logs show it.
        self.shown = shown
        #: The database, once opened (rows wait in the buffer until then).
        self.database: Database | None = None
        self.capacity = capacity
        self.interval = interval
        self.retention_days = retention_days
        self.wall = wall
        #: Records of finished requests not yet turned into rows.
        self._records: deque[RequestRecord] = deque()
        #: Rows made but not yet written (a batch the database refused), oldest first.
        self._rows: deque[SpendRow] = deque()
        self._row_ids = RowIds()
        self.written = 0
        self.dropped = 0
        #: Whether the current outage (or the current run of drops) was logged already.
        self._down_said = False
        self._drop_said = False
        self._pruned_at = -PRUNE_EVERY

    # --- on the request's path -------------------------------------------------------------------

    def add(self, record: RequestRecord) -> None:
        """Keep ``record``'s row for the next write; dropped and counted when the buffer is full."""
        if len(self._records) + len(self._rows) >= self.capacity:
            self._dropped()
            return
        self._records.append(record)

    def _dropped(self) -> None:
        self.dropped += 1
        if not self._drop_said:
            self._drop_said = True
            logger.error(
                "ledger %s: %d spend rows are waiting (ledger_buffer); further rows are dropped and counted "
                '(asgi_router_ledger_rows_total{outcome="dropped"}) until the database takes them',
                self.shown,
                self.capacity,
            )

    # --- readings ----------------------------------------------------------------------------------

    @property
    def buffered(self) -> int:
        """Rows waiting to be written."""
        return len(self._records) + len(self._rows)

    def lag(self) -> float:
        """Seconds since the oldest row waiting finished its request (0 when none waits)."""
        if self._rows:
            oldest = self._rows[0][2]
        elif self._records:
            first = self._records[0]
            oldest = first.started_at + first.latency
        else:
            return 0.0
        return max(0.0, self.wall() - oldest)

    # --- in the background -------------------------------------------------------------------------

    async def tick(self) -> None:
        """One round of the background work: write what waits, prune when due."""
        await self.flush()
        if self.retention_days is not None:
            await self.prune()

    async def flush(self) -> bool:
        """Write every row waiting, a batch at a time; ``False`` when the database did not take
        them (they keep waiting)."""
        database = self.database
        if database is None:
            return False
        while self._records or self._rows:
            rows, records, made = self._rows, self._records, self._row_ids
            while records and len(rows) < BATCH:
                rows.append(spend_row_from_record(records.popleft(), made.next()))
            batch = [rows[index] for index in range(min(BATCH, len(rows)))]
            try:
                try:
                    await database.execute_many(INSERT_SPEND, batch)
                except LedgerConflict:
                    await self._write_one_by_one(database, batch)
            except LedgerUnavailable as exc:
                if not self._down_said:
                    self._down_said = True
                    logger.warning(
                        "ledger %s cannot be written (%s); %d spend rows wait in memory, written when it is back",
                        self.shown,
                        exc,
                        self.buffered,
                    )
                return False
            for _ in batch:
                rows.popleft()
            self.written += len(batch)
            if self._down_said:
                self._down_said = False
                logger.warning("ledger %s is back: the spend rows that waited are written", self.shown)
            self._drop_said = False
        return True

    async def _write_one_by_one(self, database: Database, batch: list[SpendRow]) -> None:
        """A batch refused for a row already there (its earlier commit's answer was lost): the
        rest of the batch is written, the rows already there left as they are."""
        for row in batch:
            try:
                await database.execute_many(INSERT_SPEND, [row])
            except LedgerConflict:
                continue

    async def prune(self) -> None:
        """Delete rows older than ``ledger_retention_days`` (once an hour at most)."""
        now = time.monotonic()
        database = self.database
        if database is None or self.retention_days is None or now - self._pruned_at < PRUNE_EVERY:
            return
        self._pruned_at = now
        cutoff = self.wall() - self.retention_days * DAY
        try:
            removed = await database.execute("DELETE FROM spend WHERE at < ?", [cutoff])
        except LedgerUnavailable:
            self._pruned_at = now - PRUNE_EVERY + self.interval * 10  # tried again soon
            return
        if removed:
            logger.info("ledger %s: pruned %d spend rows older than %d days", self.shown, removed, self.retention_days)
