"""What each caller and each session has used, in this process: the numbers caller caps read.

A :class:`Tally` holds one caller's (or one session's) spend in USD and tokens and the starts of
its requests in the last 60 s. Days are UTC days (``wall`` clock): a tally whose day is over
starts again from nothing when it is next read, so a daily cap resets at 00:00 UTC for every
process alike. A session's tally is forgotten ``ttl`` seconds after its last request.

The tables are bounded: callers with a table of their own (``callers.<name>``) are few and kept
for good; every other caller (``callers."*"``) and every session (by a digest of its caller and
id, never the id) is kept in a table of at most ``max_callers`` entries, the least recently seen
forgotten first (a forgotten caller starts from nothing: a bound on memory, not a way round a
cap, since only ``max_callers`` other callers seen since can push it out).

:class:`CallerTallies` answers from this process's own view; a fleet sharing ``state_url``
replaces :meth:`CallerTallies.level` and the two ways usage is counted with leased slices
(``fleet/caller_budgets.py``), keeping this view as the answer while the store is unreachable.
Every method is synchronous and cheap: it sits on the request's path. A request meets the tallies
through two calls on an :class:`Account` (its tallies, found once and shared by the caller's and
session's requests): :meth:`CallerTallies.admit` as it starts, :meth:`CallerTallies.settle` once
its usage is known; the fleet's tallies override both. (Not the ledger: that is the database
of spend rows and keys, ``asgi_router/ledger``; these tallies are what caps read, in memory.)
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

__all__ = [
    "DAY",
    "Account",
    "PAST",
    "REFUSED",
    "UNDER",
    "WINDOW",
    "Cap",
    "CapKind",
    "CallerTallies",
    "Table",
    "Tally",
    "level_of",
]

#: Seconds in a UTC day (POSIX time has no leap seconds).
DAY: Final = 86_400
#: The rolling window of an ``rpm`` cap, in seconds.
WINDOW: Final = 60.0

#: Where usage stands against a cap: under it, past it (a downgrade serves), or refused.
UNDER: Final = 0
PAST: Final = 1
REFUSED: Final = 2

CapKind = Literal["usd_per_day", "tokens_per_day", "rpm", "usd_per_session", "tokens_per_session"]
_USD: Final[frozenset[str]] = frozenset({"usd_per_day", "usd_per_session"})
_TOKENS: Final[frozenset[str]] = frozenset({"tokens_per_day", "tokens_per_session"})
#: A judgement with every cap under its limit (made once: the usual answer).
_CLEAR: Final[tuple[int, None]] = (0, None)


@dataclass(frozen=True, slots=True)
class Cap:
    """One cap of one table: what it counts, its limit, and where refusal starts."""

    kind: CapKind
    limit: float
    #: Usage from which requests are refused: the limit itself without ``downgrade_to``,
    #: ``hard_limit`` times it with one; ``None``: the downgrade serves without end.
    refuse_at: float | None

    @property
    def daily(self) -> bool:
        return self.kind in ("usd_per_day", "tokens_per_day")


@dataclass(frozen=True, slots=True)
class Table:
    """One settings table (a ``callers`` entry, or ``sessions``), as the caps read it."""

    caps: tuple[Cap, ...]
    downgrade_to: str | None
    #: The ``rpm`` cap among ``caps`` (counted when a request starts).
    rpm: Cap | None = None
    #: Seconds a session's tally outlives its last request (sessions only).
    ttl: float | None = None
    #: Whether any cap counts per UTC day (the tally starts again each day).
    daily: bool = False
    #: The lowest limit of the caps counting USD, and of those counting tokens (``inf``: none):
    #: usage under both, and requests under ``rpm``, is under every cap (``hard_limit`` >= 1),
    #: which a request's judgement checks in three comparisons, reading no clock, before looking
    #: cap by cap (:meth:`CallerTallies.judge`).
    usd_under: float = field(init=False, default=math.inf)
    tokens_under: float = field(init=False, default=math.inf)
    #: The ``rpm`` cap's limit (``inf``: none), beside the two above.
    rpm_under: float = field(init=False, default=math.inf)

    def __post_init__(self) -> None:
        usd = [cap.limit for cap in self.caps if cap.kind in _USD]
        tokens = [cap.limit for cap in self.caps if cap.kind in _TOKENS]
        object.__setattr__(self, "usd_under", min(usd, default=math.inf))
        object.__setattr__(self, "tokens_under", min(tokens, default=math.inf))
        object.__setattr__(self, "rpm_under", self.rpm.limit if self.rpm is not None else math.inf)


def level_of(used: float, cap: Cap) -> int:
    """:data:`UNDER`, :data:`PAST` or :data:`REFUSED` for ``used`` against ``cap``."""
    if cap.refuse_at is not None and used >= cap.refuse_at:
        return REFUSED
    return PAST if used >= cap.limit else UNDER


class Tally:
    """One caller's or one session's usage (see the module docstring)."""

    __slots__ = ("day", "day_ends", "seen", "slot", "starts", "subject", "tokens", "usd")

    def __init__(self, day: int, subject: str = "", slot: str | None = None) -> None:
        self.day = day
        #: The wall time its day ends: a charge from then on starts the day's count again (one
        #: comparison, where the day's number would need a division and two calls).
        self.day_ends = float((day + 1) * DAY)
        self.usd = 0.0
        self.tokens = 0
        #: Monotonic times of the requests started in the last :data:`WINDOW` seconds (and at
        #: most one older: those are dropped as the next request starts).
        self.starts: deque[float] = deque()
        #: Monotonic time of a session's last admitted request (it expires ``ttl`` after it); no
        #: caller's cap reads it, so a request admitted at once leaves a caller's as it was.
        self.seen = 0.0
        #: The tally's key, made once with it: ``c:<caller>`` or ``s:<digest>``, the digest of the
        #: caller and the session (``inbound/session_id.py``; a fleet keys its slices by it).
        self.subject = subject
        #: Its key in its bounded table (``None``: a named caller's, kept for good).
        self.slot = slot

    def count_before(self, usd: float, tokens: int, finished: Sequence[float] = (), shift: float = 0.0) -> None:
        """Count what a ledger says was used before this process started (a restart changes no
        cap): ``usd`` and ``tokens``, and the requests that ``finished`` at wall times which
        ``shift`` turns into this process's monotonic ones (for ``rpm``)."""
        self.usd += usd
        self.tokens += tokens
        self.starts.extend(at + shift for at in finished)


class Account:
    """What a request is charged to: its caller's tally and table, its session's (each ``None``
    when nothing caps it). The tallies' two calls on a request's path take one."""

    __slots__ = ("daily", "session", "sessions", "table", "tally", "ttl")

    def __init__(self, tally: Tally | None = None, table: Table | None = None) -> None:
        self.tally = tally
        self.table = table
        #: The caller's table counts per UTC day (its tally starts again each day).
        self.daily = table is not None and table.daily
        self.session: Tally | None = None
        self.sessions: Table | None = None
        #: The session's ttl (a session table's caps never count per day).
        self.ttl = 0.0

    def with_session(self, session: Tally, sessions: Table) -> None:
        self.session = session
        self.sessions = sessions
        self.ttl = sessions.ttl or 0.0


class CallerTallies:
    """Tallies for callers and sessions, in this process (see the module docstring)."""

    #: Tallies shared by a fleet say so (the status page and the usage route label figures).
    shared = False

    def __init__(
        self,
        max_tallies: int,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._max = max_tallies
        self.clock = clock
        self.wall = wall
        self._named: dict[str, Tally] = {}
        self._others: OrderedDict[str, Tally] = OrderedDict()
        self._sessions: OrderedDict[str, Tally] = OrderedDict()
        #: Called whenever a tally is forgotten: whoever keeps accounts made of tallies forgets them.
        self.forget: list[Callable[[], None]] = []

    def _forgot(self) -> None:
        for forget in self.forget:
            forget()

    def today(self) -> int:
        """The UTC day number (days since 1970-01-01)."""
        return int(self.wall()) // DAY

    def seconds_to_midnight(self) -> float:
        """Seconds until the next UTC day starts (when daily caps reset)."""
        return DAY - self.wall() % DAY

    def caller(self, name: str, named: bool) -> Tally:
        """``name``'s tally (made on first sight); ``named``: it has a table of its own."""
        if named:
            tally = self._named.get(name)
            if tally is None:
                tally = self._named[name] = Tally(self.today(), "c:" + name)
            return tally
        others = self._others  # bounded: the least recently seen forgotten first
        tally = others.get(name)
        if tally is None:
            tally = others[name] = Tally(self.today(), "c:" + name, name)
            if len(others) > self._max:
                others.popitem(last=False)
                self._forgot()
        else:
            others.move_to_end(name)
        return tally

    def session(self, digest: str, ttl: float) -> Tally:
        """The tally of the session ``digest`` names (a fresh one once ``ttl`` passed since its
        last request). ``digest`` is the caller's and the session's, never the session's text."""
        sessions = self._sessions
        found = self.session_kept(digest, ttl)
        if found is not None:
            sessions.move_to_end(digest)
            return found
        tally = sessions[digest] = Tally(self.today(), "s:" + digest, digest)
        if len(sessions) > self._max:
            sessions.popitem(last=False)
            self._forgot()
        return tally

    def session_kept(self, digest: str, ttl: float) -> Tally | None:
        """The session's tally if one is kept and alive; reading makes none (the usage route)."""
        found = self._sessions.get(digest)
        if found is not None and self.clock() - found.seen >= ttl:
            del self._sessions[digest]
            self._forgot()
            return None
        return found

    def caller_kept(self, name: str, named: bool) -> Tally | None:
        """``name``'s tally if one is kept; reading makes none (the usage route)."""
        return self._named.get(name) if named else self._others.get(name)

    def used(self, tally: Tally, kind: CapKind) -> float:
        """What ``tally`` used of ``kind`` (today's, or in the last minute for ``rpm``)."""
        if kind == "rpm":
            return self._in_window(tally)
        if kind in ("usd_per_day", "tokens_per_day"):
            self._roll(tally)
        return tally.usd if kind in ("usd_per_day", "usd_per_session") else tally.tokens

    def _in_window(self, tally: Tally, now: float | None = None) -> int:
        """The requests ``tally`` started in the last :data:`WINDOW` seconds up to ``now``
        (default: the clock's now), the older starts dropped."""
        starts, since = tally.starts, (self.clock() if now is None else now) - WINDOW
        while starts and starts[0] <= since:
            starts.popleft()
        return len(starts)

    def judge(self, subject: str, tally: Tally, table: Table) -> tuple[int, Cap | None]:
        """Where ``tally`` stands against ``table``: its worst level and the cap at it (the first
        refusing cap, else the first past its limit; ``None`` when every cap is under).

        Once per table per request: the caps are read in one pass (a fleet reads its slices).
        The usual request is far from every cap and reads no clock: usage as last counted under
        the table's lowest USD and token limits, and the starts kept under its ``rpm``, is under
        every cap whatever the day and the window's edge, since a new day or a start leaving the
        window only lowers usage. Otherwise the day and the window are brought up to date and
        each cap judged.
        """
        if tally.usd < table.usd_under and tally.tokens < table.tokens_under and len(tally.starts) < table.rpm_under:
            return _CLEAR
        if table.daily:
            self._roll(tally)
        usd, tokens, rpm = tally.usd, tally.tokens, table.rpm
        if (
            usd < table.usd_under
            and tokens < table.tokens_under
            and (rpm is None or self._in_window(tally) < rpm.limit)
        ):
            return _CLEAR
        past: Cap | None = None
        for cap in table.caps:
            kind = cap.kind
            used = self._in_window(tally) if kind == "rpm" else usd if kind in _USD else tokens
            refuse_at = cap.refuse_at
            if refuse_at is not None and used >= refuse_at:
                return REFUSED, cap
            if past is None and used >= cap.limit:
                past = cap
        return _CLEAR if past is None else (PAST, past)

    def _roll(self, tally: Tally) -> None:
        today = self.today()
        if tally.day != today:
            tally.day, tally.usd, tally.tokens = today, 0.0, 0
            tally.day_ends = float((today + 1) * DAY)

    def used_by(self, subject: str, tally: Tally, cap: Cap) -> float:
        """What ``subject`` used of ``cap`` as far as these tallies know (a fleet's: the fleet's)."""
        return self.used(tally, cap.kind)

    def level(self, subject: str, tally: Tally, cap: Cap) -> int:
        """Where ``tally`` (of ``subject``, the fleet's key for it) stands against ``cap``."""
        return level_of(self.used(tally, cap.kind), cap)

    def started(self, subject: str, tally: Tally | None, rpm: Cap | None, session: Tally | None = None) -> None:
        """A request of ``subject`` (``tally``, if its caller has a table) and of ``session`` (if
        capped) was admitted: counted against its ``rpm`` cap (if any), both seen now."""
        now = self.clock()
        if tally is not None:
            tally.seen = now
            if rpm is not None:  # the starts that left the window go as this one comes: kept bounded
                self._in_window(tally, now)
                tally.starts.append(now)
        if session is not None:
            session.seen = now

    def charge(self, subject: str, tally: Tally, table: Table, tokens: int, usd: float) -> None:
        """What a request of ``subject`` (capped by ``table``) used, once known (on the day it ends)."""
        if table.daily:
            self._roll(tally)
        tally.tokens += tokens
        tally.usd += usd

    # --- the two calls on a request's path ------------------------------------------------------

    def admit(self, account: Account) -> bool:
        """Admit a request charged to ``account`` when no cap is near: ``True`` once it is counted
        as served (seen now, started against ``rpm``). ``False`` asks for the request to be judged
        cap by cap (:meth:`judge`, the decision point, :meth:`started`): usage as last counted not
        under a table's lowest USD and token limits, its ``rpm`` reached, a session past its ttl,
        or a fleet's tallies, whose every request reads its slices.

        One call, reading the clock once: the usual request (every cap far) shares its account
        with the caller's (and session's) other requests and judges nothing cap by cap. An
        account's tallies are these tallies' own: a tally forgotten (the bound, a session's ttl)
        forgets every account made before (:attr:`forget`). A new day needs no look: it only
        lowers usage.
        """
        now = self.clock()
        session = account.session
        if session is not None and (sessions := account.sessions) is not None:
            if (
                now - session.seen >= account.ttl
                or session.usd >= sessions.usd_under
                or session.tokens >= sessions.tokens_under
            ):
                return False
        tally = account.tally
        if tally is not None and (table := account.table) is not None:
            if tally.usd >= table.usd_under or tally.tokens >= table.tokens_under:
                return False
            if table.rpm is not None:  # the starts that left the window go as this one comes
                if self._in_window(tally, now) >= table.rpm_under:
                    return False
                tally.starts.append(now)
            if tally.slot is not None:
                self._others.move_to_end(tally.slot)
        if session is not None:
            self._sessions.move_to_end(session.slot)  # type: ignore[arg-type]
            session.seen = now
        return True

    def settle(self, account: Account, tokens: int, usd: float) -> None:
        """What an admitted request charged to ``account`` used, once known, counted against both
        its tallies (a daily table's on the day the request ends): one call."""
        tally = account.tally
        if tally is not None:
            if account.daily and self.wall() >= tally.day_ends:  # a new day: as _roll says
                self._roll(tally)
            tally.usd += usd
            tally.tokens += tokens
        session = account.session
        if session is not None:
            session.usd += usd
            session.tokens += tokens

    def resets_in(self, tally: Tally, cap: Cap, ttl: float | None) -> float:
        """Seconds until ``cap`` counts from nothing again for ``tally`` (for ``rpm``: until the
        oldest request in the window leaves it)."""
        if cap.daily:
            return self.seconds_to_midnight()
        if cap.kind == "rpm":
            return max(0.0, tally.starts[0] + WINDOW - self.clock()) if tally.starts else 0.0
        return max(0.0, tally.seen + (ttl or 0.0) - self.clock())

    def others(self) -> list[tuple[str, Tally]]:
        """Callers without a table of their own, most recently seen first (the status page)."""
        return [(name, self._others[name]) for name in reversed(self._others)]

    def sessions_kept(self) -> int:
        return len(self._sessions)

    async def seed_store(self, used: Sequence[tuple[str, Cap, float]]) -> None:
        """Write what the ledger says each ``(subject, cap)`` used into the fleet's store, where
        the store holds nothing for it yet. This process's tallies live in no store: nothing to do."""
