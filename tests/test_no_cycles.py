"""The request path leaves no reference cycles behind.

Objects in a cycle outlive their request until the cyclic garbage collector finds them, and
every request that leaves some makes those collections more frequent: one cycle per request
(a context manager and the watch it owned, pointing at each other) once cost ~10% of the
router's CPU per request under load. This pins that a served request, plain or streamed,
through the router and a real loopback upstream, frees everything by reference counting alone.
The upstream runs in a process of its own (the benchmark's): its objects are not counted.
"""

from __future__ import annotations

import gc
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from asgi_router import ModelRouter
from bench.asgi_calls import receive_once
from bench.procs import Server

from .conftest import SentMessages, chat_scope, host_app, make_settings

pytestmark = [pytest.mark.anyio, pytest.mark.both_transports]  # what a request leaves depends on the client


@pytest.fixture(scope="module")
def upstream_process() -> Iterator[str]:
    """The benchmark's upstream (JSON, or 20 SSE events), served by a uvicorn process of its own."""
    with Server("upstream-cycles", "bench.upstream:app") as server:
        yield server.origin


@pytest.fixture
def no_collector() -> Iterator[list[Any]]:
    """The collector off, and what it would have found kept in a list (not freed)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield gc.garbage
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_served_requests_leave_nothing_for_the_cyclic_collector(
    upstream_process: str, stream: bool, no_collector: list[Any]
) -> None:
    router = ModelRouter(host_app(), settings=make_settings(upstream_process, groups={"g": {"members": ["mock/ok"]}}))
    body = json.dumps({"model": "group/g", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
    never = anyio.Event()

    async def one() -> None:
        sent = SentMessages()

        await router(chat_scope(), receive_once(body.encode(), then=never.wait), sent)
        assert sent[0]["status"] == 200

    try:
        for _ in range(20):  # first-time allocations: pools, caches, the ticker
            await one()
        gc.collect()
        no_collector.clear()
        for _ in range(100):
            await one()
        found = gc.collect()
        kinds = Counter(type(obj).__name__ for obj in no_collector)
        # Fewer than one per request: a cycle per request leaves several objects each time.
        # (A library may leave a few once, e.g. a cache built on first use.)
        assert found < 100, f"{found} objects in cycles after 100 requests: {kinds.most_common(8)}"
    finally:
        await router.transport.aclose()
