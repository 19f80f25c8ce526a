"""One spend row per finished request: what the ledger keeps of a :class:`RequestRecord`.

The row is built by the writer, off the request's path, from the record the request closed
with (:func:`spend_row_from_record`). Its columns, in :data:`INSERT_SPEND`'s order: a row id
(made once per row by the writer, so a batch written twice is counted once: see
:class:`RowIds`), the request id, when it
finished (Unix seconds) and its UTC day, the virtual key that admitted it (if one did), the
caller, the session (its digest, never its id), the model as asked, the candidate that served,
the status, input and output tokens and whether the upstream measured them, the cost in USD,
the cached prompt tokens and whether a cache answered it.
"""

from __future__ import annotations

import itertools
import os
from typing import Final

from asgi_router.observability.events import RequestRecord

#: The response cache's outcomes that answered the request from a stored answer.
CACHE_HITS: Final = frozenset(("hit", "semantic_hit"))

__all__ = ["ANONYMOUS_CALLER", "DAY", "INSERT_SPEND", "RowIds", "SpendRow", "caller_of", "spend_row_from_record"]

#: Seconds in a UTC day (POSIX time has no leap seconds).
DAY: Final = 86_400
#: The caller of a request without a principal (as the caller caps name it).
ANONYMOUS_CALLER: Final = "anonymous"

INSERT_SPEND: Final = (
    "INSERT INTO spend (row_id, request_id, at, day, key_id, caller, session, model, served_by, status, "
    "input_tokens, output_tokens, measured, cost_usd, cached_tokens, cache_hit) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

#: One row's values, in :data:`INSERT_SPEND`'s order.
SpendRow = tuple[
    str, str, float, int, str | None, str, str | None, str, str | None, int, int, int, int, float, int, int
]


def caller_of(record: RequestRecord) -> str:
    """The caller a request is charged to: as the caps counted it, else its principal's text
    (``anonymous`` without one), the caps' own naming."""
    if record.caller is not None:
        return record.caller
    principal = record.principal
    if principal is None:
        return ANONYMOUS_CALLER
    return principal if isinstance(principal, str) else str(principal)


class RowIds:
    """Row ids unique across processes and hosts: a random prefix per writer (96 bits from the
    OS's CSPRNG) and a counter. A ``uuid4`` per row would ask the OS for random bytes every row,
    the largest part of making a row; the ids need to be unique, not unguessable."""

    __slots__ = ("_count", "_prefix")

    def __init__(self) -> None:
        self._prefix = os.urandom(12).hex() + "-"
        self._count = itertools.count()

    def next(self) -> str:
        """A new row id."""
        return f"{self._prefix}{next(self._count):x}"


def spend_row_from_record(record: RequestRecord, row_id: str) -> SpendRow:
    """The ledger's row for ``record`` (see the module docstring).

    The cache's part: ``cached_tokens`` are the prompt tokens the provider read from its prompt
    cache (the record's ``cached_prompt_tokens``); ``cache_hit`` says the router's response cache
    answered (an exact or a semantic hit): its record states no tokens and no cost, so the caps
    rebuilt from the rows at start count nothing for it.
    """
    finished = record.started_at + record.latency
    cache = record.cache
    hit = cache is not None and cache.outcome in CACHE_HITS
    return (
        row_id,
        record.request_id,
        finished,
        int(finished // DAY),
        record.key_id,
        caller_of(record),
        record.session,
        record.ref,
        record.winner,
        record.status,
        record.prompt_tokens or 0,  # a hit's record states no tokens and no cost: it spent nothing
        record.completion_tokens or 0,
        int(record.tokens_measured),
        float(record.cost_usd or 0.0),
        record.cached_prompt_tokens,
        int(hit),
    )
