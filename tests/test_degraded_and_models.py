"""The degraded answer and ``GET /v1/models``, read by the official ``openai`` SDK over real sockets."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from asgi_router import ModelRouter

from .conftest import shared_routers
from .doubles import RecordSink
from .mock_upstream import MockUpstream
from .routing_helpers import chat_body, router_client
from .servers import ServersByTransport

pytestmark = pytest.mark.anyio

_BUSY = "The assistant is busy; please try again in a minute."


@pytest.fixture(scope="module")
def routers(upstream: MockUpstream, refused_url: str) -> Iterator[ServersByTransport[ModelRouter]]:
    with shared_routers(
        upstream,
        refused_url,
        groups={
            "coder": {"members": ["mock/ok", "group/backup"]},
            "backup": {"members": ["mock2/ok", "down/qwen"]},
            "soft": {"members": ["down/a", "mock/status-503"], "degraded": {"content": _BUSY}},
        },
        aliases={"fast": "group/coder", "mini": "mock2/mini"},
        catalog={"mock/priced": {"input_price": 1.0, "output_price": 2.0}},
    ) as served:
        yield served


# --- degraded -----------------------------------------------------------------------------------


async def test_sdk_reads_the_degraded_reply_when_every_candidate_fails(sdk: openai.AsyncOpenAI) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(
        model="group/soft", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.headers["x-router-degraded"] == "1"
    assert raw.headers["x-router-attempts"] == "2"
    assert "x-router-model" not in raw.headers
    completion = raw.parse()
    assert completion.choices[0].message.content == _BUSY
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "group/soft"


async def test_sdk_streams_the_degraded_reply_as_sse(sdk: openai.AsyncOpenAI) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(
        model="group/soft", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert raw.headers["x-router-degraded"] == "1"
    assert raw.headers["content-type"].startswith("text/event-stream")
    stream = raw.parse()
    chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == _BUSY
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_a_group_without_a_canned_reply_still_errors(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        await sdk.chat.completions.create(model="mock/status-503", messages=[{"role": "user", "content": "hi"}])
    assert "x-router-degraded" not in caught.value.response.headers


async def test_degraded_reply_is_recorded_and_never_replaces_a_client_error(upstream: MockUpstream) -> None:
    groups = {
        "soft": {"members": ["mock/status-500"], "degraded": {"content": _BUSY}},
        "wrong": {"members": ["mock/status-422", "mock2/ok"], "degraded": {"content": _BUSY}},
        "huge": {"members": ["mock/ok"], "degraded": {"content": _BUSY}},
    }
    with RecordSink.logged() as records:
        catalog = {"mock/ok": {"context_window": 10}}
        backoff = {"base": 0.005, "cap": 0.01}
        async with router_client(upstream, groups=groups, catalog=catalog, backoff=backoff) as (client, _):
            soft = await client.post("/v1/chat/completions", json=chat_body("group/soft"))
            wrong = await client.post("/v1/chat/completions", json=chat_body("group/wrong"))
            huge = await client.post("/v1/chat/completions", json=chat_body("group/huge", text="x" * 400))
    assert soft.status_code == 200
    record = records.of(soft.headers["x-request-id"])
    assert (record.degraded, record.status) == (True, 200)
    # a one-member group retries in place (``retries = 2``, docs/resilience.md) before degrading
    assert [(e.candidate, e.reason) for e in record.events] == [("mock/status-500", "upstream_5xx")] * 3
    assert (wrong.status_code, "x-router-degraded" in wrong.headers) == (422, False)
    assert (huge.status_code, "x-router-degraded" in huge.headers) == (400, False)


# --- /v1/models ---------------------------------------------------------------------------------


async def test_sdk_lists_groups_aliases_and_direct_models(sdk: openai.AsyncOpenAI) -> None:
    models = [model async for model in sdk.models.list()]
    assert [model.id for model in models] == [
        "group/backup",
        "group/coder",
        "group/soft",
        "fast",
        "mini",
        "down/a",
        "down/qwen",
        "mock/ok",
        "mock/priced",
        "mock/status-503",
        "mock2/mini",
        "mock2/ok",
    ]
    owners = {model.id: model.owned_by for model in models}
    assert owners["group/coder"] == owners["fast"] == "asgi-router"
    assert owners["mock2/ok"] == "mock2"
    assert all(model.object == "model" for model in models)


async def test_sdk_retrieves_one_model_even_with_a_slash_in_its_id(sdk: openai.AsyncOpenAI) -> None:
    model = await sdk.models.retrieve("group/coder")
    assert (model.id, model.owned_by) == ("group/coder", "asgi-router")
    with pytest.raises(openai.NotFoundError) as caught:
        await sdk.models.retrieve("group/nope")
    assert caught.value.code == "model_not_found"


async def test_models_route_can_be_left_to_the_host_app(upstream: MockUpstream) -> None:
    async with router_client(upstream, groups={"g": {"members": ["mock/ok"]}}) as (client, _):
        listed = await client.get("/v1/models")
        head = await client.head("/v1/models")
    async with router_client(upstream, groups={"g": {"members": ["mock/ok"]}}, models_route=None) as (client, _):
        host = await client.get("/v1/models")
    assert listed.json() == {
        "object": "list",
        "data": [
            {"id": "group/g", "object": "model", "created": 0, "owned_by": "asgi-router"},
            {"id": "mock/ok", "object": "model", "created": 0, "owned_by": "mock"},
        ],
    }
    assert (head.status_code, head.content) == (200, b"")
    assert host.status_code == 404  # the host app has no such route
    assert host.json() == {"detail": "Not Found"}


async def test_models_listing_never_calls_an_upstream(upstream: MockUpstream) -> None:
    hits = upstream.counts()
    async with router_client(upstream, groups={"g": {"members": ["mock/ok"]}}) as (client, _):
        response = await client.get("/v1/models")
    assert response.status_code == 200
    assert upstream.counts() == hits
