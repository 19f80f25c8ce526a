"""Tables keyed by candidate stay bounded when clients invent model ids.

A direct ref (``provider/model-id``) names any model id a client likes, so every table the
router keeps per candidate is bounded like the breaker table: past the bound, the candidate seen
longest ago is forgotten. Driven through the router itself over an in-memory upstream (streamed
answers; with a latency target set, the slowness windows are kept; without one, the metrics'
counts are), with the bounds made small so that the test needs hundreds of requests rather than
tens of thousands.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import asgi_router
from asgi_router import ModelRouter, RouterSettings
from asgi_router.observability import metrics_tally
from asgi_router.resilience import router_state, slowness
from asgi_router.testing.memory_transport import MemoryResponse, MemoryTransport
from bench.asgi_calls import receive_once

pytestmark = pytest.mark.anyio

_PACKAGE = str(Path(asgi_router.__file__).parent)

_EVENTS = [
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hi"}}]}\n\n',
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]


async def _ask(router: ModelRouter, model: str) -> int:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": True}).encode()
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
    }
    await router(scope, receive_once(body, asyncio.Event().wait), send)
    await asyncio.sleep(0)
    return int(sent[0]["status"])


def _routers_own() -> int:
    """Bytes allocated by the router's own code and still held (not pytest's log capture's)."""
    gc.collect()
    mine = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, f"{_PACKAGE}/*")])
    return sum(stat.size for stat in mine.statistics("filename"))


@pytest.mark.parametrize(
    "extra",
    [{"latency_target": 1.0}, {}],
    ids=["with-a-latency-target", "without-one-with-metrics"],
)
async def test_new_direct_ref_model_ids_past_the_bound_do_not_grow_the_routers_memory(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, extra: dict[str, Any]
) -> None:
    # The log line's records would be kept by pytest's log capture, not by the router.
    caplog.set_level(logging.WARNING, logger="asgi_router")
    monkeypatch.setattr(slowness, "MAX_BREAKERS", 200, raising=False)
    monkeypatch.setattr(router_state, "MAX_BREAKERS", 200, raising=False)
    monkeypatch.setattr(metrics_tally, "_KEYS_KEPT", 200, raising=False)
    settings = RouterSettings(
        allow_unauthenticated=True,
        providers={"p": {"base_url": "http://127.0.0.1:1/v1", "api_key": "k", **extra}},
        metrics_route=None if extra else "/metrics",
    )

    async def host(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the router answers chat requests itself")

    router = ModelRouter(host, settings=settings, transport=MemoryTransport(lambda url: MemoryResponse(_EVENTS)))
    tracemalloc.start()
    try:
        for index in range(300):  # the table is full, and the ring of recent requests too
            assert await _ask(router, f"p/warm-{index}") == 200
        before = _routers_own()
        for index in range(2_000):
            assert await _ask(router, f"p/new-{index}") == 200
        grown = _routers_own() - before
    finally:
        tracemalloc.stop()
    # Unbounded, each new id kept a window of its own (about 900 bytes): 1.7 MiB for these.
    assert grown < 256 * 1024, f"{grown / 1024:.0f} KiB kept for 2,000 new model ids"
