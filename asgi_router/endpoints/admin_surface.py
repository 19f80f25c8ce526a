"""Virtual keys and the admin surface, built together for a router with ``admin_keys``.

One key ring per router (``keys/key_ring.py``) is read by inbound auth (``inbound/key_auth.py``,
in front of the configured inbound auth) and told at once of every change the admin API makes;
its background refresh runs with the router's lifespan. Keys are kept in the ledger's database
(``keys/stored_keys.py``), which the ledger opens at start; spend is the ledger's own report.
The keys' own caps keep their tallies as callers' are kept (this process's, or the fleet's
through ``state_url``). A router without ``admin_keys`` builds none of this: its requests meet
no key ring.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from asgi_router.config.settings import RouterSettings
from asgi_router.endpoints.admin_api import AdminApi
from asgi_router.endpoints.admin_door import AdminDoor
from asgi_router.inbound.auth import Guard
from asgi_router.inbound.key_auth import KeyGuard
from asgi_router.keys.key_operations import KeyOperations
from asgi_router.keys.key_ring import KeyRing
from asgi_router.keys.stored_keys import StoredKeys
from asgi_router.ledger.database import Database, LedgerUnavailable
from asgi_router.ledger.service import Ledger
from asgi_router.ledger.spend_report import By, spend_report
from asgi_router.resilience.caller_tally import CallerTallies
from asgi_router.resilience.key_caps import KeyCaps

__all__ = ["AdminSurface", "build_admin", "opened"]


@dataclass(frozen=True, slots=True)
class AdminSurface:
    """What a router with ``admin_keys`` adds: the guard with virtual keys in front, the admin
    API and page, the keys' own caps, and the ring those read."""

    guard: KeyGuard
    api: AdminApi
    key_caps: KeyCaps
    ring: KeyRing


def opened(ledger: Ledger) -> Callable[[], Awaitable[Database]]:
    """The ledger's database while it is open (:class:`LedgerUnavailable` while it is not)."""

    async def database() -> Database:
        if ledger.database is None:
            raise LedgerUnavailable(f"the ledger {ledger.shown} is not open")
        return ledger.database

    return database


def build_admin(
    settings: RouterSettings,
    inner: Guard | None,
    ledger: Ledger,
    tallies: CallerTallies,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> AdminSurface:
    """The admin surface over ``ledger`` (``inner``: the configured inbound auth, if any)."""
    assert settings.admin_keys is not None
    database = opened(ledger)
    table = StoredKeys(database)
    ring = KeyRing(table, wall=wall, clock=clock)
    operations = KeyOperations(table, wall, ring.learn)

    async def spend(by: By, since: float | None, until: float | None) -> Sequence[Mapping[str, object]]:
        lines = await spend_report(await database(), by, since or 0.0, until)
        return [line.as_dict(by) for line in lines]

    api = AdminApi(settings.admin_route, AdminDoor(settings.admin_keys, clock), operations, spend, wall)
    return AdminSurface(KeyGuard(ring, inner), api, KeyCaps(settings, tallies), ring)
