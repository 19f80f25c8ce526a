"""``python -m bench ledger``: what the ledger's background writer costs, per 10,000 spend rows.

The writer's work is all off the request's path (a request only appends its record), so what
matters is the CPU it takes from the process that serves: building the rows and writing them
in batches. Measured here as this process's CPU time (every thread: SQLite runs on the ledger's
own) to write ``--rows`` records through :class:`~asgi_router.ledger.spend_writer.SpendWriter`
into a SQLite file (WAL), a batch per flush as the router runs it, and, with ``--postgresql
URL``, into PostgreSQL; plus the cost of the append a request pays.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from asgi_router.ledger.opening import open_database
from asgi_router.ledger.spend_writer import SpendWriter
from asgi_router.observability.events import RequestRecord

__all__ = ["main"]


def _records(count: int) -> list[RequestRecord]:
    now = time.time()
    return [
        RequestRecord(
            f"req-{n:08d}",
            "group/main",
            status=200,
            winner="openai/gpt-4o-mini",
            latency=0.4,
            prompt_tokens=1200,
            completion_tokens=300,
            cost_usd=0.0012,
            principal="team-a",
            started_at=now,
            tokens_measured=True,
            caller="team-a",
        )
        for n in range(count)
    ]


async def _write(url: str, records: list[RequestRecord], per_flush: int) -> tuple[float, float]:
    """CPU seconds to write ``records`` (``per_flush`` rows each flush), and the wall seconds."""
    database = await open_database(url)
    writer = SpendWriter(url, len(records) + 1, 1.0)
    writer.database = database
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        for start in range(0, len(records), per_flush):
            for record in records[start : start + per_flush]:
                writer.add(record)
            await writer.flush()
        return time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await database.close()


def _append_ns(records: list[RequestRecord]) -> float:
    writer = SpendWriter("memory://", len(records) + 1, 1.0)
    started = time.perf_counter_ns()
    for record in records:
        writer.add(record)
    return (time.perf_counter_ns() - started) / len(records)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ledger", description=__doc__)
    parser.add_argument("--rows", type=int, default=10_000, help="spend rows to write (default 10,000)")
    parser.add_argument("--per-flush", type=int, default=500, help="rows per flush (default 500: 500 req/s at 1 s)")
    parser.add_argument("--postgresql", metavar="URL", help="also write into this PostgreSQL database")
    args = parser.parse_args(argv)
    records = _records(args.rows)
    print(f"append on the request's path: {_append_ns(records):.0f} ns per request")
    with tempfile.TemporaryDirectory() as folder:
        targets = [("sqlite (WAL file)", f"sqlite:///{Path(folder) / 'ledger.db'}"), ("memory://", "memory://")]
        if args.postgresql:
            targets.append(("postgresql", args.postgresql))
        for name, url in targets:
            cpu, wall = asyncio.run(_write(url, records, args.per_flush))
            per = 10_000 / args.rows
            print(f"{name}: {cpu * per * 1000:.0f} ms CPU, {wall * per * 1000:.0f} ms wall per 10,000 rows")
    return 0
