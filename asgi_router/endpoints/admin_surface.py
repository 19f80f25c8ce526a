"""Virtual keys and the admin surface, built together for a router with ``admin_keys``.

One key ring per router (``keys/key_ring.py``) is read by inbound auth (``inbound/key_auth.py``,
in front of the configured inbound auth) and told at once of every change the admin API makes;
its background refresh runs with the router's lifespan. The keys' own caps keep their tallies as
callers' are kept (this process's, or the fleet's through ``state_url``). A router without
``admin_keys`` builds none of this: its requests meet no key ring.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from asgi_router.config.settings import RouterSettings
from asgi_router.endpoints.admin_api import AdminApi
from asgi_router.endpoints.admin_door import AdminDoor
from asgi_router.endpoints.admin_spend import SpendQuery
from asgi_router.inbound.auth import Guard
from asgi_router.inbound.key_auth import KeyGuard
from asgi_router.keys.key_operations import KeyOperations
from asgi_router.keys.key_ring import KeyRing
from asgi_router.keys.key_table import KeyTable
from asgi_router.resilience.caller_tally import CallerTallies
from asgi_router.resilience.key_caps import KeyCaps

__all__ = ["AdminSurface", "build_admin"]


@dataclass(frozen=True, slots=True)
class AdminSurface:
    """What a router with ``admin_keys`` adds: the guard with virtual keys in front, the admin
    API and page, the keys' own caps, and the ring those read."""

    guard: KeyGuard
    api: AdminApi
    key_caps: KeyCaps
    ring: KeyRing


def build_admin(
    settings: RouterSettings,
    inner: Guard | None,
    table: KeyTable,
    tallies: CallerTallies,
    spend: SpendQuery | None = None,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> AdminSurface:
    """The admin surface over ``table`` (``inner``: the configured inbound auth, if any)."""
    assert settings.admin_keys is not None
    ring = KeyRing(table, wall=wall, clock=clock)
    operations = KeyOperations(table, wall, ring.learn)
    api = AdminApi(settings.admin_route, AdminDoor(settings.admin_keys, clock), operations, spend, wall)
    return AdminSurface(KeyGuard(ring, inner), api, KeyCaps(settings, tallies), ring)
