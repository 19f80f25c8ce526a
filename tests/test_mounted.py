"""A router inside a sub-app mounted under a prefix, and a router that never sees a lifespan.

``parent.mount("/llm", sub)`` hands ``sub`` the whole path (``/llm/v1/chat/completions``) with
the prefix in ``root_path`` (ASGI), and no lifespan: Starlette does not pass it on to mounts.
Routes are matched below ``root_path``; the upstream is sent the route's own path; the log line
is still written, and what needs a lifespan is named once in a warning.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import anyio
import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from asgi_router import ModelRouter, RequestRecord
from bench.asgi_calls import receive_once

from .conftest import SentMessages, chat_scope, host_app, make_settings
from .mock_upstream import MockUpstream
from .servers import ServerThread
from .waiting import polled

pytestmark = pytest.mark.anyio

_CHAT = {"model": "group/g", "messages": [{"role": "user", "content": "hi"}]}


async def _no_sink(record: RequestRecord) -> None:
    """A user sink: it needs the lifespan's workers."""


def _mounted(upstream: MockUpstream, **overrides: Any) -> Starlette:
    """A parent app (with its own route) that mounts a FastAPI sub-app carrying the router at /llm."""
    sub = host_app()
    settings = make_settings(upstream.url, groups={"g": {"members": ["mock/ok"]}}, **overrides)  # type: ignore[attr-defined]
    sub.add_middleware(ModelRouter, settings=settings, sinks=[_no_sink])

    async def home(request: Request) -> PlainTextResponse:
        return PlainTextResponse("parent")

    return Starlette(routes=[Route("/", home), Mount("/llm", app=sub)])


def _lines(caplog: pytest.LogCaptureFixture, request_id: str, within: float = 5.0) -> list[str]:
    """The log lines naming ``request_id``, waiting for the first (it is written as the request
    ends, which may be just after the client has its answer)."""
    return polled(
        lambda: [r.getMessage() for r in caplog.records if f"request_id={request_id}" in r.getMessage()],
        within=within,
        what=f"a log line of {request_id}",
    )


async def test_a_router_in_a_sub_app_mounted_under_a_prefix_serves_chat_streams_and_models(
    upstream: MockUpstream,
) -> None:
    with ServerThread(_mounted(upstream)) as server:
        async with httpx2.AsyncClient(base_url=f"{server.url}/llm") as client:
            whole = await client.post("/v1/chat/completions", json=_CHAT)
            streamed = await client.post("/v1/chat/completions", json={**_CHAT, "stream": True})
            listed = await client.get("/v1/models")
            one = await client.get("/v1/models/group/g")
            hosted = await client.get("/hello")
            parent = await client.get(server.url + "/")
    assert whole.status_code == 200
    assert whole.json()["choices"][0]["message"]["content"] == "hello from ok"
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    for answer in (whole, streamed):  # the route's own path below base_url, never the mount prefix
        assert upstream.record(answer.headers["x-request-id"]).path == "/v1/chat/completions"
    assert listed.status_code == 200 and "group/g" in [model["id"] for model in listed.json()["data"]]
    assert (one.status_code, one.json()["id"]) == (200, "group/g")
    assert hosted.json() == {"hello": "host"}  # the sub-app's own routes still answer
    assert parent.text == "parent"


async def test_a_root_path_from_the_server_is_stripped_before_routes_are_matched(upstream: MockUpstream) -> None:
    # ``uvicorn --root-path /api`` gives every request the prefix in both ``path`` and ``root_path``.
    router = ModelRouter(host_app(), settings=make_settings(upstream.url))  # type: ignore[attr-defined]
    scope = {**chat_scope(), "path": "/api/v1/chat/completions", "root_path": "/api"}
    never = anyio.Event()
    sent, outside = SentMessages(), SentMessages()
    try:
        await router(scope, receive_once(json.dumps({**_CHAT, "model": "mock/ok"}).encode(), never.wait), sent)
        await router({**scope, "path": "/apix/v1/chat/completions"}, receive_once(b"{}", never.wait), outside)
    finally:
        await router.transport.aclose()
    headers = dict(sent[0]["headers"])
    assert sent[0]["status"] == 200
    assert upstream.record(headers[b"x-request-id"].decode()).path == "/v1/chat/completions"
    assert outside[0]["status"] == 404  # not below the root path: the host app's answer


async def test_without_lifespan_the_log_line_is_written_and_what_does_not_run_is_warned_once(
    upstream: MockUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_router")
    health = {"interval": 60, "path": "/health/mounted"}
    app = _mounted(upstream, providers={"probed": {"base_url": f"{upstream.url}/v1", "health": health}})  # type: ignore[attr-defined]
    with ServerThread(app) as server:  # the parent has a lifespan; the mounted router gets none
        async with httpx2.AsyncClient(base_url=f"{server.url}/llm") as client:
            answers = [await client.post("/v1/chat/completions", json=_CHAT) for _ in range(2)]
    for answer in answers:
        [line] = _lines(caplog, answer.headers["x-request-id"])
        assert "status=200 winner=mock/ok" in line
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "lifespan" in r.getMessage()]
    assert len(warnings) == 1
    assert "event sinks _no_sink" in warnings[0] and "health probes of probed" in warnings[0]


async def test_a_server_without_lifespan_still_writes_each_requests_log_line(
    upstream: MockUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_router")
    router = ModelRouter(host_app(), settings=make_settings(upstream.url))  # type: ignore[attr-defined]
    with ServerThread(router, lifespan="off") as server:
        async with httpx2.AsyncClient(base_url=server.url) as client:
            answer = await client.post("/v1/chat/completions", json={**_CHAT, "model": "mock/ok"})
    [line] = _lines(caplog, answer.headers["x-request-id"])
    assert "status=200 winner=mock/ok" in line
    # Nothing but the log line was asked for, so nothing is missing: no warning.
    assert not [r for r in caplog.records if r.levelno == logging.WARNING and "lifespan" in r.getMessage()]
