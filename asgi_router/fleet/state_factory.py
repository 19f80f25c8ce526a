"""The state the settings ask for: in this process, or shared through Redis.

``SharedState`` (and so the ``redis`` package) is imported only when ``state_url`` names a Redis
store: a router without one never needs redis-py. A URL that cannot be parsed (settings built
without validation) leaves the router in-process, with one warning: Redis never makes the router
unable to serve.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from asgi_router.config.settings import RouterSettings
from asgi_router.config.state_settings import shared_store_url
from asgi_router.core.store_url import mask_store_url
from asgi_router.observability.events import logger
from asgi_router.resilience.router_state import InMemoryState, RouterState
from asgi_router.resilience.stats import Limits

__all__ = ["budgets_of", "make_state"]


def budgets_of(settings: RouterSettings) -> dict[str, Limits]:
    """Every member with an rpm/tpm budget, with the largest budget any group gives it."""
    budgets: dict[str, Limits] = {}
    for name in settings.groups:
        for member in settings.flat_member_settings(name):
            if member.rpm is None and member.tpm is None:
                continue
            known = budgets.get(member.ref, Limits())
            budgets[member.ref] = Limits(_larger(known.rpm, member.rpm), _larger(known.tpm, member.tpm))
    return budgets


def _larger(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def make_state(settings: RouterSettings, clock: Callable[[], float] = time.monotonic) -> RouterState:
    """In memory, unless ``settings.state_url`` names a Redis store."""
    url = shared_store_url(settings.state_url)
    if url is None:
        return InMemoryState(clock, settings.latency_half_life)
    # Needs redis-py: imported only when asked for.
    from asgi_router.fleet.link import usable_url
    from asgi_router.fleet.shared_state import SharedState

    if not usable_url(url):
        logger.warning(
            "asgi_router: state_url %s cannot be parsed (percent-encode a password that holds '#', '/' or '?'); "
            "this router keeps its state in this process",
            mask_store_url(url),
        )
        return InMemoryState(clock, settings.latency_half_life)
    # One line per process at start-up, so that a fleet's logs say which store each process
    # shares (the password masked).
    logger.info("shared state: %s, prefix %s", mask_store_url(url), settings.state_key_prefix)
    return SharedState(
        url, settings.state_key_prefix, settings.breaker, budgets_of(settings), clock, settings.latency_half_life
    )
