"""The spend query's pieces: the instants operators write, grouping, and retention pruning."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from asgi_router.ledger.database import Database
from asgi_router.ledger.opening import open_database
from asgi_router.ledger.spend_report import parse_when, spend_report
from asgi_router.ledger.spend_rows import INSERT_SPEND, RowIds
from asgi_router.ledger.spend_writer import SpendWriter

pytestmark = pytest.mark.anyio

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC).timestamp()
DAY = 86_400


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", NOW - 7 * DAY),
        ("12h", NOW - 12 * 3600),
        ("30m", NOW - 1800),
        ("2026-03-01", datetime(2026, 3, 1, tzinfo=UTC).timestamp()),
        ("2026-03-01T06:30:00Z", datetime(2026, 3, 1, 6, 30, tzinfo=UTC).timestamp()),
        ("2026-03-01T08:30:00+02:00", datetime(2026, 3, 1, 6, 30, tzinfo=UTC).timestamp()),
    ],
)
def test_since_and_until_take_a_date_an_rfc3339_time_or_a_span(text: str, expected: float) -> None:
    assert parse_when(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "7w", "2026-03-01T06:30:00", "2026-13-01", ""])
def test_anything_else_is_refused_saying_which_forms_are_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="YYYY-MM-DD, an RFC 3339 time"):
        parse_when(text, NOW)


def _row(n: int, at: float, key: str | None, caller: str, served: str, cost: float) -> tuple[object, ...]:
    return (f"r{n}", f"q{n}", at, int(at // DAY), key, caller, None, "group/x", served, 200, 10, 2, 1, cost, 4, 0)


@pytest.fixture
async def database() -> AsyncIterator[Database]:
    opened = await open_database("memory://")
    rows = [
        _row(1, NOW - 2 * DAY, "k1", "team-a", "p/a", 0.5),
        _row(2, NOW - 1 * DAY, "k1", "team-a", "p/b", 0.25),
        _row(3, NOW - 60, "k2", "team-b", "p/a", 1.0),
        _row(4, NOW - 30 * DAY, None, "team-b", "p/a", 9.0),
    ]
    await opened.execute_many(INSERT_SPEND, rows)
    yield opened
    await opened.close()


async def test_spend_is_grouped_costliest_first_within_the_window(database: Database) -> None:
    lines = await spend_report(database, "caller", NOW - 7 * DAY)
    assert [(line.group, line.requests, line.input_tokens, line.cached_tokens, line.cost_usd) for line in lines] == [
        ("team-b", 1, 10, 4, 1.0),
        ("team-a", 2, 20, 8, 0.75),
    ]
    by_day = await spend_report(database, "day", NOW - 7 * DAY, NOW - DAY / 2)
    assert [(line.group, line.requests) for line in by_day] == [("2026-03-08", 1), ("2026-03-09", 1)]
    by_model = await spend_report(database, "model", 0)
    assert by_model[0].as_dict("model") == {
        "model": "p/a",
        "requests": 3,
        "input_tokens": 30,
        "output_tokens": 6,
        "cached_tokens": 12,
        "cost_usd": 10.5,
    }


async def test_retention_prunes_only_rows_older_than_it(database: Database) -> None:
    writer = SpendWriter("memory://", 10, 1.0, retention_days=7, wall=lambda: NOW)
    writer.database = database
    await writer.prune()
    assert [row[0] for row in await database.fetch("SELECT request_id FROM spend ORDER BY at")] == ["q1", "q2", "q3"]


def test_row_ids_are_new_on_every_row_and_never_shared_between_writers() -> None:
    first, second = RowIds(), RowIds()
    made = [ids.next() for _ in range(1000) for ids in (first, second)]
    assert len(set(made)) == len(made)
    assert first.next().rsplit("-", 1)[0] != second.next().rsplit("-", 1)[0]  # each writer's own prefix
