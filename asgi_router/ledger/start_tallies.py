"""What the caps had counted before this process started, read back from the ledger's rows.

A restart must change no cap: at start the router reads, from the spend rows, each caller's
spend of the current UTC day (USD and tokens, as the caps count them: input plus output), the
finish times of each caller's requests in the last 60 s (for ``rpm``), each session seen
within ``sessions.ttl`` (its spend and when it was last seen), and the same day's spend and
minute of each virtual key (a key's own caps). The caps' own tallies are then
seeded with them (``resilience/caller_tally.py``). With a Redis ``state_url`` the fleet's
tallies in Redis win; these only seed an empty Redis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from asgi_router.ledger.database import Database
from asgi_router.ledger.spend_rows import DAY

__all__ = ["RPM_WINDOW", "StartTallies", "read_start_tallies"]

#: The window of an ``rpm`` cap, in seconds.
RPM_WINDOW: Final = 60.0


@dataclass(slots=True)
class StartTallies:
    """The ledger's view of what the caps count, at one wall-clock instant ``now``."""

    now: float
    #: Caller -> (USD, tokens) of the UTC day ``now`` is in.
    today: dict[str, tuple[float, int]] = field(default_factory=dict)
    #: Caller -> the wall times its requests finished in the last :data:`RPM_WINDOW` seconds.
    recent: dict[str, list[float]] = field(default_factory=dict)
    #: Session digest -> (USD, tokens, wall time last seen), for sessions seen within the ttl
    #: (all of a live session's rows: a session's caps count its whole life, not a day).
    sessions: dict[str, tuple[float, int, float]] = field(default_factory=dict)
    #: Virtual key id -> (USD, tokens) of the day, and the wall times of its last minute's
    #: requests: a key's own caps are counted apart from its caller's.
    keys_today: dict[str, tuple[float, int]] = field(default_factory=dict)
    keys_recent: dict[str, list[float]] = field(default_factory=dict)


async def read_start_tallies(database: Database, now: float, session_ttl: float | None) -> StartTallies:
    """The tallies the rows of ``database`` give at ``now`` (wall clock, Unix seconds)."""
    found = StartTallies(now)
    day = int(now // DAY)
    for caller, usd, tokens in await database.fetch(
        "SELECT caller, SUM(cost_usd), CAST(SUM(input_tokens + output_tokens) AS BIGINT) "
        "FROM spend WHERE day = ? GROUP BY caller",
        [day],
    ):
        found.today[str(caller)] = (float(usd or 0.0), int(tokens or 0))
    for caller, at in await database.fetch("SELECT caller, at FROM spend WHERE at > ? ORDER BY at", [now - RPM_WINDOW]):
        found.recent.setdefault(str(caller), []).append(float(at))
    for key_id, usd, tokens in await database.fetch(
        "SELECT key_id, SUM(cost_usd), CAST(SUM(input_tokens + output_tokens) AS BIGINT) "
        "FROM spend WHERE day = ? AND key_id IS NOT NULL GROUP BY key_id",
        [day],
    ):
        found.keys_today[str(key_id)] = (float(usd or 0.0), int(tokens or 0))
    for key_id, at in await database.fetch(
        "SELECT key_id, at FROM spend WHERE at > ? AND key_id IS NOT NULL ORDER BY at", [now - RPM_WINDOW]
    ):
        found.keys_recent.setdefault(str(key_id), []).append(float(at))
    if session_ttl:
        for session, usd, tokens, seen in await database.fetch(
            "SELECT session, SUM(cost_usd), CAST(SUM(input_tokens + output_tokens) AS BIGINT), MAX(at) "
            "FROM spend WHERE session IS NOT NULL GROUP BY session HAVING MAX(at) > ?",
            [now - session_ttl],
        ):
            found.sessions[str(session)] = (float(usd or 0.0), int(tokens or 0), float(seen))
    return found
