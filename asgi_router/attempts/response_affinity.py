"""Which candidate and which caller produced each Responses API response the router relayed.

A stored response (``resp_...``) lives with the provider that produced it: a follow-up turn that
names it (``previous_response_id``) must go back there (the plan phase pins it; the rule is the
decision point's, ``request_answers.py``), and only the caller that produced it may name it. The
router remembers, for each response id it relays, the candidate and a digest of the caller: in
this process, at most ``responses_max`` ids, the least recently used forgotten; with a fleet
(``state_url``), in its store too (``fleet/shared_response_ids.py``, for ``responses_ttl``), so
that any process can send the follow-up back. Ids and callers are kept as digests only. The
same table answers a stored response's own calls (``GET``/``DELETE`` and the rest,
``endpoints/stored_responses.py``); a response deleted there is forgotten here and in the fleet.

A router without a Responses route has none of this: ``None``, nothing on any request's path.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import TYPE_CHECKING, Final, NamedTuple

from asgi_router.config.settings import RouterSettings
from asgi_router.core.route_paths import route_kind

if TYPE_CHECKING:  # only a fleet's router has one (redis is optional)
    from asgi_router.fleet.shared_response_ids import FleetResponseIds

#: What the fleet's store keeps for a response id deleted by one of its processes.
FORGOTTEN: Final = ""

__all__ = ["FORGOTTEN", "Producer", "ResponseAffinity"]


class Producer(NamedTuple):
    """Who produced a response: its candidate (``provider/model-id``), and whether the caller
    asking now is the one that produced it."""

    candidate: str
    same_caller: bool


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _caller(principal: object) -> str:
    """A digest of who inbound auth admitted (``-``: no one in particular, auth is off)."""
    return _digest(str(principal)) if principal is not None else "-"


class ResponseAffinity:
    """Response ids' producers: this process's table, and the fleet's store when there is one."""

    __slots__ = ("_ids", "_max", "_ttl", "fleet")

    def __init__(self, max_ids: int, ttl: float, fleet: FleetResponseIds | None = None) -> None:
        self._ids: OrderedDict[str, str] = OrderedDict()
        self._max = max_ids
        self._ttl = ttl
        #: The fleet's store, with ``state_url`` (``None``: this process's table only).
        self.fleet = fleet

    @classmethod
    def for_settings(cls, settings: RouterSettings, state: object) -> ResponseAffinity | None:
        """The router's, or ``None`` when none of its routes is a Responses route."""
        if not any(route_kind(route) == "responses" for route in settings.routes):
            return None
        fleet = None
        if getattr(state, "shared", False):
            from asgi_router.fleet.shared_response_ids import FleetResponseIds  # redis is optional
            from asgi_router.fleet.shared_state import SharedState

            if isinstance(state, SharedState):
                fleet = FleetResponseIds(state.link, settings.state_key_prefix)
        return cls(settings.responses_max, settings.responses_ttl, fleet)

    def __len__(self) -> int:
        return len(self._ids)

    def remember(self, response_id: str, candidate: str, principal: object) -> None:
        """``candidate`` produced ``response_id`` for ``principal``."""
        digest, value = _digest(response_id), f"{candidate}\n{_caller(principal)}"
        ids = self._ids
        ids[digest] = value
        ids.move_to_end(digest)
        while len(ids) > self._max:
            ids.popitem(last=False)
        if self.fleet is not None:
            self.fleet.remember(digest, value, self._ttl)

    async def producer(self, response_id: str, principal: object) -> Producer | None:
        """Who produced ``response_id`` (``None``: an id the router does not know): the fleet's
        store first, when it answers, else this process's table."""
        digest = _digest(response_id)
        value = None
        if self.fleet is not None and self.fleet.up:
            value = await self.fleet.producer(digest)
            if value == FORGOTTEN:  # a process of the fleet saw it deleted
                self._ids.pop(digest, None)
                return None
        if value is None:
            value = self._ids.get(digest)
            if value is None:
                return None
            self._ids.move_to_end(digest)
        candidate, _, caller = value.partition("\n")
        return Producer(candidate, caller == _caller(principal))

    async def forget(self, response_id: str) -> None:
        """Forget ``response_id`` (its provider deleted it): here, and in the fleet's store when
        it answers (awaited): the store keeps it as forgotten, so that a process whose own table
        still holds it forgets it too when it asks."""
        digest = _digest(response_id)
        self._ids.pop(digest, None)
        if self.fleet is not None and self.fleet.up:
            await self.fleet.forget(digest, self._ttl)
