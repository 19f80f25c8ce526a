"""Driving an ASGI app by hand: what the in-process micro-benchmarks and the tests both need.

Kept free of the bench's other modules (and of the router) so that the tests can import it
without building the bench's host app.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["receive_once"]


def receive_once(body: bytes, then: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[dict[str, Any]]]:
    """An ASGI ``receive`` that delivers ``body`` whole, then awaits ``then()`` and reports a disconnect."""
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await then()
        return {"type": "http.disconnect"}

    return receive
