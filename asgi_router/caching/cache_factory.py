"""The response cache a router's settings ask for: none, in this process, or in the fleet's Redis.

A router none of whose groups sets ``cache`` gets none, and its requests do no cache work at
all. With a Redis ``state_url`` the entries live in Redis, on the shared state's connection
(``fleet/shared_cache.py``), so a fleet shares them; otherwise in this process (``memory_entries.py``).
A group with ``cache.semantic`` adds the semantic lookup (``semantic_lookup.py``: numpy, the
``semantic`` extra, imported only then), embedding through the router's own resolver, providers
and transport (``embedder.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from asgi_router.caching.memory_entries import EntryStore, MemoryEntries
from asgi_router.caching.response_cache import ResponseCache
from asgi_router.config.settings import RouterSettings
from asgi_router.resilience.router_state import RouterState
from asgi_router.routing.plan import Resolver
from asgi_router.transports.provider import ProviderRuntime
from asgi_router.transports.transport import Transport

if TYPE_CHECKING:
    from asgi_router.fleet.shared_cache import RedisEntries

__all__ = ["response_cache_for"]


def response_cache_for(
    settings: RouterSettings,
    state: RouterState,
    clock: Callable[[], float],
    resolver: Resolver,
    providers: Mapping[str, ProviderRuntime],
    transport: Transport,
) -> ResponseCache | None:
    """The cache for ``settings`` (``None``: no group caches); ``clock`` times in-memory TTLs;
    a semantic lookup embeds through ``resolver``, ``providers`` and ``transport``."""
    caches = {name: group.cache for name, group in settings.groups.items() if group.cache is not None}
    if not caches:
        return None
    store: EntryStore = MemoryEntries(settings.cache_max_bytes, clock)
    fleet: RedisEntries | None = None
    link = getattr(state, "link", None)
    if link is not None:  # a fleet's shared state: redis-py is installed, as it needs
        from asgi_router.fleet.link import Link
        from asgi_router.fleet.shared_cache import RedisEntries

        if isinstance(link, Link):
            store = fleet = RedisEntries(link, settings.state_key_prefix, settings.cache_max_bytes)
    sizes = {name: cache.semantic.max_entries for name, cache in caches.items() if cache.semantic is not None}
    if not sizes:
        return ResponseCache(store, clock=clock)
    # Needs numpy (the semantic extra): imported only here.
    from asgi_router.caching.embedder import Embedder
    from asgi_router.caching.semantic_lookup import SemanticLookup

    base_urls = {name: p.base_url for name, p in settings.providers.items() if p.kind == "openai"}
    embed = Embedder(resolver, providers, base_urls, transport)
    return ResponseCache(store, semantic=SemanticLookup(embed, fleet, sizes), clock=clock)
