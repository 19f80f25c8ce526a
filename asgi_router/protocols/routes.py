"""Which protocol a route speaks, from its path: the client's side of translation.

A route's path below ``root_path`` ends in ``/chat/completions`` (OpenAI chat: the requests the
router can translate for an Anthropic provider) or ``/messages`` (Anthropic's Messages API:
Anthropic clients, served by Anthropic providers). Any other route (embeddings, responses, ...)
is OpenAI's and passed through to OpenAI providers only. The protocol decides which providers
may serve a route and how the router's own errors are shaped there.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["RouteKind", "is_anthropic", "route_kind"]

#: ``chat``: OpenAI chat completions; ``messages``: Anthropic Messages; ``openai``: any other
#: OpenAI route, passed through.
RouteKind = Literal["chat", "messages", "openai"]


def route_kind(path: str) -> RouteKind:
    """The protocol of a route, from its path below ``root_path`` (a trailing ``/`` ignored)."""
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/messages"):
        return "messages"
    return "openai"


def is_anthropic(kind: RouteKind) -> bool:
    """Whether the route's clients speak Anthropic's protocol (and get its error shapes)."""
    return kind == "messages"
