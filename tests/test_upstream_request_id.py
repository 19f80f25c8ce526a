"""The provider's own request id reaches the client as ``x-upstream-request-id``, over real sockets.

The router's ``x-request-id`` is the client's (or a fresh one), so the provider's id, which is
what its support asks for, is sent under its own name: the winner's, or the refusing candidate's
on a pass-through.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx2
import pytest

from asgi_router import ModelRouter

from .conftest import host_app, make_settings
from .mock_upstream import MockUpstream
from .servers import ServerThread

pytestmark = pytest.mark.anyio


@pytest.fixture
def server(upstream: MockUpstream, refused_url: str) -> Iterator[ServerThread]:
    settings = make_settings(
        upstream.url,  # type: ignore[attr-defined]
        refused_url,
        groups={
            "ids": {"members": ["mock/status-503-rid1", "mock2/rid-winner"]},
            "refused": {"members": ["mock/status-400-ridrefuser", "mock2/rid-never"]},
        },
    )
    with ServerThread(ModelRouter(host_app(), settings=settings)) as running:
        yield running


@pytest.fixture
async def client(server: ServerThread) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(base_url=server.url, timeout=10) as http:
        yield http


async def _chat(client: httpx2.AsyncClient, model: str, stream: bool) -> httpx2.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return await client.post("/v1/chat/completions", json=body, headers={"x-request-id": "client-id-1"})


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_the_winners_own_request_id_is_sent_as_x_upstream_request_id(
    client: httpx2.AsyncClient, stream: bool
) -> None:
    response = await _chat(client, "group/ids", stream)
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "mock2/rid-winner"
    assert response.headers.get_list("x-upstream-request-id") == ["req_winner"]  # not the failed one's
    assert response.headers.get_list("x-request-id") == ["client-id-1"]  # the router's stays the client's


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_passed_through_refusal_carries_the_refusing_providers_request_id(
    client: httpx2.AsyncClient, stream: bool
) -> None:
    response = await _chat(client, "group/refused", stream)
    assert response.status_code == 400
    assert response.headers["x-router-model"] == "mock/status-400-ridrefuser"
    assert response.headers.get_list("x-upstream-request-id") == ["req_refuser"]
    assert response.headers.get_list("x-request-id") == ["client-id-1"]


async def test_anthropics_request_id_is_taken_when_there_is_no_x_request_id(client: httpx2.AsyncClient) -> None:
    response = await _chat(client, "mock/anthrid-abc", False)
    assert response.headers.get_list("x-upstream-request-id") == ["req_abc"]


@pytest.mark.parametrize("model", ["mock/badrid", "mock/ok"], ids=["not-a-token", "none-sent"])
async def test_no_x_upstream_request_id_unless_the_provider_sent_a_sane_one(
    client: httpx2.AsyncClient, model: str
) -> None:
    response = await _chat(client, model, False)
    assert response.status_code == 200
    assert "x-upstream-request-id" not in response.headers
