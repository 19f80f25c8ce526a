"""``GET {admin_route}/spend``: spend from the ledger, grouped, as JSON or CSV.

``by`` is ``key``, ``caller``, ``model`` (the candidate that served) or ``day``; ``since`` and
``until`` are a day (``2026-01-31``: its start, UTC), an RFC 3339 time, or a span back from now
(``7d``, ``12h``; ``ledger/spend_report.py`` reads them). The rows are the ledger's aggregation
(one query in the database); each has
the group's value under the ``by`` name, then ``requests``, ``input_tokens``,
``output_tokens``, ``cached_tokens`` and ``cost_usd``; ``Accept: text/csv`` gets the same
columns as CSV (a spreadsheet's import).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final, get_args
from urllib.parse import parse_qs

from asgi_router.keys.key_input import InputProblem
from asgi_router.ledger.spend_report import COLUMNS, By, parse_when

__all__ = ["SpendQuery", "as_csv", "spend_request"]

#: What spend may be grouped by.
_BY: Final[tuple[By, ...]] = get_args(By)

#: The ledger's aggregation: ``(by, since, until)`` (Unix seconds, ``None``: unbounded) to rows.
SpendQuery = Callable[[By, float | None, float | None], Awaitable[Sequence[Mapping[str, object]]]]


def spend_request(query_string: bytes, now: float) -> tuple[By, float | None, float | None] | InputProblem:
    """The query's ``by``, ``since`` and ``until``, or why they are refused."""
    try:
        query = parse_qs(query_string.decode("latin-1"), keep_blank_values=True)
    except ValueError:
        return InputProblem(400, None, "the query string cannot be read")
    unknown = sorted(set(query) - {"by", "since", "until"})
    if unknown:
        return InputProblem(400, unknown[0], f"unknown parameter {unknown[0]!r}")
    by = next((name for name in _BY if name == query.get("by", ["key"])[-1]), None)
    if by is None:
        return InputProblem(422, "by", f"by: one of {', '.join(_BY)}")
    bounds: list[float | None] = []
    for name in ("since", "until"):
        given = query.get(name)
        if not given or not given[-1]:
            bounds.append(None)
            continue
        try:
            bounds.append(parse_when(given[-1], now))
        except ValueError:
            return InputProblem(422, name, f"{name}: a day (2026-01-31), an RFC 3339 time, or a span (7d, 12h)")
    return by, bounds[0], bounds[1]


def as_csv(by: str, rows: Sequence[Mapping[str, object]]) -> bytes:
    """The rows as CSV with a header line: the ``by`` column, then :data:`COLUMNS`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow((by, *COLUMNS))
    for row in rows:
        writer.writerow([_cell(row.get(by)), *(_cell(row.get(column)) for column in COLUMNS)])
    return out.getvalue().encode()


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    # A cell a spreadsheet would run as a formula is quoted as text.
    return "'" + text if text[:1] in ("=", "+", "-", "@") and not _is_number(text) else text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
