"""Helpers for routing tests: a router on the real mock upstream, and its per-request records."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx2
from asgi_lifespan import LifespanManager

from asgi_router import ModelRouter, RequestRecord
from asgi_router.testing import Hit

from .conftest import host_app, make_settings
from .mock_upstream import MockUpstream


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


class Records:
    """Every :class:`RequestRecord` the router logged while collecting."""

    def __init__(self) -> None:
        self.all: list[RequestRecord] = []

    def of(self, request_id: str) -> RequestRecord:
        found = [record for record in self.all if record.request_id == request_id]
        assert len(found) == 1, f"{len(found)} records for {request_id}"
        return found[0]


class _Collector(logging.Handler):
    def __init__(self, records: Records) -> None:
        super().__init__(logging.INFO)
        self.records = records

    def emit(self, record: logging.LogRecord) -> None:
        found = getattr(record, "asgi_router", None)
        if isinstance(found, RequestRecord):
            self.records.all.append(found)


@contextmanager
def request_records() -> Iterator[Records]:
    """Collect the router's request records (the logging sink's ``extra``) for the block."""
    logger = logging.getLogger("asgi_router")
    records = Records()
    handler = _Collector(records)
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def seen_all(upstream: MockUpstream, request_id: str, count: int, timeout: float = 5.0) -> list[Hit]:
    """The first ``count`` upstream records of ``request_id``, each waited on until finished."""
    import time

    deadline = time.monotonic() + timeout
    while len(upstream.seen(request_id)) < count:
        assert time.monotonic() < deadline, f"upstream saw fewer than {count} requests for {request_id}"
        time.sleep(0.005)
    seen = upstream.seen(request_id)[:count]
    for item in seen:
        item.wait(max(0.0, deadline - time.monotonic()))
    return seen
