"""The transport seam: the setting picks the implementation, an injected httpx client wins."""

from __future__ import annotations

import json

import httpx2
import pytest
from asgi_lifespan import LifespanManager

from asgi_router import ModelRouter, RouterSettings
from asgi_router.upstream import HttpxTransport
from asgi_router.upstream_aiohttp import AiohttpTransport

from .conftest import host_app

pytestmark = pytest.mark.anyio


async def test_the_setting_picks_the_transport(settings: RouterSettings, transport_kind: str) -> None:
    router = ModelRouter(host_app(), settings=settings)
    expected = {"aiohttp": AiohttpTransport, "httpx": HttpxTransport}[transport_kind]
    assert type(router._transport) is expected
    assert not router._transport.is_open and router._transport.is_quiet()
    async with LifespanManager(router):
        assert router._transport.is_open and router._transport.is_quiet()
    assert not router._transport.is_open


async def test_an_injected_httpx_client_is_used_whatever_the_setting(settings: RouterSettings) -> None:
    seen: list[dict[str, object]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(json.loads(request.content))
        return httpx2.Response(200, json={"id": "from-mock-transport"})

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(answer)) as injected:
        router = ModelRouter(host_app(), settings=settings, http_client=injected)
        assert isinstance(router._transport, HttpxTransport)
        async with (
            LifespanManager(router),
            httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router), base_url="http://r") as client,
        ):
            response = await client.post("/v1/chat/completions", json={"model": "mock/any", "messages": []})
        assert not injected.is_closed  # the caller's client: never closed by the router
    assert response.json() == {"id": "from-mock-transport"}
    assert seen == [{"model": "any", "messages": []}]


async def test_gc_freeze_freezes_the_startup_heap_only_when_asked(settings: RouterSettings) -> None:
    import gc

    gc.unfreeze()
    async with LifespanManager(ModelRouter(host_app(), settings=settings)):
        assert gc.get_freeze_count() == 0  # off by default: the host app's process is its own
    frozen = settings.model_copy(update={"gc_freeze": True})
    try:
        async with LifespanManager(ModelRouter(host_app(), settings=frozen)):
            assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
