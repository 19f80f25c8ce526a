"""``asgi-router spend CONFIG --by key|caller|model|day --since 7d``: spend read from the ledger.

Reads the ledger's database directly (no running router needed): the same query the admin
API's ``/spend`` answers with (``ledger/spend_report.py``), printed as an aligned table or, with
``--csv``, as CSV with the same columns.
"""

from __future__ import annotations

import asyncio
import csv
import sys
import time
from typing import TextIO

from asgi_router.config.config_error import ConfigError
from asgi_router.config.ledger_settings import effective_ledger_url, ledger_target
from asgi_router.config.settings import RouterSettings
from asgi_router.ledger.database import LedgerRefused, LedgerUnavailable
from asgi_router.ledger.opening import open_database
from asgi_router.ledger.spend_report import COLUMNS, By, SpendLine, parse_when, spend_report

__all__ = ["spend"]


def spend(settings: RouterSettings, by: By, since: str, until: str | None, as_csv: bool, out: TextIO) -> int:
    """Print the ledger's spend grouped ``by`` between ``since`` and ``until``; the exit status."""
    url = effective_ledger_url(settings.ledger_url, settings.admin_keys)
    if url is None:
        raise ConfigError("asgi-router spend: the configuration has no ledger (set ledger_url)")
    if ledger_target(url).kind == "memory":
        raise ConfigError("asgi-router spend: ledger_url is memory://, which keeps nothing to read")
    now = time.time()
    try:
        start = parse_when(since, now)
        end = parse_when(until, now) if until is not None else None
    except ValueError as exc:
        raise ConfigError(f"asgi-router spend: {exc}") from None
    try:
        lines = asyncio.run(_read(url, by, start, end))
    except (LedgerRefused, LedgerUnavailable) as exc:
        print(f"asgi-router spend: {exc}", file=sys.stderr)
        return 1
    if as_csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([by, *COLUMNS])
        for line in lines:
            writer.writerow([line.group or "", *_figures(line)])
        return 0
    table = [[by, *COLUMNS], *[[line.group or "-", *_figures(line)] for line in lines]]
    widths = [max(len(row[column]) for row in table) for column in range(len(table[0]))]
    for row in table:
        cells = [row[0].ljust(widths[0]), *(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))]
        print("  ".join(cells).rstrip(), file=out)
    if not lines:
        print("(no spend in that time)", file=out)
    return 0


def _figures(line: SpendLine) -> list[str]:
    return [
        str(line.requests),
        str(line.input_tokens),
        str(line.output_tokens),
        str(line.cached_tokens),
        f"{line.cost_usd:.6f}",
    ]


async def _read(url: str, by: By, since: float, until: float | None) -> list[SpendLine]:
    database = await open_database(url)
    try:
        return await spend_report(database, by, since, until)
    finally:
        await database.close()
