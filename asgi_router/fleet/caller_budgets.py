"""Caller and session caps across a fleet: each process spends slices leased from Redis.

The rpm/tpm budgets' design (``budgets.py``) fits caps too, and for the same reason: the request
never waits on Redis. Per cap and per caller (or session), a process holds a *slice* of what is
left: about :data:`SLICE` of the cap (at least one request, or one token), granted by one atomic
script (:data:`CALLER_LEASE`) that adds the grant to the fleet's count at once, so the grants
together never exceed what the cap holds. A request is judged on the slice the process holds:

* The store answers each ask with where the fleet stands: under the cap (the grant comes from
  what is left of it), past it (with ``downgrade_to``: the grant comes from what is left below
  ``hard_limit`` times the cap, or is unbounded without one), or refused (nothing granted). The
  request takes that answer, from this process's own memory: no round trip.
* What a request used is taken off the slice when known; when half of it is gone the next slice
  is asked for in the background at once. What a process used beyond its slice (a response that cost
  more than was left) is a debt, counted with its next ask: USD and token caps overshoot by at
  most what requests in flight spend.
* An ``rpm`` slice is spent as each request starts; the next one is asked for when half of it is
  gone. A request that finds its process's slice empty while that refill is on its way is not
  judged on the empty slice but on the fleet's count the store last answered: under the cap
  while that count, plus what this process took since, is, the process admits :data:`AHEAD`
  request beyond its grants, taken from the refill when it comes (a debt otherwise, counted with
  the next ask). So a cap is judged past only when the fleet's count is, and is overshot by at
  most one request per process whose refill was on its way as the cap was reached (within the
  documented max(1, 5%) for a fleet of at most that many processes). An empty slice with no
  refill coming (the store granted nothing) is past the cap. A fleet may serve a little *under*
  a cap (at most a slice per process, unspent).
* A cap's first slice is asked for when a request first needs it; until the answer, the process
  judges on its own view. While the store is unreachable every process enforces the whole cap
  on its own view (``resilience/caller_tally.py``), as one process does, and no request fails;
  when it is back, every slice is forgotten and asked for afresh.

Keys: ``<prefix>:cap:<digest>:<cap>`` where the digest is of the caller (and session) and, for a
daily cap, the UTC day; daily keys expire after two days, a session's ``ttl`` after its last ask,
an ``rpm`` window a little after its minute. Caller names and session ids never appear in a key.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

import anyio

from asgi_router.config.settings import RouterSettings
from asgi_router.resilience.caller_tally import (
    DAY,
    PAST,
    REFUSED,
    UNDER,
    WINDOW,
    Account,
    CallerTallies,
    Cap,
    Table,
    Tally,
)

if TYPE_CHECKING:  # redis-py is imported only when state_url names a store
    from redis.asyncio import Redis

    from asgi_router.fleet.link import Link

__all__ = [
    "AHEAD",
    "CALLER_LEASE",
    "SEED_WAIT",
    "SLICE",
    "CallerLeases",
    "SharedCallerTallies",
    "caller_tallies_for",
]

#: Seconds the ledger's seeding of an empty store waits for the store's connection at start.
SEED_WAIT: Final = 10.0
_SEED_POLL: Final = 0.05

#: The share of a cap leased at a time.
SLICE: Final = 0.02
#: Requests a process may admit beyond an empty ``rpm`` slice while its refill is on its way.
AHEAD: Final = 1


def _bound(cap: Cap, level: int) -> float:
    """Where the level the store answered ends: the cap, or (past it) where refusal starts."""
    if level == UNDER:
        return cap.limit
    return math.inf if cap.refuse_at is None else cap.refuse_at


#: ``KEYS[1]``: the cap's count (a number, or for ``rpm`` a hash of second -> requests).
#: ``ARGV``: mode (``sum`` | ``window``), the limit, where refusal starts (``-1``: never), the
#: slice wanted, this process's debt, the key's time to live (``window``: the window's length).
#: Answers ``[granted, level, fleet's count, seconds until the window frees]`` as strings.
CALLER_LEASE: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1])
local mode = ARGV[1]
local limit = tonumber(ARGV[2])
local refuse = tonumber(ARGV[3])
local want = tonumber(ARGV[4])
local debt = tonumber(ARGV[5])
local ttl = tonumber(ARGV[6])
local used = 0
local oldest = now
if mode == 'window' then
  local flat = redis.call('HGETALL', KEYS[1])
  for i = 1, #flat, 2 do
    local second = tonumber(flat[i])
    if second == nil or second <= now - ttl then
      redis.call('HDEL', KEYS[1], flat[i])
    else
      local n = tonumber(flat[i + 1]) or 0
      used = used + n
      if n > 0 and second < oldest then oldest = second end
    end
  end
else
  used = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
end
used = used + debt
local level = 0
local room = want
if refuse >= 0 and used >= refuse then
  level = 2
  room = 0
elseif used >= limit then
  level = 1
  if refuse >= 0 then room = refuse - used end
else
  room = limit - used
end
local grant = math.max(0, math.min(want, room))
local added = debt + grant
if mode == 'window' then
  if added ~= 0 then redis.call('HINCRBY', KEYS[1], now, math.ceil(added)) end
  redis.call('EXPIRE', KEYS[1], ttl + 5)
else
  redis.call('SET', KEYS[1], string.format('%.17g', used + grant), 'EX', math.ceil(ttl))
end
return {string.format('%.17g', grant), tostring(level), string.format('%.17g', used + grant),
  tostring(oldest + ttl - now)}
"""


class _Slice:
    """What one process holds of one cap of one caller (or session)."""

    __slots__ = ("asking", "cap", "credit", "frees_in", "known", "level", "low", "ttl", "used")

    def __init__(self, cap: Cap, ttl: float) -> None:
        self.cap = cap
        self.ttl = ttl
        self.credit = 0.0
        self.low = 0.0
        #: An answer arrived since the store was last reachable: the slice decides, not the local view.
        self.known = False
        self.asking = False
        #: Where the fleet stood at the last answer (``UNDER``/``PAST``/``REFUSED``).
        self.level = UNDER
        #: The fleet's count at the last answer, and when its rpm window frees up.
        self.used = 0.0
        self.frees_in = 0.0


class CallerLeases:
    """The slices this process holds, by cap key (bounded like the tallies)."""

    def __init__(self, link: Link, prefix: str, max_slices: int, clock: Callable[[], float]) -> None:
        self._link = link
        self._prefix = prefix
        self._max = max_slices
        self._clock = clock
        self._slices: OrderedDict[str, _Slice] = OrderedDict()
        #: The store was unreachable when last looked at: its slices belong to its past.
        self._was_down = True

    def level(self, key: str, cap: Cap, ttl: float, local: int) -> int:
        """Where the fleet stands against ``cap`` for ``key``; ``local`` (this process's own view)
        while the store is unreachable or before its first answer."""
        self._link.ensure()  # a loop's first request connects it, refused or not
        if not self._link.up:
            self._was_down = True
            return local
        if self._was_down:
            self._was_down = False
            self._slices.clear()
        held = self._slices.get(key)
        if held is None:
            held = self._slices[key] = _Slice(cap, ttl)
            if len(self._slices) > self._max:
                self._slices.popitem(last=False)
        else:
            self._slices.move_to_end(key)
        if not held.known:
            if not held.asking:
                self._ask(key, held, cap, ttl)
            return local
        if held.credit <= held.low and not held.asking:
            self._ask(key, held, cap, ttl)
        if cap.kind == "rpm" and held.credit < 1 and held.level != REFUSED:
            if held.asking and held.credit > -AHEAD and held.used - held.credit < _bound(cap, held.level):
                # The slice is empty but its refill is on its way, and the fleet's count as last
                # answered (plus what this process took since) leaves room: under the level the
                # store answered, the one request ahead a debt the refill pays.
                return held.level
            # No request is left in the slice: the store has not granted one, so past the level it answered.
            if held.level == UNDER:
                return REFUSED if cap.refuse_at == cap.limit else PAST
            return PAST if cap.refuse_at is None else REFUSED
        return held.level

    def spend(self, key: str, amount: float) -> None:
        """Take ``amount`` off the slice (below zero: a debt, counted with the next ask); once it
        is low, the next slice is asked for now, so the next request finds it there."""
        held = self._slices.get(key)
        if held is not None:
            held.credit -= amount
            if held.known and held.credit <= held.low and not held.asking and self._link.up:
                self._ask(key, held, held.cap, held.ttl)

    def used(self, key: str) -> float | None:
        """The fleet's count as of the last answer, when one is known."""
        held = self._slices.get(key)
        return held.used if held is not None and held.known and self._link.up else None

    def _ask(self, key: str, held: _Slice, cap: Cap, ttl: float) -> None:
        held.asking = True
        whole = cap.kind == "rpm" or cap.kind.startswith("tokens")
        want = cap.limit * SLICE
        want = float(max(1, math.ceil(want))) if whole else max(want, 1e-6)
        held.low = want / 2 if not whole else float(math.floor(want / 2))
        debt = max(0.0, -held.credit)
        held.credit += debt
        window = cap.kind == "rpm"
        args: list[str | int | float] = [
            "window" if window else "sum",
            cap.limit,
            -1 if cap.refuse_at is None else cap.refuse_at,
            want,
            debt,
            WINDOW if window else max(1, math.ceil(ttl)),
        ]
        keys = [f"{self._prefix}:cap:{key}"]
        slices = self._slices

        async def ask(client: Redis) -> None:
            try:
                answer = await client.register_script(CALLER_LEASE)(keys=keys, args=args)
                granted, level, used, frees_in = (float(part) for part in answer)
            finally:
                held.asking = False
            if slices is not self._slices or self._slices.get(key) is not held:
                return  # forgotten meanwhile (the store came back, or the table's bound)
            held.credit += granted
            held.level = int(level)
            held.used = used
            held.frees_in = frees_in
            held.known = True
            if granted > 0 and held.credit <= held.low:  # spent meanwhile (or a debt took it): ask on
                self._ask(key, held, cap, ttl)

        self._link.spawn(ask)
        if not self._link.up:
            held.asking = False


class SharedCallerTallies(CallerTallies):
    """A :class:`CallerTallies` whose answers are the fleet's (see the module docstring)."""

    shared = True

    def __init__(
        self,
        link: Link,
        prefix: str,
        max_tallies: int,
        session_ttl: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(max_tallies, clock, wall)
        self._leases = CallerLeases(link, prefix, 2 * max_tallies, clock)
        self._session_ttl = session_ttl
        self._link = link
        self._prefix = prefix
        #: Each (subject, cap, day)'s key and ttl, computed once.
        self._keys: dict[tuple[str, str, int], tuple[str, float]] = {}
        self._max_keys = 4 * max_tallies

    def _key(self, subject: str, cap: Cap) -> tuple[str, float]:
        """The cap's key in the store (a digest: no caller name or session id in Redis) and its ttl."""
        day = self.today() if cap.daily else -1
        known = self._keys.get((subject, cap.kind, day))
        if known is not None:
            return known
        ttl = float(2 * DAY) if cap.daily else WINDOW if cap.kind == "rpm" else self._session_ttl
        text = f"{subject}\x00{day}".encode("utf-8", "surrogatepass")
        found = self._keys[(subject, cap.kind, day)] = (
            f"{hashlib.blake2b(text, digest_size=12).hexdigest()}:{cap.kind}",
            ttl,
        )
        if len(self._keys) > self._max_keys:
            self._keys.clear()  # bounded like the tallies; recomputed on next use
        return found

    def admit(self, account: Account) -> bool:
        """Never at once: every request is judged on the slices this process holds, cap by cap."""
        return False

    def settle(self, account: Account, tokens: int, usd: float) -> None:
        """Each tally charged as :meth:`charge` does, spending its slices."""
        if tokens <= 0 and usd <= 0:
            return
        tally, table, session, sessions = account.tally, account.table, account.session, account.sessions
        if tally is not None and table is not None:
            self.charge(tally.subject, tally, table, tokens, usd)
        if session is not None and sessions is not None:
            self.charge(session.subject, session, sessions, tokens, usd)

    def level(self, subject: str, tally: Tally, cap: Cap) -> int:
        key, ttl = self._key(subject, cap)
        return self._leases.level(key, cap, ttl, super().level(subject, tally, cap))

    def judge(self, subject: str, tally: Tally, table: Table) -> tuple[int, Cap | None]:
        past: Cap | None = None
        for cap in table.caps:  # every cap asks its own slice: the fleet's answer per cap
            level = self.level(subject, tally, cap)
            if level == REFUSED:
                return REFUSED, cap
            if level == PAST and past is None:
                past = cap
        return (UNDER, None) if past is None else (PAST, past)

    def used_by(self, subject: str, tally: Tally, cap: Cap) -> float:
        local = super().used_by(subject, tally, cap)
        fleet = self._leases.used(self._key(subject, cap)[0])
        return local if fleet is None else max(local, fleet)

    def started(self, subject: str, tally: Tally | None, rpm: Cap | None, session: Tally | None = None) -> None:
        super().started(subject, tally, rpm, session)
        if rpm is not None and tally is not None:
            self._leases.spend(self._key(subject, rpm)[0], 1)

    def charge(self, subject: str, tally: Tally, table: Table, tokens: int, usd: float) -> None:
        super().charge(subject, tally, table, tokens, usd)
        for cap in table.caps:
            if cap.kind != "rpm":
                self._leases.spend(self._key(subject, cap)[0], usd if cap.kind.startswith("usd") else tokens)

    async def seed_store(self, used: Sequence[tuple[str, Cap, float]]) -> None:
        """The ledger seeds an empty store: each daily or session cap's count is set to what the
        ledger says was used, only where the store has no count yet (the fleet's own count wins).
        Waits a little for the store's connection at start; a store that stays away is not seeded
        (every process then enforces the caps on its own tallies, which the ledger seeded)."""
        for _ in range(int(SEED_WAIT / _SEED_POLL)):  # the link says when it is up, not by an event
            if self._link.up:
                break
            await anyio.sleep(_SEED_POLL)
        keyed = [(self._key(subject, cap), amount) for subject, cap, amount in used if amount > 0]
        if not keyed or not self._link.up:
            return
        prefix = self._prefix

        async def write(client: Redis) -> None:
            async with client.pipeline(transaction=False) as pipe:
                for (key, ttl), amount in keyed:
                    pipe.set(f"{prefix}:cap:{key}", f"{amount:.17g}", nx=True, ex=max(1, math.ceil(ttl)))
                await pipe.execute()

        await self._link.call(write)


def caller_tallies_for(settings: RouterSettings, state: object, clock: Callable[[], float]) -> CallerTallies:
    """The fleet's tallies when ``state`` is shared through a store, else this process's own."""
    link = getattr(state, "link", None)
    if getattr(state, "shared", False) is not True or link is None:
        return CallerTallies(settings.max_callers, clock)
    ttl = settings.sessions.ttl if settings.sessions is not None else float(DAY)
    return SharedCallerTallies(link, settings.state_key_prefix, settings.max_callers, ttl, clock)
