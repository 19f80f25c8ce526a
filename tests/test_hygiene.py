"""Header and secret hygiene, and bad input: OpenAI-shaped errors with the right status."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from asgi_lifespan import LifespanManager

from asgi_router import ModelRouter, RouterSettings

from .conftest import API_KEY, host_app
from .fakes import FakeTransport
from .mock_upstream import MockUpstream
from .servers import ServerThread

pytestmark = pytest.mark.anyio


@pytest.mark.both_transports
async def test_client_credentials_and_hop_by_hop_headers_never_reach_the_upstream(
    client: httpx2.AsyncClient,
) -> None:
    response = await client.post(
        "/v1/chat/completions",
        json={"model": "mock/echo", "messages": []},
        headers={
            "authorization": "Bearer client-own-key",
            "cookie": "session=abc",
            "x-api-key": "client-x-api-key",
            "proxy-authorization": "Basic Zm9vOmJhcg==",
            "x-custom": "not-forwarded",
            "te": "trailers",
            "user-agent": "my-agent/1.0",
            "accept": "application/json",
            "x-request-id": "req-abc_123",
        },
    )
    seen = response.json()["headers"]
    assert seen["authorization"] == f"Bearer {API_KEY}"
    for name in ("cookie", "x-api-key", "proxy-authorization", "x-custom", "te"):
        assert name not in seen
    assert seen["user-agent"] == "my-agent/1.0"
    assert seen["accept"] == "application/json"
    assert seen["accept-encoding"] == "identity"
    assert seen["x-request-id"] == "req-abc_123"
    assert response.headers["x-request-id"] == "req-abc_123"
    assert "client-own-key" not in response.text


@pytest.mark.both_transports
async def test_upstream_cookies_and_hop_by_hop_headers_are_not_relayed(client: httpx2.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json={"model": "mock/headers", "messages": []})
    assert response.status_code == 200
    assert response.headers["x-upstream"] == "kept"
    assert "set-cookie" not in response.headers
    assert "keep-alive" not in response.headers
    assert response.headers["content-length"] == str(len(response.content))


async def test_unsafe_request_id_is_replaced_not_echoed(client: httpx2.AsyncClient) -> None:
    response = await client.post(
        "/v1/chat/completions", json={"model": "mock/ok", "messages": []}, headers={"x-request-id": "a b<script>"}
    )
    assert response.headers["x-request-id"] != "a b<script>"
    assert len(response.headers["x-request-id"]) == 32


BAD_INPUT = [
    (b"{not json", 400, "invalid_json"),
    (b"[1, 2]", 400, "invalid_request"),
    (b'{"model": NaN}', 400, "invalid_json"),
    (b'{"messages": []}', 400, "missing_model"),
    (b'{"model": 42}', 400, "invalid_model_reference"),
    (b'{"model": "gpt-4o"}', 400, "invalid_model_reference"),
    (b'{"model": "group/"}', 400, "invalid_model_reference"),
    (b'{"model": "mock/"}', 400, "invalid_model_reference"),
    (b'{"model": "mock/a\\r\\nx-evil: 1"}', 400, "invalid_model_reference"),
    (b'{"model": "group/unknown"}', 404, "model_not_found"),
    (b'{"model": "unknown/gpt-4o"}', 404, "model_not_found"),
    (b"\xff\xfe", 400, "invalid_json"),
]


@pytest.mark.parametrize(("content", "status", "code"), BAD_INPUT)
async def test_bad_input_gets_an_openai_shaped_error_and_no_upstream_call(
    client: httpx2.AsyncClient, upstream: MockUpstream, content: bytes, status: int, code: str
) -> None:
    hits = upstream.counts()
    response = await client.post("/v1/chat/completions", content=content, headers={"content-type": "application/json"})
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"
    assert error["param"] is None
    assert isinstance(error["message"], str) and error["message"]
    assert "\r" not in error["message"] and "x-evil" not in response.headers
    assert upstream.counts() == hits


async def test_bare_name_error_says_the_two_legal_spellings(client: httpx2.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json={"model": "gpt-4o"})
    message = response.json()["error"]["message"]
    assert "provider/model-id" in message and "group/<id>" in message


async def test_body_over_the_limit_is_413_by_content_length_and_by_stream(
    settings: RouterSettings, upstream: MockUpstream
) -> None:
    small = settings.model_copy(update={"max_body_bytes": 1024})
    hits = upstream.counts()
    with ServerThread(ModelRouter(host_app(), settings=small)) as server:
        async with httpx2.AsyncClient(base_url=server.url) as client:
            declared = await client.post("/v1/chat/completions", json={"model": "mock/ok", "pad": "x" * 4096})

            async def chunked() -> AsyncIterator[bytes]:
                yield b'{"model": "mock/ok", "pad": "'
                for _ in range(64):
                    yield b"x" * 256
                yield b'"}'

            streamed = await client.post(
                "/v1/chat/completions", content=chunked(), headers={"content-type": "application/json"}
            )
    for response in (declared, streamed):
        assert response.status_code == 413
        assert response.json()["error"]["code"] == "request_too_large"
    assert upstream.counts() == hits


async def test_unexpected_transport_failure_is_not_retried_and_does_not_crash(settings: RouterSettings) -> None:
    class Exploding(FakeTransport):
        calls = 0

        async def send(self, *args: Any) -> Any:
            Exploding.calls += 1
            raise ValueError("a bug, not a flaky upstream")

    grouped = settings.model_copy(deep=True)
    router = ModelRouter(
        host_app(),
        settings=RouterSettings(
            providers=grouped.providers, groups={"g": {"members": ["mock/ok", "mock2/ok"]}}, allow_unauthenticated=True
        ),
        transport=Exploding(),
    )
    async with (
        LifespanManager(router),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router), base_url="http://r") as client,
    ):
        response = await client.post("/v1/chat/completions", json={"model": "group/g"})
        still_up = await client.get("/hello")
    assert response.status_code == 500  # the router's own failure, not the upstream's
    assert response.json()["error"]["code"] == "router_error"
    assert Exploding.calls == 1
    assert still_up.status_code == 200


@pytest.mark.both_transports
async def test_no_api_key_in_any_log_line_or_response(
    settings: RouterSettings, caplog: pytest.LogCaptureFixture, refused_url: str
) -> None:
    caplog.set_level(logging.DEBUG)
    grouped = RouterSettings(
        providers=settings.providers,
        groups={"g": {"members": ["down/x", "mock/status-401", "mock/break-1", "mock2/ok"]}},
        allow_unauthenticated=True,
    )
    bodies: list[str] = []
    with ServerThread(ModelRouter(host_app(), settings=grouped)) as server:
        async with httpx2.AsyncClient(base_url=server.url) as client:
            for model, stream in [("group/g", False), ("group/g", True), ("mock/break-1", True), ("x/y", False)]:
                response = await client.post("/v1/chat/completions", json={"model": model, "stream": stream})
                bodies.append(response.text + str(response.headers))
    texts = bodies + [record.getMessage() + str(record.exc_info) for record in caplog.records]
    assert any("request_id=" in record.getMessage() for record in caplog.records)  # the logs were captured
    for text in texts:
        assert API_KEY not in text
        assert API_KEY[3:12] not in text


@pytest.mark.both_transports
async def test_upstream_cannot_forge_router_headers(client: httpx2.AsyncClient) -> None:
    response = await client.post("/v1/chat/completions", json={"model": "mock/headers", "messages": []})
    assert response.headers.get_list("x-router-route") == ["default"]
    assert "x-router-degraded" not in response.headers
    assert response.headers.get_list("x-router-model") == ["mock/headers"]
