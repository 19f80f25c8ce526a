"""Caps per caller and per session: who the caller is, which caps apply, and where it stands.

Asked once per request, after inbound auth and before the body is read or a plan made: the
caps are per *request*, and the answer decides which plan is made. This module keeps the numbers
and does the bookkeeping; the answer itself is the decision point's
(``asgi_router.attempts.decisions``, ``Decisions.caller``), asked by the middleware's admit phase
when a cap stands past its limit:

1. :meth:`CallerLimits.admit`: the request's :class:`CallerTicket`. The usual request, every cap
   far, is counted as served in one call into the tallies, on the ticket its caller's (and
   session's) earlier requests share: with no cap past its limit the decision point's answer is
   serve, and nothing is asked. Otherwise the request gets a ticket of its own
   (:meth:`CallerLimits.judge`) with each cap of the caller's table, then of its session's, that
   stands past its limit (:data:`Judged`); with none, it is served at once;
2. the decision point answers those: serve, downgrade (serve ``downgrade_to`` instead, the
   response saying which cap in the router's limit header) or refuse;
3. :meth:`CallerLimits.serve` counts a served (or downgraded) request against ``rpm`` caps, or
   :meth:`CallerLimits.refuse` makes the 429 ``caller_limit_reached`` naming the cap (never a
   key) and when it resets, with ``Retry-After`` and ``x-should-retry: false`` (the official
   SDKs' quick retries would only meet the cap again).

Spend is known only after the answer (the upstream's usage, else the estimate), so a request
that starts under a cap finishes, and :attr:`CallerLimits.charge` (one call into the tallies)
counts what it used. The numbers live in a
:class:`~asgi_router.resilience.caller_tally.CallerTallies` (this process's, or the fleet's, which
judges every request on its slices).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Final, Literal

from starlette.types import Scope

from asgi_router.config.caller_settings import ANY_CALLER, CALLER_NAME, CallerCaps, SessionCaps
from asgi_router.config.settings import RouterSettings
from asgi_router.core.router_errors import RouterError
from asgi_router.inbound.session_id import session_digest, session_value
from asgi_router.ledger.start_tallies import StartTallies
from asgi_router.resilience.caller_tally import Account, CallerTallies, Cap, CapKind, Table, Tally

__all__ = [
    "ANONYMOUS",
    "OTHER",
    "CallerLimits",
    "CallerTicket",
    "Judged",
    "caller_name",
    "shown",
    "table_of",
]

#: The caller of a request without a principal (``allow_unauthenticated``, ``authorize`` returning ``True``).
ANONYMOUS: Final = "anonymous"
#: The metrics label of every caller without a table of its own.
OTHER: Final = "other"
#: What a refusal says, beside its code: the client retrying at once would only meet the cap again.
_NO_RETRY: Final = (b"x-should-retry", b"false")
_UNITS: Final[dict[CapKind, str]] = {
    "usd_per_day": "USD a UTC day",
    "tokens_per_day": "tokens a UTC day",
    "rpm": "requests a minute",
    "usd_per_session": "USD",
    "tokens_per_session": "tokens",
}

Outcome = Literal["served", "downgraded", "refused"]
_KINDS: Final[tuple[CapKind, ...]] = ("usd_per_day", "tokens_per_day", "rpm", "usd_per_session", "tokens_per_session")


def table_of(caps: CallerCaps | SessionCaps) -> Table:
    """A settings table compiled for the caps (``refuse_at`` from ``downgrade_to`` and ``hard_limit``)."""
    hard = caps.hard_limit if caps.downgrade_to is not None else 1.0
    found: list[Cap] = []
    for kind in _KINDS:
        limit = getattr(caps, kind, None)
        if limit is not None:
            found.append(Cap(kind, float(limit), None if hard is None else float(limit) * hard))
    rpm = next((cap for cap in found if cap.kind == "rpm"), None)
    daily = any(cap.daily for cap in found)
    return Table(tuple(found), caps.downgrade_to, rpm, getattr(caps, "ttl", None), daily)


#: One cap judged: the cap, where usage stands (``UNDER``/``PAST``/``REFUSED``), its table.
Judged = tuple[Cap, int, Table]


def caller_name(principal: object) -> str:
    """The caller a principal is: its text, or :data:`ANONYMOUS` when there is none."""
    if principal is None:
        return ANONYMOUS
    return principal if isinstance(principal, str) else str(principal)


def shown(name: str) -> str:
    """``name`` as messages and pages show it: as is when it is a plain name, else a placeholder
    (what ``authorize=`` returned may be any text)."""
    return name if CALLER_NAME.fullmatch(name) else "<caller>"


class CallerTicket(Account):
    """A request's caller, its tallies, and what the caps decided.

    A request served as asked with every cap far shares the ticket of its caller's (and
    session's) earlier requests (:meth:`CallerLimits.admit`): nothing on it is the request's own.
    A request judged cap by cap gets its own, which a downgrade or a refusal marks."""

    __slots__ = ("caller", "downgrade_to", "judged", "label", "limit", "outcome", "refusal")

    def __init__(self, caller: str, label: str, tally: Tally | None = None, table: Table | None = None) -> None:
        #: The caller's tally and table (``None``: no cap applies to the caller); the tally of the
        #: request's session and its table, when sessions are capped and it names one.
        super().__init__(tally, table)
        self.caller = caller
        #: The metrics label: the caller's name when it has a table of its own, else ``other``.
        self.label = label
        #: The caps past their limits, the caller's table's before the session's (the decision's input).
        self.judged: tuple[Judged, ...] = ()
        self.outcome: Outcome = "served"
        #: The cap that downgraded or refused the request (named in the router's limit header).
        self.limit: CapKind | None = None
        self.downgrade_to: str | None = None
        self.refusal: RouterError | None = None


class CallerLimits:
    """The caps of one router's settings over one set of tallies; asked once per request."""

    def __init__(self, settings: RouterSettings, tallies: CallerTallies) -> None:
        self.tallies = tallies
        self._named = {name: table_of(caps) for name, caps in settings.callers.items() if name != ANY_CALLER}
        caps_any = settings.callers.get(ANY_CALLER)
        self._any = table_of(caps_any) if caps_any is not None else None
        self._sessions = table_of(settings.sessions) if settings.sessions is not None else None
        self._session_ttl = (self._sessions.ttl if self._sessions is not None else None) or 0.0
        self._header = settings.session_header.encode("latin-1")
        #: What an admitted request used, once known, charged to its ticket's tallies (the
        #: caller's and the session's): the tallies' one call on the request's path.
        self.charge: Callable[[Account, int, float], None] = tallies.settle
        #: The tickets requests served as asked share, by caller and session (:meth:`admit`).
        self._tickets: dict[tuple[str, str | None], CallerTicket] = {}
        self._most_tickets = 2 * settings.max_callers + len(self._named) + 1
        tallies.forget.append(self._tickets.clear)  # a ticket holds only the tallies' current tallies

    @property
    def names(self) -> frozenset[str]:
        """Callers with a table of their own (the metrics' caller labels, with ``other``)."""
        return frozenset(self._named)

    def table(self, name: str) -> Table | None:
        return self._named.get(name, self._any)

    def session_of(self, name: str, scope: Scope) -> str | None:
        """The digest of caller ``name``'s session (its ``session_header``), when sessions are
        capped and the request names one; the id itself is never kept (``inbound/session_id.py``)."""
        if self._sessions is None:
            return None
        session = session_value(scope["headers"], self._header)
        return session_digest(name, session) if session is not None else None

    def admit(self, principal: object, scope: Scope) -> CallerTicket:
        """The request's ticket, and when nothing is near a cap, the request counted as served.

        The usual request: its caller's (and session's) ticket, made by an earlier request and
        shared, is handed to the tallies in one call (:meth:`CallerTallies.admit`), which counts it
        as served while every cap is far. Otherwise (a first request, a tally near a cap, a fleet)
        the request gets a ticket of its own, judged cap by cap (:meth:`judge`): with nothing past
        a limit it is served at once; else ``ticket.judged`` holds the caps past their limits, for
        the decision point to answer and :meth:`serve` or :meth:`refuse` to apply.
        """
        name = ANONYMOUS if principal is None else principal if type(principal) is str else str(principal)
        session = self.session_of(name, scope) if self._sessions is not None else None
        ticket = self._tickets.get((name, session))
        if ticket is not None and self.tallies.admit(ticket):
            return ticket
        ticket = self._judge(name, session)
        if not ticket.judged:
            self.serve(ticket)
            tickets = self._tickets
            if len(tickets) >= self._most_tickets:
                tickets.clear()  # bounded like the tallies; each made again on its next request
            tickets[(name, session)] = ticket  # nothing on it is this request's own: shared
        return ticket

    def judge(self, principal: object, scope: Scope) -> CallerTicket:
        """A ticket of the request's own: its caller, its tallies, and (``ticket.judged``) each cap
        of its caller's table, then of its session's, that stands past its limit (usually none)."""
        name = caller_name(principal)
        return self._judge(name, self.session_of(name, scope))

    def _judge(self, name: str, session: str | None) -> CallerTicket:
        tallies = self.tallies
        table = self._named.get(name)
        if table is not None:
            ticket = CallerTicket(name, name, tallies.caller(name, True), table)
        elif (table := self._any) is not None:
            ticket = CallerTicket(name, OTHER, tallies.caller(name, False), table)
        else:
            ticket = CallerTicket(name, OTHER)
        tally = ticket.tally
        if tally is not None and table is not None:
            level, cap = tallies.judge(tally.subject, tally, table)
            if cap is not None:
                ticket.judged = ((cap, level, table),)
        sessions = self._sessions
        if sessions is not None and session is not None:
            found = tallies.session(session, self._session_ttl)
            ticket.with_session(found, sessions)
            level, cap = tallies.judge(found.subject, found, sessions)
            if cap is not None:
                ticket.judged += ((cap, level, sessions),)
        return ticket

    def seed(self, found: StartTallies) -> Coroutine[Any, Any, None] | None:
        """Count what the ledger says was used before this process started (a restart changes no
        cap): today's spend of each capped caller, its requests of the last minute, and each
        session still alive. Wall times become this process's monotonic ones. A fleet's tallies
        live in its store: the work that seeds an empty store is returned, to run in the
        background (the store's own counts win)."""
        tallies = self.tallies

        def tally_of(name: str) -> tuple[Tally, Table] | None:
            named = self._named.get(name)
            table = named if named is not None else self._any
            return None if table is None else (tallies.caller(name, named is not None), table)

        shift = tallies.clock() - found.now  # a wall time plus this is this process's monotonic one
        for name, (usd, tokens) in found.today.items():
            kept = tally_of(name)
            if kept is not None and kept[1].daily:
                kept[0].count_before(usd, tokens)
        for name, finished in found.recent.items():
            kept = tally_of(name)
            if kept is not None and kept[1].rpm is not None:
                kept[0].count_before(0.0, 0, finished, shift)
        if self._sessions is not None:
            for digest, (usd, tokens, seen) in found.sessions.items():
                session = tallies.session(digest, self._session_ttl)
                session.count_before(usd, tokens)
                session.seen = seen + shift
        self._tickets.clear()
        return tallies.seed_store(self._store_seeds(found)) if tallies.shared else None

    def _store_seeds(self, found: StartTallies) -> list[tuple[str, Cap, float]]:
        """What the ledger says each capped caller used today and each live session used, per
        cap that counts it (``rpm``'s minute is left to the store)."""
        seeds: list[tuple[str, Cap, float]] = []
        for name, (usd, tokens) in found.today.items():
            table = self._named.get(name, self._any)
            for cap in table.caps if table is not None else ():
                if cap.kind in ("usd_per_day", "tokens_per_day"):
                    seeds.append(("c:" + name, cap, usd if cap.kind == "usd_per_day" else float(tokens)))
        for digest, (usd, tokens, _) in found.sessions.items() if self._sessions is not None else ():
            for cap in self._sessions.caps if self._sessions is not None else ():
                if cap.kind in ("usd_per_session", "tokens_per_session"):
                    seeds.append(("s:" + digest, cap, usd if cap.kind == "usd_per_session" else float(tokens)))
        return seeds

    def serve(self, ticket: CallerTicket, cap: Cap | None = None, ref: str | None = None) -> None:
        """The request is served: as asked, or (``ref``) from the downgrade ``cap`` past its
        limit chose; counted against the ``rpm`` caps now."""
        if ref is not None and cap is not None:
            ticket.outcome, ticket.limit, ticket.downgrade_to = "downgraded", cap.kind, ref
        tally, table = ticket.tally, ticket.table
        self.tallies.started(
            tally.subject if tally is not None else "", tally, table.rpm if table is not None else None, ticket.session
        )

    def refuse(self, ticket: CallerTicket, cap: Cap, table: Table) -> RouterError:
        """The request is refused: ``cap`` of ``table`` is reached. The 429 that says so (also
        kept as ``ticket.refusal``); a refused request counts against no cap."""
        ticket.outcome, ticket.limit = "refused", cap.kind
        refusal = ticket.refusal = self._refusal(ticket, cap, table)
        return refusal

    def _refusal(self, ticket: CallerTicket, cap: Cap, table: Table) -> RouterError:
        on_session = cap.kind in ("usd_per_session", "tokens_per_session")
        tally = ticket.session if on_session else ticket.tally
        assert tally is not None
        resets = self.tallies.resets_in(tally, cap, table.ttl)
        whose = f"{shown(ticket.caller)}'s session" if on_session else shown(ticket.caller)
        limit = f"{cap.limit:g} {_UNITS[cap.kind]}"
        if cap.refuse_at is not None and cap.refuse_at != cap.limit:
            limit += f", served from {table.downgrade_to} up to {cap.refuse_at:g}"
        when = (
            "at 00:00 UTC"
            if cap.daily
            else "as requests leave the 60 s window"
            if cap.kind == "rpm"
            else "once the session has been quiet for its ttl"
        )
        message = f"{cap.kind} of {whose} is reached ({limit}); it resets {when}, in {_duration(resets)}"
        headers = (_NO_RETRY,)
        return RouterError(429, "caller_limit_reached", message, retry_after=max(1.0, resets), headers=headers)

    def settle(self, ticket: CallerTicket, tokens: int, usd: float) -> None:
        """What an admitted request used, once known (estimated where the upstream said nothing)."""
        if ticket.refusal is None and (tokens > 0 or usd > 0):
            self.tallies.settle(ticket, tokens, usd)

    # --- what the status page and the usage route show -----------------------------------------

    def figures(self, subject: str, tally: Tally, table: Table) -> list[dict[str, object]]:
        """Each cap of ``table`` with what ``tally`` used of it and when it resets."""
        rows: list[dict[str, object]] = []
        for cap in table.caps:
            rows.append(
                {
                    "cap": cap.kind,
                    "used": round(self.tallies.used_by(subject, tally, cap), 6),
                    "limit": cap.limit,
                    "refused_at": cap.refuse_at,
                    "downgrade_to": table.downgrade_to,
                    "resets_in": round(self.tallies.resets_in(tally, cap, table.ttl), 1),
                }
            )
        return rows

    def report(self, principal: object, scope: Scope) -> dict[str, object]:
        """The caller's own figures (the usage route): its caps and, with a session header, its
        session's. Reading keeps nothing: a caller or session not yet seen shows zeros."""
        name = caller_name(principal)
        table = self.table(name)
        report: dict[str, object] = {"caller": shown(name), "caps": [], "shared": self.tallies.shared}
        if table is not None:
            named = name in self._named
            tally = self.tallies.caller_kept(name, named) or Tally(self.tallies.today(), "c:" + name)
            report["caps"] = self.figures(tally.subject, tally, table)
        session = self.session_of(name, scope)
        if session is not None and self._sessions is not None:
            found = self.tallies.session_kept(session, self._session_ttl) or Tally(self.tallies.today(), "s:" + session)
            report["session"] = self.figures(found.subject, found, self._sessions)
        return report

    def rows(self, most: int) -> list[dict[str, object]]:
        """The status page's Callers table: every named caller, then up to ``most`` others."""
        rows: list[dict[str, object]] = []
        for name, table in self._named.items():
            tally = self.tallies.caller(name, True)
            rows.append({"caller": name, "caps": self.figures(tally.subject, tally, table)})
        if self._any is not None:
            for name, tally in self.tallies.others()[:most]:
                rows.append({"caller": shown(name), "caps": self.figures(tally.subject, tally, self._any)})
        return rows


def _duration(seconds: float) -> str:
    whole = max(1, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"
