"""Helpers for routing tests: a router on the real mock upstream, and the upstream requests it made."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from asgi_lifespan import LifespanManager

from asgi_router import ModelRouter
from asgi_router.testing import Hit

from .conftest import host_app, make_settings
from .mock_upstream import MockUpstream
from .waiting import polled


def chat_body(model: str, text: str = "hi", **body: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **body}


@asynccontextmanager
async def router_client(
    upstream: MockUpstream, refused_url: str | None = None, router: dict[str, Any] | None = None, **settings: Any
) -> AsyncIterator[tuple[httpx2.AsyncClient, ModelRouter]]:
    """An in-process client for a router (its own instance, ``router`` keyword arguments)."""
    instance = ModelRouter(host_app(), settings=make_settings(upstream.url, refused_url, **settings), **(router or {}))  # type: ignore[attr-defined]
    async with (
        LifespanManager(instance),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=instance), base_url="http://router") as client,
    ):
        yield client, instance


def seen_all(upstream: MockUpstream, request_id: str, count: int, timeout: float = 5.0) -> list[Hit]:
    """The first ``count`` upstream records of ``request_id``, each waited on until finished."""
    import time

    deadline = time.monotonic() + timeout
    seen = polled(
        lambda: upstream.seen(request_id)[:count] if len(upstream.seen(request_id)) >= count else None,
        within=timeout,
        every=0.005,
        what=f"{count} upstream requests for {request_id}",
    )
    for item in seen:
        item.wait(max(0.0, deadline - time.monotonic()))
    return seen
