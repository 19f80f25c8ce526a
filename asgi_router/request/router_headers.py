"""The router's own response headers, built in one place from the request's state.

Every answer the router sends (a winner's response whole or relayed, a refusal passed through, a
group's canned reply, the router's own error) says the same things about how it was routed:
``x-request-id`` (echoed or generated), how many candidates were tried, and when known the
candidate that answered or refused, the rule that chose the plan, how a sticky group's keyed
request stuck, the caller cap that downgraded or refused it, whether the answer is the
group's canned reply, what a cached group's response cache made of it (with ``age`` and the
similarity of a hit), and how long a request that joined its group's queue waited there. Built
here and nowhere else, from :class:`RequestState`, so a header a later change adds is one line
here. An upstream cannot forge them: its headers under the same
prefix are dropped before these are added (``responses/headers.py``).

Every value is a validated token: request ids pass the sanity check or are the router's own,
candidates and rule names are checked when parsed or configured, sticky outcomes and cap kinds
are the router's own words, a queue's wait is a number.
"""

from __future__ import annotations

from typing import Final

from asgi_router.request.request_state import RequestState

__all__ = ["CACHE_TTL", "add_router_headers"]

#: The client's header that shortens how long a cached group keeps its answer (``caching/``
#: reads it): named here, with the router's other header names.
CACHE_TTL: Final = b"x-router-cache-ttl"

#: A response cache's outcome as its header says it (the record's words, hyphenated).
_CACHE_WORDS: Final[dict[str, bytes]] = {
    "hit": b"hit",
    "semantic_hit": b"semantic-hit",
    "miss": b"miss",
    "bypass": b"bypass",
}


def add_router_headers(
    headers: list[tuple[bytes, bytes]], state: RequestState, winner: str | None, attempts: int
) -> list[tuple[bytes, bytes]]:
    """``headers`` (appended to in place, and returned) with the router's own: ``winner`` is the
    candidate that answered or refused (``None``: none did), ``attempts`` how many were tried."""
    headers.append((b"x-request-id", state.request_id.encode()))
    headers.append((b"x-router-attempts", b"%d" % attempts))
    if winner is not None:
        headers.append((b"x-router-model", winner.encode()))
    if state.rule is not None:
        headers.append((b"x-router-route", state.rule.encode()))
    if state.sticky is not None:
        headers.append((b"x-router-sticky", state.sticky[1].encode()))
    if state.limit is not None:
        headers.append((b"x-router-limit", state.limit.encode()))
    if state.degraded:
        headers.append((b"x-router-degraded", b"1"))
    if (cache := state.cache) is not None:
        headers.append((b"x-router-cache", _CACHE_WORDS[cache.outcome]))
        if cache.age is not None:
            headers.append((b"age", b"%d" % cache.age))
        if cache.similarity is not None:
            headers.append((b"x-router-cache-similarity", b"%.4f" % cache.similarity))
    queued = state.queued
    if queued is not None and queued[1] != "full":  # a full queue was never joined
        headers.append((b"x-router-queue-wait", b"%.3f" % queued[2]))
    return headers
