"""A virtual key's own caps, held beside its caller's.

A request made with a virtual key is capped twice: by its caller's caps (``callers.<name>``, as
any request of that caller) and by the key's own ``usd_per_day``, ``tokens_per_day`` and
``rpm`` (with ``downgrade_to`` and ``hard_limit``), so that one team's keys can each get a
budget within the team's. The key's tallies are kept as a caller's are, by the same machinery
(:class:`~asgi_router.resilience.caller_limits.CallerLimits` over its own tally table, this
process's or the fleet's), under the subject ``key:<id>``: a key's caps hold fleet-wide as a
caller's do, and key tallies never crowd the callers' tables or pages. The table of a key is
compiled once per version of the key (a change through the admin API makes a new one).
"""

from __future__ import annotations

from typing import Final

from asgi_router.config.caller_settings import CallerCaps
from asgi_router.config.settings import RouterSettings
from asgi_router.keys.virtual_key import VirtualKey
from asgi_router.ledger.start_tallies import StartTallies
from asgi_router.resilience.caller_limits import OTHER, CallerLimits, CallerTicket, table_of
from asgi_router.resilience.caller_tally import CallerTallies, Table

__all__ = ["KeyCaps"]

_MOST_TABLES: Final = 100_000
#: A key's tallies are kept under this prefix and its id (never a caller's name: callers have no colon).
KEY_SUBJECT: Final = "key:"


class KeyCaps:
    """Caps per virtual key (see the module docstring)."""

    def __init__(self, settings: RouterSettings, tallies: CallerTallies) -> None:
        #: The caps' judge and counter, over the keys' own tally table (no caller table of its own).
        self.limits = CallerLimits(settings.model_copy(update={"callers": {}, "sessions": None}), tallies)
        self._tables: dict[str, tuple[VirtualKey, Table]] = {}

    def table(self, key: VirtualKey) -> Table:
        """The key's caps, compiled (once per version of the key)."""
        kept = self._tables.get(key.id)
        if kept is not None and kept[0] is key:
            return kept[1]
        caps = CallerCaps(
            usd_per_day=key.usd_per_day,
            tokens_per_day=key.tokens_per_day,
            rpm=key.rpm,
            downgrade_to=key.downgrade_to,
            hard_limit=key.hard_limit,
        )
        table = table_of(caps)
        if len(self._tables) >= _MOST_TABLES:
            self._tables.clear()
        self._tables[key.id] = (key, table)
        return table

    def seed(self, found: StartTallies) -> None:
        """Count what the ledger says each key used today and in the last minute (a restart
        changes no key's cap). A fleet's key tallies live in its store and are left to it: a key's
        caps are known only once its key is, so an empty store is not seeded with them."""
        tallies = self.limits.tallies
        if tallies.shared:
            return
        shift = tallies.clock() - found.now  # a wall time plus this is this process's monotonic one
        for key_id, (usd, tokens) in found.keys_today.items():
            tallies.caller(KEY_SUBJECT + key_id, False).count_before(usd, tokens)
        for key_id, finished in found.keys_recent.items():
            tallies.caller(KEY_SUBJECT + key_id, False).count_before(0.0, 0, finished, shift)

    def admit(self, key: VirtualKey) -> CallerTicket:
        """The request's ticket against the key's caps: served at once when every cap is far,
        else ``ticket.judged`` holds the caps past their limits, for the decision point."""
        limits = self.limits
        tallies = limits.tallies
        table = self.table(key)
        name = KEY_SUBJECT + key.id
        tally = tallies.caller(name, False)
        ticket = CallerTicket(name, OTHER, tally, table)
        level, cap = tallies.judge(tally.subject, tally, table)
        if cap is not None:
            ticket.judged = ((cap, level, table),)
        else:
            limits.serve(ticket)
        return ticket
