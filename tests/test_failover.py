"""The attempt loop against a real loopback upstream: every row of the failover table (each
failure's reason, and whether the loop moves on), and the answer when no candidate serves."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from asgi_lifespan import LifespanManager

from asgi_router import ModelRouter

from .conftest import API_KEY, host_app, make_settings
from .doubles import RecordSink, on_fake_clock
from .fakes import Answer, ScriptedTransport
from .mock_upstream import MockUpstream
from .resilient import loop_now, scripted_router

pytestmark = pytest.mark.anyio


async def chat(client: httpx2.AsyncClient, model: str, **body: Any) -> httpx2.Response:
    return await client.post(
        "/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "hi"}], **body}
    )


@asynccontextmanager
async def routed(
    upstream: MockUpstream, refused_url: str | None, **overrides: Any
) -> AsyncIterator[httpx2.AsyncClient]:
    """An in-process client for a host app with the router mounted on ``overrides`` settings."""
    app = host_app()
    app.add_middleware(ModelRouter, settings=make_settings(upstream.url, refused_url, **overrides))  # type: ignore[attr-defined]
    async with (
        LifespanManager(app) as manager,
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=manager.app), base_url="http://router") as client,
    ):
        yield client


FAILOVER_STATUSES = [
    ("mock/status-429", "rate_limited", 429),
    ("mock/status-500", "upstream_5xx", 500),
    ("mock/status-503", "upstream_5xx", 503),
    ("mock/status-401", "auth_error", 401),
    ("mock/status-403", "auth_error", 403),
    ("mock/status-402", "billing", 402),
    ("mock/status-404", "model_not_found", 404),
    ("mock/status-408", "timeout", 408),
]
"""Answers the upstream gives: the same whichever transport carried them."""

FAILOVER_TRANSPORT_ERRORS = [
    ("down/anything", "connect_error", None),
    ("mock/hang", "timeout", None),
    ("mock/silent", "timeout", 200),
    ("mock/empty", "stream_interrupted", 200),
]
"""Failures each transport sees in its own way (refused connection, no headers, no body byte,
an empty body) and must report as the same reason."""


_SAY_NOTHING = ("mock/hang", "mock/silent")
_QUICK_TIMEOUTS = {"connect": 1, "first_byte": 0.2, "idle": 0.2, "total": 10}
"""For members that fail by saying nothing: their provider times out in 0.2 s, so that the test
does not wait a second for each (every other provider keeps the usual 1 s)."""


async def _assert_fails_over_to_the_next_member(
    upstream: MockUpstream, refused_url: str, first: str, reason: str, status: int | None, stream: bool
) -> None:
    providers: dict[str, Any] = {}
    if first in _SAY_NOTHING:
        providers["mock"] = {"base_url": f"{upstream.url}/v1", "api_key": API_KEY, "timeouts": _QUICK_TIMEOUTS}  # type: ignore[attr-defined]
    groups = {"g": {"members": [first, "mock2/ok"]}}
    with RecordSink.logged() as records:
        async with routed(upstream, refused_url, providers=providers, groups=groups) as client:
            response = await chat(client, "group/g", stream=stream)
    events = records.of(response.headers["x-request-id"]).events
    assert [(e.candidate, e.outcome, e.reason, e.status) for e in events] == [
        (first, "failed", reason, status),
        ("mock2/ok", "served", "served", 200),
    ]
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "mock2/ok"
    assert response.headers["x-router-attempts"] == "2"
    assert '"model": "ok"' in response.text or '"model":"ok"' in response.text
    request_id = response.headers["x-request-id"]
    # each candidate got its own model id (target guard); a refused connection never arrives
    expected = [first.split("/", 1)[1], "ok"] if not first.startswith("down/") else ["ok"]
    assert upstream.attempts(request_id) == expected


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("first", "reason", "status"), FAILOVER_STATUSES)
async def test_retryable_status_fails_over_to_next_member(
    upstream: MockUpstream, refused_url: str, first: str, reason: str, status: int | None, stream: bool
) -> None:
    await _assert_fails_over_to_the_next_member(upstream, refused_url, first, reason, status, stream)


@pytest.mark.both_transports
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize(("first", "reason", "status"), FAILOVER_TRANSPORT_ERRORS)
async def test_connection_failure_or_timeout_fails_over_to_next_member(
    upstream: MockUpstream, refused_url: str, first: str, reason: str, status: int | None, stream: bool
) -> None:
    await _assert_fails_over_to_the_next_member(upstream, refused_url, first, reason, status, stream)


@pytest.mark.parametrize("status", [400, 409, 413, 422])
async def test_client_error_stops_and_passes_status_and_body_through(upstream: MockUpstream, status: int) -> None:
    async with routed(upstream, None, groups={"g": {"members": [f"mock/status-{status}", "mock2/ok"]}}) as http:
        response = await chat(http, "group/g")
    assert response.status_code == status
    assert response.json() == {"error": {"message": f"mock says {status}", "type": "mock_error", "code": str(status)}}
    assert response.headers["x-router-model"] == f"mock/status-{status}"
    assert response.headers["x-router-attempts"] == "1"
    assert upstream.attempts(response.headers["x-request-id"]) == [f"status-{status}"]  # nothing else asked
    assert "mock2" not in response.text


async def test_all_rate_limited_is_429_with_smallest_retry_after(upstream: MockUpstream, refused_url: str) -> None:
    async with routed(
        upstream, refused_url, groups={"g": {"members": ["mock/status-429-ra7", "mock2/status-429-ra3"]}}
    ) as client:
        response = await chat(client, "group/g")
    assert response.status_code == 429
    assert response.headers["retry-after"] == "3"
    error = response.json()["error"]
    assert error["code"] == "rate_limit_exceeded"
    assert error["type"] == "rate_limit_error"
    assert error["param"] is None
    assert error["message"].splitlines() == [
        "mock/status-429-ra7: rate_limited (429)",
        "mock2/status-429-ra3: rate_limited (429)",
    ]
    assert error["attempts"] == [
        {"candidate": "mock/status-429-ra7", "reason": "rate_limited", "status": 429},
        {"candidate": "mock2/status-429-ra3", "reason": "rate_limited", "status": 429},
    ]


@pytest.mark.both_transports
async def test_all_timed_out_is_504_with_a_timeout_for_each_candidate(upstream: MockUpstream, refused_url: str) -> None:
    timeouts = {"connect": 1, "first_byte": 0.3, "idle": 1, "total": 5}
    async with routed(
        upstream, refused_url, timeouts=timeouts, groups={"g": {"members": ["mock/hang", "mock2/silent"]}}
    ) as client:
        response = await chat(client, "group/g", stream=True)
    assert response.status_code == 504
    error = response.json()["error"]
    assert error["code"] == "upstream_timeout"
    assert [a["reason"] for a in error["attempts"]] == ["timeout", "timeout"]


@on_fake_clock
async def test_all_timed_out_takes_one_first_byte_timeout_per_candidate(upstream: MockUpstream) -> None:
    transport = ScriptedTransport(Answer(hang=True), Answer(stall=True))
    timeouts = {"connect": 1, "first_byte": 0.3, "idle": 1, "total": 5}
    groups = {"g": {"members": ["mock/hang", "mock2/silent"]}}
    async with scripted_router(upstream, transport, timeouts=timeouts, groups=groups) as client:
        started = loop_now()
        response = await chat(client, "group/g", stream=True)
        elapsed = loop_now() - started
    assert response.status_code == 504
    assert [a["reason"] for a in response.json()["error"]["attempts"]] == ["timeout", "timeout"]
    assert elapsed == pytest.approx(0.6, abs=0.01)  # two first-byte timeouts of 0.3 s, not the 5 s total


async def test_mixed_failures_are_502_with_one_line_per_candidate(upstream: MockUpstream, refused_url: str) -> None:
    async with routed(
        upstream, refused_url, groups={"g": {"members": ["down/m", "mock/status-503", "mock2/status-429"]}}
    ) as client:
        response = await chat(client, "group/g")
    assert response.status_code == 502
    assert response.headers["x-router-attempts"] == "3"
    assert "x-router-model" not in response.headers
    error = response.json()["error"]
    assert error["code"] == "upstream_unavailable"
    assert error["message"].splitlines() == [
        "down/m: connect_error",
        "mock/status-503: upstream_5xx (503)",
        "mock2/status-429: rate_limited (429)",
    ]
    assert API_KEY not in response.text


async def test_failover_on_can_make_a_group_stop_on_a_reason(upstream: MockUpstream, refused_url: str) -> None:
    async with routed(
        upstream,
        refused_url,
        groups={"g": {"members": ["mock/status-404", "mock2/ok"], "failover_on": ["upstream_5xx"]}},
    ) as client:
        response = await chat(client, "group/g")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "mock says 404"


async def test_rotate_group_starts_at_the_next_member_each_request(upstream: MockUpstream, refused_url: str) -> None:
    async with routed(
        upstream, refused_url, groups={"r": {"strategy": "rotate", "members": ["mock/ok", "mock2/ok"]}}
    ) as client:
        winners = [(await chat(client, "group/r")).headers["x-router-model"] for _ in range(4)]
    assert winners == ["mock/ok", "mock2/ok", "mock/ok", "mock2/ok"]


async def test_direct_ref_and_multi_segment_model_id_reach_the_upstream_whole(
    client: httpx2.AsyncClient, upstream: MockUpstream
) -> None:
    response = await chat(client, "mock/echo")
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "mock/echo"
    assert response.headers["x-router-attempts"] == "1"
    response = await chat(client, "mock/status-404/org/model")
    assert response.status_code == 502  # a plan of one that failed: not a pass-through
    assert upstream.record(response.headers["x-request-id"]).model == "status-404/org/model"


async def test_alias_resolves_to_its_target(upstream: MockUpstream, refused_url: str) -> None:
    async with routed(
        upstream, refused_url, groups={"g": {"members": ["down/x", "mock/ok"]}}, aliases={"fast": "group/g"}
    ) as client:
        response = await chat(client, "fast")
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "mock/ok"


async def test_provider_without_its_key_is_skipped_not_failed_and_the_error_names_the_variable(
    upstream: MockUpstream, refused_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ASGI_ROUTER_TEST_MISSING_KEY", raising=False)
    async with routed(
        upstream,
        refused_url,
        providers={"keyless": {"base_url": f"{upstream.url}/v1", "api_key_env": "ASGI_ROUTER_TEST_MISSING_KEY"}},  # type: ignore[attr-defined]
        groups={"g": {"members": ["keyless/ok", "mock/ok"]}},
    ) as client:
        response = await chat(client, "group/g")
        only = await chat(client, "keyless/ok")
    assert response.status_code == 200
    assert response.headers["x-router-attempts"] == "1"  # the skip is not an attempt
    assert only.status_code == 502
    error = only.json()["error"]
    assert error["message"] == "keyless/ok: provider_not_configured (ASGI_ROUTER_TEST_MISSING_KEY is not set)"
    assert error["attempts"] == [
        {
            "candidate": "keyless/ok",
            "reason": "provider_not_configured",
            "status": None,
            "detail": "ASGI_ROUTER_TEST_MISSING_KEY is not set",
        }
    ]


def test_provider_without_its_key_is_named_in_one_warning_at_start_up(
    upstream: MockUpstream, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("ASGI_ROUTER_TEST_MISSING_KEY", raising=False)
    monkeypatch.delenv("ASGI_ROUTER_TEST_OTHER_MISSING_KEY", raising=False)
    caplog.set_level(logging.WARNING, logger="asgi_router")
    settings = make_settings(
        upstream.url,  # type: ignore[attr-defined]
        providers={
            "keyless": {"base_url": f"{upstream.url}/v1", "api_key_env": "ASGI_ROUTER_TEST_MISSING_KEY"},  # type: ignore[attr-defined]
            "other": {"base_url": f"{upstream.url}/v1", "api_key_env": "ASGI_ROUTER_TEST_OTHER_MISSING_KEY"},  # type: ignore[attr-defined]
        },
        groups={"g": {"members": ["keyless/a", "keyless/b", "other/c", "mock/ok"]}},
    )
    ModelRouter(host_app(), settings=settings)
    named = [
        r.getMessage()
        for r in caplog.records
        if r.name == "asgi_router" and r.levelno == logging.WARNING and "api_key_env" in r.getMessage()
    ]
    assert len(named) == 2  # once per provider, not per model or request
    assert "'keyless'" in named[0] and "ASGI_ROUTER_TEST_MISSING_KEY is not set" in named[0]
    assert "'other'" in named[1] and "ASGI_ROUTER_TEST_OTHER_MISSING_KEY is not set" in named[1]


@pytest.mark.both_transports
async def test_non_streaming_body_over_the_response_cap_fails_over(upstream: MockUpstream, refused_url: str) -> None:
    async with routed(
        upstream, refused_url, max_response_bytes=64 * 1024, groups={"g": {"members": ["mock/big-256", "mock2/big-16"]}}
    ) as client:
        response = await chat(client, "group/g")
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "mock2/big-16"
    assert len(response.json()["choices"][0]["message"]["content"]) == 16 * 1024


@pytest.mark.both_transports
async def test_a_small_body_over_the_response_cap_that_arrives_at_once_fails_over_too(
    upstream: MockUpstream, refused_url: str
) -> None:
    # A ~2 KiB body comes with its headers: the attempt sees it whole without another read.
    async with routed(
        upstream, refused_url, max_response_bytes=1024, groups={"g": {"members": ["mock/big-2", "mock2/ok"]}}
    ) as client:
        response = await chat(client, "group/g")
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "mock2/ok"
    assert response.headers["x-router-attempts"] == "2"


async def test_failover_on_without_a_transport_reason_stops_on_that_failure(
    upstream: MockUpstream, refused_url: str
) -> None:
    async with routed(
        upstream,
        refused_url,
        groups={"g": {"members": ["down/x", "mock2/ok"], "failover_on": ["upstream_5xx"]}},
    ) as client:
        response = await chat(client, "group/g")
    assert response.status_code == 502
    assert response.headers["x-router-attempts"] == "1"
    assert [a["reason"] for a in response.json()["error"]["attempts"]] == ["connect_error"]


async def test_insufficient_quota_429_is_billing_not_retried_and_fails_over(
    upstream: MockUpstream, refused_url: str
) -> None:
    async with routed(upstream, refused_url, groups={"g": {"members": ["mock/quota", "mock2/ok"]}}) as client:
        failed_over = await chat(client, "group/g")
        alone = await chat(client, "mock/quota")  # a plan of one: retried only for retryable reasons
    assert failed_over.status_code == 200
    assert failed_over.headers["x-router-model"] == "mock2/ok"
    assert upstream.attempts(failed_over.headers["x-request-id"]) == ["quota", "ok"]
    assert alone.status_code == 502  # not a 429: waiting would not refill the account
    assert [a["reason"] for a in alone.json()["error"]["attempts"]] == ["billing"]
    assert upstream.attempts(alone.headers["x-request-id"]) == ["quota"]


async def test_429_whose_body_hint_has_a_tab_before_its_unit_fails_over(
    upstream: MockUpstream, refused_url: str
) -> None:
    async with routed(upstream, refused_url, groups={"g": {"members": ["mock/tabhint", "mock2/ok"]}}) as client:
        response = await chat(client, "group/g")
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "mock2/ok"
    assert upstream.attempts(response.headers["x-request-id"]) == ["tabhint", "ok"]


@pytest.mark.parametrize("model", ["mock/status-429", "mock/status-503", "mock/ctx-exceeded"])
async def test_a_failure_body_the_router_cannot_read_still_fails_over_by_its_status(
    upstream: MockUpstream,
    refused_url: str,
    model: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("a parser bug")

    # Whatever reads a failure's body and headers may have a bug: the status alone still decides.
    monkeypatch.setattr("asgi_router.attempts.call.retry_hint", broken)
    monkeypatch.setattr("asgi_router.attempts.call.refine_rate_limited", broken)
    monkeypatch.setattr("asgi_router.attempts.call.refine_client_error", broken)
    async with routed(upstream, refused_url, groups={"g": {"members": [model, "mock2/ok"]}}) as client:
        response = await chat(client, "group/g")
    if model == "mock/ctx-exceeded":  # unread, a 400 is the request's fault: passed through, not a 502
        assert (response.status_code, response.headers["x-router-model"]) == (400, model)
    else:
        assert (response.status_code, response.headers["x-router-model"]) == (200, "mock2/ok")
    assert "a parser bug" in caplog.text
