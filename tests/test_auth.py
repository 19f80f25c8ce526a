"""Inbound auth through the whole router: fails closed, refuses before any upstream or body read."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager, LifespanNotSupported
from pydantic import ValidationError
from starlette.datastructures import Headers

from asgi_router import ConfigError, Forbidden, ModelRouter, RouterSettings

from .conftest import CLIENT_KEY, SentMessages, chat_scope, host_app, make_settings
from .doubles import RecordSink
from .mock_upstream import MockUpstream
from .servers import ServerThread

pytestmark = pytest.mark.anyio

CHAT = {"model": "mock/ok", "messages": [{"role": "user", "content": "hi"}]}


@asynccontextmanager
async def routed(router: ModelRouter) -> AsyncIterator[httpx2.AsyncClient]:
    async with (
        LifespanManager(router) as manager,
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=manager.app), base_url="http://router") as client,
    ):
        yield client


def keyed(upstream: MockUpstream, **overrides: Any) -> RouterSettings:
    return make_settings(upstream.url, api_keys={"alice": CLIENT_KEY}, **overrides)  # type: ignore[attr-defined]


# --- refusing to start ------------------------------------------------------------------------


def test_settings_without_any_auth_option_are_refused_naming_the_three(upstream: MockUpstream) -> None:
    with pytest.raises(ValidationError) as caught:
        make_settings(upstream.url, allow_unauthenticated=False)  # type: ignore[attr-defined]
    message = str(caught.value)
    for option in ("authorize=", "api_keys", "allow_unauthenticated=True"):
        assert option in message


def test_router_from_a_toml_file_without_auth_refuses_to_start_and_logs_why(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "router.toml"
    config.write_text('[providers.local]\nbase_url = "http://127.0.0.1:11434/v1"\n')
    caplog.set_level(logging.ERROR, logger="asgi_router")
    with pytest.raises(ConfigError, match="allow_unauthenticated"):
        ModelRouter(host_app(), config=config)
    # Starlette builds middleware on the first event and an ASGI server may swallow the error
    # there: the router's own logger says why, at ERROR, before the exception leaves.
    [logged] = [r for r in caplog.records if r.name == "asgi_router" and r.levelno == logging.ERROR]
    assert "could not start" in logged.getMessage() and "inbound auth is required" in logged.getMessage()
    config.write_text('allow_unauthenticated = true\n[providers.local]\nbase_url = "http://127.0.0.1:11434/v1"\n')
    assert ModelRouter(host_app(), config=config).settings.allow_unauthenticated


async def test_add_middleware_with_a_broken_config_fails_the_apps_startup(tmp_path: Any) -> None:
    config = tmp_path / "router.toml"
    config.write_text('[providers.local]\nbase_url = "http://127.0.0.1:11434/v1"\n')
    app = host_app()
    app.add_middleware(ModelRouter, config=config)
    with pytest.raises(LifespanNotSupported) as caught:  # asgi-lifespan's word for "startup crashed"
        async with LifespanManager(app):
            pass  # pragma: no cover - startup must fail
    assert isinstance(caught.value.__cause__, ConfigError)
    assert "inbound auth is required" in str(caught.value.__cause__)


def test_allow_unauthenticated_logs_a_warning_at_start_up(
    upstream: MockUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="asgi_router")
    ModelRouter(host_app(), settings=make_settings(upstream.url))  # type: ignore[attr-defined]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "asgi_router"]
    assert len(warnings) == 1
    assert "allow_unauthenticated=True" in warnings[0].getMessage()


def test_api_keys_start_without_a_warning(upstream: MockUpstream, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="asgi_router")
    ModelRouter(host_app(), settings=keyed(upstream))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# --- api_keys through the router -----------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "unauthenticated"),
        ({"authorization": "Bearer not-the-key-0123456789"}, 401, "invalid_api_key"),
        ({"x-api-key": "not-the-key-0123456789"}, 401, "invalid_api_key"),
    ],
    ids=["no-credentials", "wrong-bearer", "wrong-x-api-key"],
)
async def test_refused_request_is_openai_shaped_and_no_upstream_is_contacted(
    upstream: MockUpstream, headers: dict[str, str], status: int, code: str
) -> None:
    hits = upstream.counts()
    async with routed(ModelRouter(host_app(), settings=keyed(upstream))) as client:
        response = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    assert error["type"] == "authentication_error"
    assert error["param"] is None and error["message"]
    assert response.headers["www-authenticate"] == "Bearer"
    assert "x-router-model" not in response.headers
    assert upstream.counts() == hits


@pytest.mark.parametrize(
    "headers", [{"authorization": f"Bearer {CLIENT_KEY}"}, {"x-api-key": CLIENT_KEY}], ids=["bearer", "x-api-key"]
)
async def test_configured_key_is_served_and_never_forwarded_upstream(
    upstream: MockUpstream, headers: dict[str, str]
) -> None:
    async with routed(ModelRouter(host_app(), settings=keyed(upstream))) as client:
        response = await client.post("/v1/chat/completions", json={**CHAT, "model": "mock/echo"}, headers=headers)
    assert response.status_code == 200
    assert CLIENT_KEY not in json.dumps(response.json()["headers"])


async def test_refusal_happens_before_the_request_body_is_read(upstream: MockUpstream) -> None:
    router = ModelRouter(host_app(), settings=keyed(upstream))
    received: list[str] = []
    sent = SentMessages()

    async def receive() -> dict[str, Any]:
        received.append("receive")
        return {"type": "http.request", "body": json.dumps(CHAT).encode(), "more_body": False}

    scope = chat_scope()
    await router(scope, receive, sent)  # type: ignore[arg-type]
    assert sent[0]["status"] == 401
    assert received == []


async def test_principal_reaches_the_request_record_and_every_attempt_event(
    upstream: MockUpstream, refused_url: str
) -> None:
    settings = make_settings(
        upstream.url,  # type: ignore[attr-defined]
        refused_url,
        api_keys={"alice": CLIENT_KEY},
        groups={"g": {"members": ["down/x", "mock/ok"]}},
    )
    with RecordSink.logged() as records:
        async with routed(ModelRouter(host_app(), settings=settings)) as client:
            response = await client.post(
                "/v1/chat/completions", json={**CHAT, "model": "group/g"}, headers={"x-api-key": CLIENT_KEY}
            )
    assert response.status_code == 200
    [record] = records
    assert record.principal == "alice"
    assert [(e.outcome, e.principal) for e in record.events] == [("failed", "alice"), ("served", "alice")]


# --- authorize= through the router ---------------------------------------------------------


async def test_async_authorize_callable_guards_the_router_and_names_the_principal(
    upstream: MockUpstream,
) -> None:
    calls: list[str | None] = []

    async def authorize(scope: Any, headers: Headers) -> object:
        calls.append(headers.get("x-session"))
        return {"user": "u-1"} if headers.get("x-session") == "valid" else False

    settings = make_settings(upstream.url, authorize=authorize)  # type: ignore[attr-defined]
    with RecordSink.logged() as records:
        async with routed(ModelRouter(host_app(), settings=settings)) as client:
            refused = await client.post("/v1/chat/completions", json=CHAT)
            served = await client.post("/v1/chat/completions", json=CHAT, headers={"x-session": "valid"})
            host = await client.get("/hello")
    assert refused.status_code == 401
    assert served.status_code == 200
    assert host.status_code == 200  # the host app's own routes are not the router's to guard
    assert calls == [None, "valid"]
    assert [r.principal for r in records] == [None, {"user": "u-1"}]


async def test_add_middleware_passes_authorize_through_to_the_settings_it_builds(tmp_path: Any) -> None:
    config = tmp_path / "router.toml"
    config.write_text('[providers.local]\nbase_url = "http://127.0.0.1:11434/v1"\n')
    app = host_app()
    app.add_middleware(ModelRouter, config=config, authorize=lambda scope, headers: False)
    async with routed(app) as client:  # type: ignore[arg-type]
        response = await client.post("/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer x"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


async def test_authorize_that_raises_fails_closed_with_a_500_and_no_traceback(
    upstream: MockUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    def authorize(scope: Any, headers: Headers) -> bool:
        raise RuntimeError("session store is down")

    caplog.set_level(logging.ERROR, logger="asgi_router")
    hits = upstream.counts()
    settings = make_settings(upstream.url, authorize=authorize)  # type: ignore[attr-defined]
    async with routed(ModelRouter(host_app(), settings=settings)) as client:
        response = await client.post("/v1/chat/completions", json=CHAT)
    assert response.status_code == 500
    assert response.json()["error"]["code"] == "router_error"
    assert "session store" not in response.text and "Traceback" not in response.text
    logged = [r.exc_info[1] for r in caplog.records if r.exc_info]
    assert [type(exc) for exc in logged] == [RuntimeError]  # the operator sees why, the client does not
    assert upstream.counts() == hits


@pytest.mark.parametrize("path", ["/v1/models", "/v1/models/mock/ok"])
async def test_authorize_that_raises_on_the_models_listing_gets_the_same_500_and_the_routers_log(
    upstream: MockUpstream, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    def authorize(scope: Any, headers: Headers) -> bool:
        raise RuntimeError("session store is down")

    caplog.set_level(logging.ERROR)
    settings = make_settings(upstream.url, authorize=authorize)  # type: ignore[attr-defined]
    with ServerThread(ModelRouter(host_app(), settings=settings)) as server:
        async with httpx2.AsyncClient(base_url=server.url) as client:
            response = await client.get(path)
    assert response.status_code == 500
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert (error["code"], error["type"], error["param"]) == ("router_error", "server_error", None)
    assert "session store" not in response.text and "Traceback" not in response.text
    # The traceback is the router's to log (its logger scrubs keys), not the server's.
    logged = [(r.name, type(r.exc_info[1])) for r in caplog.records if r.exc_info]
    assert logged == [("asgi_router", RuntimeError)]


# --- the official SDK sees the right exception ------------------------------------------------


async def test_openai_sdk_raises_authentication_error_for_a_missing_or_wrong_key(upstream: MockUpstream) -> None:
    with ServerThread(ModelRouter(host_app(), settings=keyed(upstream))) as server:
        base = f"{server.url}/v1"
        messages: Any = CHAT["messages"]
        async with openai.AsyncOpenAI(base_url=base, api_key="sk-wrong-0123456789", max_retries=0) as wrong:
            with pytest.raises(openai.AuthenticationError) as caught:
                await wrong.chat.completions.create(model="mock/ok", messages=messages)
            assert caught.value.code == "invalid_api_key"
            with pytest.raises(openai.AuthenticationError):
                await wrong.models.list()
        async with openai.AsyncOpenAI(base_url=base, api_key=CLIENT_KEY, max_retries=0) as right:
            completion = await right.chat.completions.create(model="mock/ok", messages=messages)
        async with openai.AsyncOpenAI(
            base_url=base, api_key="unused", max_retries=0, default_headers={"authorization": ""}
        ) as anonymous:
            with pytest.raises(openai.AuthenticationError) as caught:
                await anonymous.chat.completions.create(model="mock/ok", messages=messages)
            assert caught.value.code == "unauthenticated"
    assert completion.choices[0].message.content == "hello from ok"


async def test_openai_sdk_raises_permission_denied_for_a_principal_authorize_refuses(upstream: MockUpstream) -> None:
    def authorize(scope: Any, headers: Headers) -> object:
        token = headers.get("authorization", "")
        if token == "Bearer batch-key-0123456789":
            raise Forbidden("the batch key may not use chat completions")
        return "web" if token == "Bearer web-key-0123456789" else None

    settings = make_settings(upstream.url, authorize=authorize)  # type: ignore[attr-defined]
    with ServerThread(ModelRouter(host_app(), settings=settings)) as server:
        base = f"{server.url}/v1"
        messages: Any = CHAT["messages"]
        async with openai.AsyncOpenAI(base_url=base, api_key="batch-key-0123456789", max_retries=0) as batch:
            with pytest.raises(openai.PermissionDeniedError) as refused:
                await batch.chat.completions.create(model="mock/ok", messages=messages)
        async with openai.AsyncOpenAI(base_url=base, api_key="stranger-key-0123456789", max_retries=0) as stranger:
            with pytest.raises(openai.AuthenticationError):
                await stranger.chat.completions.create(model="mock/ok", messages=messages)
        async with openai.AsyncOpenAI(base_url=base, api_key="web-key-0123456789", max_retries=0) as web:
            completion = await web.chat.completions.create(model="mock/ok", messages=messages)
    assert refused.value.code == "permission_denied"
    assert "may not use chat completions" in refused.value.message
    assert completion.choices[0].message.content == "hello from ok"


async def test_models_listing_needs_the_same_credentials_as_completions(upstream: MockUpstream) -> None:
    async with routed(ModelRouter(host_app(), settings=keyed(upstream))) as client:
        anonymous = await client.get("/v1/models")
        wrong = await client.get("/v1/models", headers={"authorization": "Bearer not-the-right-key-0000"})
        admitted = await client.get("/v1/models", headers={"authorization": f"Bearer {CLIENT_KEY}"})
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "unauthenticated"
    assert wrong.status_code == 401
    assert wrong.json()["error"]["code"] == "invalid_api_key"
    assert admitted.status_code == 200
    assert admitted.json()["object"] == "list"
