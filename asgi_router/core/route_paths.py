"""Which protocol a route speaks, from its path: what the whole package agrees a path means.

A route's path below ``root_path`` ends in ``/chat/completions`` (OpenAI chat: the requests the
router can translate for an Anthropic provider) or ``/messages`` (Anthropic's Messages API:
Anthropic clients, served by Anthropic providers) or ``/responses`` (OpenAI's Responses API: its
own event stream, first-event commit and in-band errors). Any other route (embeddings, ...) is
OpenAI's and passed through to OpenAI providers only. Here, at the bottom of the layers, so
that configuration checks (a ``downgrade_to`` that cannot serve a route) read it as the request
path does; ``protocols/routes.py`` adds what the protocols make of it.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["RouteKind", "route_kind"]

#: ``chat``: OpenAI chat completions; ``messages``: Anthropic Messages; ``responses``: OpenAI's
#: Responses API; ``openai``: any other OpenAI route, passed through.
RouteKind = Literal["chat", "messages", "responses", "openai"]


def route_kind(path: str) -> RouteKind:
    """The protocol of a route, from its path below ``root_path`` (a trailing ``/`` ignored)."""
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/messages"):
        return "messages"
    if path.endswith("/responses"):
        return "responses"
    return "openai"
