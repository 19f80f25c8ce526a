"""The host app keeps working with the router mounted: routes, lifespan, websockets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from asgi_router import ModelRouter, RouterSettings

from .conftest import host_app
from .mock_upstream import MockUpstream
from .servers import ServerThread

pytestmark = pytest.mark.anyio


async def test_host_routes_and_other_methods_pass_through_untouched(client: httpx2.AsyncClient) -> None:
    assert (await client.get("/hello")).json() == {"hello": "host"}
    assert (await client.post("/v1/embeddings", json={"model": "group/x"})).json() == {"handled_by": "host"}
    wrong_method = await client.get("/v1/chat/completions")
    assert (wrong_method.status_code, wrong_method.json()) == (404, {"detail": "Not Found"})  # FastAPI's answer


@pytest.mark.both_transports
async def test_host_lifespan_runs_and_router_client_opens_and_closes_with_it(settings: RouterSettings) -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        events.append("startup")
        yield
        events.append("shutdown")

    app = FastAPI(lifespan=lifespan)
    router = ModelRouter(app, settings=settings)
    async with LifespanManager(router):
        assert events == ["startup"]
        assert router.transport.is_open
    assert events == ["startup", "shutdown"]
    assert not router.transport.is_open


async def test_websocket_scope_passes_through_to_the_host(settings: RouterSettings) -> None:
    router = ModelRouter(host_app(), settings=settings)
    inbox = [
        {"type": "websocket.connect"},
        {"type": "websocket.receive", "text": "ping"},
        {"type": "websocket.disconnect", "code": 1000},
    ]
    outbox: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return inbox.pop(0)

    async def send(message: dict[str, Any]) -> None:
        outbox.append(message)

    scope = {"type": "websocket", "path": "/ws", "headers": [], "query_string": b"", "subprotocols": []}
    await router(scope, receive, send)  # type: ignore[arg-type]
    assert outbox[0]["type"] == "websocket.accept"
    assert {"type": "websocket.send", "text": "echo:ping"} in [
        {k: v for k, v in m.items() if k in ("type", "text")} for m in outbox
    ]


async def test_add_middleware_mount_serves_router_and_host_over_real_sockets(settings: RouterSettings) -> None:
    app = host_app()
    app.add_middleware(ModelRouter, settings=settings)
    with ServerThread(app) as server:
        async with httpx2.AsyncClient(base_url=server.url) as client:
            routed = await client.post("/v1/chat/completions", json={"model": "mock/ok", "messages": []})
            hosted = await client.get("/hello")
    assert routed.status_code == 200
    assert routed.json()["choices"][0]["message"]["content"] == "hello from ok"
    assert hosted.json() == {"hello": "host"}


_ORIGIN = "https://app.example"


def _with_cors(app: FastAPI) -> None:
    app.add_middleware(CORSMiddleware, allow_origins=[_ORIGIN], allow_methods=["*"], allow_headers=["*"])


async def _cross_origin_calls(app: FastAPI) -> tuple[httpx2.Response, httpx2.Response, httpx2.Response]:
    """A browser's preflight, then its chat call and a host route, from another origin."""
    with ServerThread(app) as server:
        async with httpx2.AsyncClient(base_url=server.url, headers={"origin": _ORIGIN}) as client:
            preflight = await client.options(
                "/v1/chat/completions",
                headers={"access-control-request-method": "POST", "access-control-request-headers": "authorization"},
            )
            chat = await client.post("/v1/chat/completions", json={"model": "mock/ok", "messages": []})
            hosted = await client.get("/hello")
    return preflight, chat, hosted


async def test_cors_middleware_added_after_the_router_wraps_the_routers_answers_too(settings: RouterSettings) -> None:
    app = host_app()
    app.add_middleware(ModelRouter, settings=settings)
    _with_cors(app)  # added last: outermost, as the README says
    preflight, chat, hosted = await _cross_origin_calls(app)
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == _ORIGIN
    assert chat.status_code == 200
    assert chat.headers["access-control-allow-origin"] == _ORIGIN
    assert hosted.headers["access-control-allow-origin"] == _ORIGIN


async def test_cors_middleware_added_before_the_router_misses_the_routers_answers(settings: RouterSettings) -> None:
    """The order the README warns against: CORS inside the router sees only the host's requests."""
    app = host_app()
    _with_cors(app)
    app.add_middleware(ModelRouter, settings=settings)
    _, chat, hosted = await _cross_origin_calls(app)
    assert chat.status_code == 200
    assert "access-control-allow-origin" not in chat.headers
    assert hosted.headers["access-control-allow-origin"] == _ORIGIN


async def test_router_works_when_the_host_app_has_no_lifespan(settings: RouterSettings) -> None:
    async def bare(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("this app supports no lifespan and no routes")

    router = ModelRouter(bare, settings=settings)
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router), base_url="http://r") as client:
        response = await client.post("/v1/chat/completions", json={"model": "mock/ok", "messages": []})
    assert response.status_code == 200
    await router.transport.aclose()


async def test_custom_routes_are_served_and_mapped_below_base_url(
    settings: RouterSettings, upstream: MockUpstream
) -> None:
    custom = settings.model_copy(update={"routes": ["/v1/chat/completions", "/llm/chat/completions"]})
    router = ModelRouter(host_app(), settings=custom)
    paths: dict[str, str] = {}
    async with (
        LifespanManager(router),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router), base_url="http://r") as client,
    ):
        for route in custom.routes:
            response = await client.post(route, json={"model": "mock/ok", "messages": []})
            assert response.status_code == 200, route
            paths[route] = upstream.record(response.headers["x-request-id"]).path
    # base_url ends in /v1: each route lands below it, and /v1 is never doubled
    assert paths == {
        "/v1/chat/completions": "/v1/chat/completions",
        "/llm/chat/completions": "/v1/llm/chat/completions",
    }
