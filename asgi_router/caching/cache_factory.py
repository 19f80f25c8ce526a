"""The response cache a router's settings ask for: none, in this process, or in the fleet's Redis.

A router none of whose groups sets ``cache`` gets none, and its requests do no cache work at
all. With a Redis ``state_url`` the entries live in Redis, on the shared state's connection
(``fleet/shared_cache.py``), so a fleet shares them; otherwise in this process (``memory_entries.py``).
"""

from __future__ import annotations

from collections.abc import Callable

from asgi_router.caching.memory_entries import EntryStore, MemoryEntries
from asgi_router.caching.response_cache import ResponseCache
from asgi_router.config.settings import RouterSettings
from asgi_router.resilience.router_state import RouterState

__all__ = ["response_cache_for"]


def response_cache_for(
    settings: RouterSettings, state: RouterState, clock: Callable[[], float]
) -> ResponseCache | None:
    """The cache for ``settings`` (``None``: no group caches); ``clock`` times in-memory TTLs."""
    if not any(group.cache is not None for group in settings.groups.values()):
        return None
    store: EntryStore = MemoryEntries(settings.cache_max_bytes, clock)
    link = getattr(state, "link", None)
    if link is not None:  # a fleet's shared state: redis-py is installed, as it needs
        from asgi_router.fleet.link import Link
        from asgi_router.fleet.shared_cache import RedisEntries

        if isinstance(link, Link):
            store = RedisEntries(link, settings.state_key_prefix, settings.cache_max_bytes)
    return ResponseCache(store)
