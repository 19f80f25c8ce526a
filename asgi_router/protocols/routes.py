"""Which protocol a route speaks, from its path: the client's side of translation.

The path's protocol itself (:func:`~asgi_router.core.route_paths.route_kind`) is the core's,
so that the configuration's checks read it too; here is what the protocols make of it. The protocol
decides which providers may serve a route and how the router's own errors are shaped there.
"""

from __future__ import annotations

from asgi_router.core.route_paths import RouteKind

__all__ = ["is_anthropic"]


def is_anthropic(kind: RouteKind) -> bool:
    """Whether the route's clients speak Anthropic's protocol (and get its error shapes)."""
    return kind == "messages"
