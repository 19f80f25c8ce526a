"""Spend added up: the one query behind ``asgi-router spend`` and the admin API's ``/spend``.

:func:`spend_report` groups the spend rows between two instants by key, caller, model (the
candidate that served) or UTC day, and returns, per group, the requests, input, output and
cached tokens, and the cost in USD. :func:`parse_when` reads the instants as operators write
them: a date (``2026-01-31``, midnight UTC), an RFC 3339 time, or a span back from now (``7d``,
``12h``, ``30m``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Final, Literal, get_args

from asgi_router.ledger.database import Database
from asgi_router.ledger.spend_rows import DAY

__all__ = ["COLUMNS", "By", "SpendLine", "parse_when", "spend_report"]

By = Literal["key", "caller", "model", "day"]
#: Each grouping's column in the spend rows.
_GROUPED: Final[dict[str, str]] = {"key": "key_id", "caller": "caller", "model": "served_by", "day": "day"}
#: The figures of each group, in the order reports show them (after the group's own column).
COLUMNS: Final = ("requests", "input_tokens", "output_tokens", "cached_tokens", "cost_usd")
_SPAN: Final = re.compile(r"(\d+)([dhm])")
_UNIT: Final = {"d": 86_400, "h": 3_600, "m": 60}


def parse_when(text: str, now: float) -> float:
    """``text`` as Unix seconds: ``YYYY-MM-DD`` (midnight UTC), RFC 3339, or ``7d``/``12h``/``30m``
    before ``now``; :class:`ValueError` saying which forms are accepted."""
    value = text.strip()
    span = _SPAN.fullmatch(value)
    if span:
        return now - int(span.group(1)) * _UNIT[span.group(2)]
    try:
        if len(value) == 10:
            return datetime.combine(date.fromisoformat(value), datetime.min.time(), UTC).timestamp()
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None or "T" not in value.upper():
        raise ValueError(f"{text!r} is not YYYY-MM-DD, an RFC 3339 time (with its offset) or a span like 7d, 12h, 30m")
    return moment.timestamp()


@dataclass(frozen=True, slots=True)
class SpendLine:
    """One group's figures."""

    group: str | None
    requests: int
    input_tokens: int
    output_tokens: int
    cached_tokens: int
    cost_usd: float

    def as_dict(self, by: By) -> dict[str, object]:
        """The group as the admin API's JSON row: ``{"<by>": ..., "requests": ..., ...}``."""
        return {
            by: self.group,
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "cost_usd": round(self.cost_usd, 6),
        }


def _day(number: int | None) -> str | None:
    """A UTC day number as ``YYYY-MM-DD``."""
    if number is None:
        return None
    return datetime.fromtimestamp(int(number) * DAY, UTC).date().isoformat()


async def spend_report(database: Database, by: By, since: float, until: float | None = None) -> list[SpendLine]:
    """The spend rows finished in ``[since, until)`` grouped ``by``, the costliest group first
    (by day: oldest day first)."""
    if by not in get_args(By):
        raise ValueError(f"by must be one of {', '.join(get_args(By))}")
    column = _GROUPED[by]
    where, params = "at >= ?", [since]
    if until is not None:
        where, params = where + " AND at < ?", [since, until]
    order = "day" if by == "day" else "SUM(cost_usd) DESC, COUNT(*) DESC"
    rows = await database.fetch(
        f"SELECT {column}, COUNT(*), CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT), "
        f"CAST(SUM(cached_tokens) AS BIGINT), SUM(cost_usd) "
        f"FROM spend WHERE {where} GROUP BY {column} ORDER BY {order}",
        params,
    )
    lines = []
    for group, requests, input_tokens, output_tokens, cached, cost in rows:
        shown = _day(group) if by == "day" else group
        lines.append(
            SpendLine(
                None if shown is None else str(shown),
                int(requests),
                int(input_tokens or 0),
                int(output_tokens or 0),
                int(cached or 0),
                float(cost or 0.0),
            )
        )
    return lines
