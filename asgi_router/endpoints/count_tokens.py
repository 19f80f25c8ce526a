"""Anthropic's token counting route, ``POST <messages route>/count_tokens``: refused, plainly.

Claude Code and langchain-anthropic call it beside the Messages API. The router does not route
it: a count is not a completion (no failover, budget or usage applies), and an answer from the
first member of a group may count for another model than the one that will serve. Left to the
host app, the call would meet a 404 that says nothing; so below every Anthropic route the router
answers it itself, with an Anthropic-shaped ``not_found_error`` that says it is not supported,
which an Anthropic SDK raises as ``NotFoundError`` with that message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from starlette.types import Send

from asgi_router.core.route_paths import RouteKind
from asgi_router.protocols.anthropic_errors import anthropic_error_body

__all__ = ["COUNT_TOKENS", "NOT_SUPPORTED", "count_tokens_routes", "refuse_count_tokens"]

#: The path below a Messages route that counts a request's tokens.
COUNT_TOKENS: Final = "/count_tokens"
#: What a client that asks for a count is told.
NOT_SUPPORTED: Final = (
    "token counting (POST .../messages/count_tokens) is not supported by this gateway: it routes "
    "messages only; count tokens with the provider's own API"
)
_BODY: Final = anthropic_error_body(404, NOT_SUPPORTED)


def count_tokens_routes(routes: Mapping[str, RouteKind]) -> frozenset[str]:
    """The token counting path below each route that speaks Anthropic's protocol."""
    return frozenset(route.rstrip("/") + COUNT_TOKENS for route, kind in routes.items() if kind == "messages")


async def refuse_count_tokens(send: Send) -> None:
    """Answer the refusal (the request body is left unread: the answer does not depend on it)."""
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(_BODY)).encode())]
    await send({"type": "http.response.start", "status": 404, "headers": headers})
    await send({"type": "http.response.body", "body": _BODY})
