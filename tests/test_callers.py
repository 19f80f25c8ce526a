"""Caps per caller and per session, at the client's boundary: real clients (the ``openai`` SDK and
httpx) over loopback to a router whose upstream is the kit's fake, which reports usage.

Each test builds its own router (its tallies start from nothing); the fake's ``usage-<n>``
models report ``n`` prompt tokens and 3 completion tokens, so a test spends tokens exactly.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any, cast

import anyio
import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager
from starlette.datastructures import Headers
from starlette.types import Scope

from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import FakeUpstream, reply

from .conftest import host_app, make_settings
from .metrics_helpers import Scrape
from .mock_upstream import MockUpstream
from .servers import ServerThread
from .waiting import eventually

TEAM_A = "team-a-key-0123456789abcdef"
TEAM_B = "team-b-key-0123456789abcdef"
TEAM_C = "team-c-key-0123456789abcdef"
KEYS = {"team-a": TEAM_A, "team-b": TEAM_B, "team-c": TEAM_C}


def _settings(upstream: MockUpstream, **overrides: Any) -> RouterSettings:
    overrides.setdefault("api_keys", KEYS)
    groups = {
        "main": {"members": ["mock/usage-100"]},
        "cheap": {"members": ["mock2/usage-10"]},
    }
    return make_settings(upstream.url, groups=groups, **overrides)  # type: ignore[attr-defined]


@pytest.fixture
def serve() -> Iterator[Any]:
    """Serve a router built from settings on loopback; stopped at the test's end."""
    servers: list[ServerThread] = []

    def start(settings: RouterSettings) -> ServerThread:
        server = ServerThread(ModelRouter(host_app(), settings=settings)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _ask(server: ServerThread, key: str | None, model: str = "group/main", **headers: str) -> httpx2.Response:
    sent = {**({"authorization": f"Bearer {key}"} if key is not None else {}), **headers}
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return httpx2.post(f"{server.url}/v1/chat/completions", json=body, headers=sent, timeout=10)


def test_a_named_key_past_tokens_per_day_is_downgraded_then_refused_at_hard_limit_while_another_key_is_not(
    upstream: MockUpstream, serve: Any
) -> None:
    caps = {"tokens_per_day": 250, "downgrade_to": "group/cheap", "hard_limit": 1.25}
    server = serve(_settings(upstream, callers={"team-a": caps}))
    for _ in range(3):  # 103 tokens each: 103, 206, then 309 (the third started under the cap)
        served = _ask(server, TEAM_A)
        assert served.status_code == 200, served.text
        assert served.headers["x-router-model"] == "mock/usage-100"
        assert "x-router-limit" not in served.headers
    downgraded = _ask(server, TEAM_A)  # 309 >= 250: the cheaper member serves
    assert downgraded.status_code == 200
    assert downgraded.headers["x-router-model"] == "mock2/usage-10"
    assert downgraded.headers["x-router-limit"] == "tokens_per_day"
    other = _ask(server, TEAM_B)
    assert other.headers["x-router-model"] == "mock/usage-100"
    assert "x-router-limit" not in other.headers
    # 309 + 13 = 322 >= 1.25 x 250 = 312.5: the next one is refused
    refused = _ask(server, TEAM_A)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == "caller_limit_reached"
    assert "tokens_per_day of team-a" in error["message"] and TEAM_A not in refused.text
    assert refused.headers["x-should-retry"] == "false"
    assert 0 < int(refused.headers["retry-after"]) <= 86_400
    assert refused.headers["x-router-limit"] == "tokens_per_day"


def test_the_star_table_counts_each_unnamed_caller_on_its_own(upstream: MockUpstream, serve: Any) -> None:
    server = serve(_settings(upstream, callers={"*": {"tokens_per_day": 100}}))
    assert _ask(server, TEAM_A).status_code == 200  # 103 tokens: team-a is now at its cap
    assert _ask(server, TEAM_A).status_code == 429
    assert _ask(server, TEAM_B).status_code == 200  # team-b has a tally of its own
    assert _ask(server, TEAM_C).status_code == 200
    assert _ask(server, TEAM_B).status_code == 429


def test_a_refusal_is_a_rate_limit_error_the_openai_sdk_does_not_retry(upstream: MockUpstream, serve: Any) -> None:
    server = serve(_settings(upstream, callers={"team-a": {"rpm": 1}}))
    router = cast(ModelRouter, server.server.config.app)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=TEAM_A, max_retries=3)
    messages: Any = [{"role": "user", "content": "hi"}]
    client.chat.completions.create(model="group/main", messages=messages)
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="group/main", messages=messages)
    client.close()
    response = raised.value.response
    assert response.headers["x-should-retry"] == "false"
    assert 1 <= int(response.headers["retry-after"]) <= 60
    assert raised.value.code == "caller_limit_reached"
    assert "rpm of team-a" in raised.value.message
    # The router records a request once its answer is sent, so the 429's record may trail the
    # client by a moment; the SDK sends nothing more once it has raised.
    anyio.run(eventually, lambda: len(router.recent.snapshot()) >= 2)
    statuses = [record.status for record in router.recent.snapshot()]
    assert statuses == [200, 429]  # the SDK did not retry (max_retries=3 would have sent 3 more)
    assert router.recent.snapshot()[1].events == []  # no upstream was involved


def test_a_session_header_caps_one_session_and_not_another(upstream: MockUpstream, serve: Any) -> None:
    server = serve(_settings(upstream, sessions={"tokens_per_session": 150}))
    assert _ask(server, TEAM_A, **{"x-session-id": "s1"}).status_code == 200
    assert _ask(server, TEAM_A, **{"x-session-id": "s1"}).status_code == 200  # started at 103 < 150
    refused = _ask(server, TEAM_A, **{"x-session-id": "s1"})
    assert refused.status_code == 429
    assert "tokens_per_session of team-a's session" in refused.json()["error"]["message"]
    assert _ask(server, TEAM_A, **{"x-session-id": "s2"}).status_code == 200
    assert _ask(server, TEAM_A).status_code == 200  # no session: no session cap


def test_an_anthropic_route_refuses_in_anthropics_shape(upstream: MockUpstream, serve: Any) -> None:
    settings = _settings(upstream, callers={"team-a": {"rpm": 1}}, routes=["/v1/chat/completions", "/v1/messages"])
    server = serve(settings)
    body = {"model": "group/main", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": TEAM_A, "anthropic-version": "2023-06-01"}
    first = httpx2.post(f"{server.url}/v1/messages", json=body, headers=headers, timeout=10)
    assert first.status_code != 429, first.text  # counted against rpm whatever it came to
    refused = httpx2.post(f"{server.url}/v1/messages", json=body, headers=headers, timeout=10)
    assert refused.status_code == 429
    assert refused.json()["type"] == "error"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert refused.headers["x-should-retry"] == "false"


def test_the_usage_route_shows_the_callers_own_figures_only(upstream: MockUpstream, serve: Any) -> None:
    callers = {"team-a": {"tokens_per_day": 1000}, "team-b": {"rpm": 50}, "*": {"usd_per_day": 1.0}}
    server = serve(_settings(upstream, callers=callers, usage_route="/v1/router/usage"))
    assert _ask(server, TEAM_A).status_code == 200
    mine = httpx2.get(f"{server.url}/v1/router/usage", headers={"authorization": f"Bearer {TEAM_A}"})
    assert mine.status_code == 200
    figures = mine.json()
    assert figures["caller"] == "team-a"
    assert [(cap["cap"], cap["used"], cap["limit"]) for cap in figures["caps"]] == [("tokens_per_day", 103, 1000)]
    assert "team-b" not in mine.text
    theirs = httpx2.get(f"{server.url}/v1/router/usage", headers={"authorization": f"Bearer {TEAM_B}"}).json()
    assert theirs["caller"] == "team-b" and [cap["cap"] for cap in theirs["caps"]] == ["rpm"]
    assert "team-a" not in json.dumps(theirs)
    assert httpx2.get(f"{server.url}/v1/router/usage").status_code == 401


@pytest.mark.anyio
async def test_caller_labels_stay_bounded_under_a_thousand_authorize_principals(upstream: MockUpstream) -> None:
    def authorize(scope: Scope, headers: Headers) -> object:
        return headers.get("x-user") or False

    settings = _settings(
        upstream,
        api_keys=None,
        authorize=authorize,
        callers={"vip": {"rpm": 1000}, "*": {"rpm": 5}},
        metrics_route="/metrics",
        max_callers=100,
    )
    router = ModelRouter(host_app(), settings=settings)
    body = {"model": "group/main", "messages": [{"role": "user", "content": "hi"}]}
    async with LifespanManager(router) as manager:
        transport = httpx2.ASGITransport(app=manager.app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://router") as http:
            for user in range(1000):
                sent = await http.post("/v1/chat/completions", json=body, headers={"x-user": f"u{user}"})
                assert sent.status_code == 200
            assert (await http.post("/v1/chat/completions", json=body, headers={"x-user": "vip"})).status_code == 200
            scrape = Scrape((await http.get("/metrics", headers={"x-user": "ops"})).text)
    assert scrape.labels("asgi_router_caller_requests_total", "caller") == {"vip", "other"}
    assert scrape.labels("asgi_router_caller_tokens_total", "caller") == {"vip", "other"}
    assert scrape.value("asgi_router_caller_requests_total", caller="other", outcome="served") == 1000
    assert scrape.value("asgi_router_caller_requests_total", caller="vip", outcome="served") == 1
    assert scrape.value("asgi_router_caller_tokens_total", caller="vip", kind="prompt") == 100
    assert router._callers is not None and len(router._callers.tallies.others()) == 100  # max_callers


def test_a_caller_table_naming_no_key_is_a_warning_at_load(
    upstream: MockUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="asgi_router"):
        _settings(upstream, callers={"team-z": {"rpm": 5}})
    assert "callers.team-z names no key of api_keys" in caplog.text
    assert TEAM_A not in caplog.text


def test_caps_that_name_nothing_are_refused_at_load(upstream: MockUpstream) -> None:
    with pytest.raises(ValueError, match="sets no cap"):
        _settings(upstream, callers={"team-a": {"downgrade_to": "group/cheap"}})
    with pytest.raises(ValueError, match="names unknown group"):
        _settings(upstream, callers={"team-a": {"rpm": 1, "downgrade_to": "group/nope"}})
    with pytest.raises(ValueError, match="sets no cap"):
        _settings(upstream, sessions={"ttl": 60})
    with pytest.raises(ValueError, match="already taken"):
        _settings(upstream, usage_route="/v1/models")


def test_a_downgraded_stream_says_which_cap_and_the_record_and_status_page_say_so(
    upstream: MockUpstream, serve: Any
) -> None:
    caps = {"rpm": 1, "downgrade_to": "group/cheap"}
    server = serve(_settings(upstream, callers={"team-a": caps}, status_route="/router/status"))
    router = cast(ModelRouter, server.server.config.app)
    assert _ask(server, TEAM_A).status_code == 200
    body = {"model": "group/main", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": f"Bearer {TEAM_A}"}
    with httpx2.stream("POST", f"{server.url}/v1/chat/completions", json=body, headers=headers, timeout=10) as sent:
        assert sent.status_code == 200
        assert sent.headers["x-router-limit"] == "rpm"
        assert sent.headers["x-router-model"] == "mock2/usage-10"
        assert b"data: [DONE]" in b"".join(sent.iter_bytes())
    # The record is written once the response is complete, on the server's thread: it may come
    # a moment after the client has read the last byte.
    anyio.run(eventually, lambda: len(router.recent.snapshot()) == 2)
    record = router.recent.snapshot()[-1]
    assert (record.caller, record.caller_outcome, record.limit) == ("team-a", "downgraded", "rpm")
    assert record.ref == "group/main" and record.plan == ("mock2/usage-10",)
    status = httpx2.get(f"{server.url}/router/status.json", headers=headers).json()
    (row,) = status["callers"]
    assert row["caller"] == "team-a"
    assert row["caps"] == [
        {
            "cap": "rpm",
            "used": 2,
            "limit": 1.0,
            "refused_at": None,
            "downgrade_to": "group/cheap",
            "resets_in": row["caps"][0]["resets_in"],
        }
    ]
    assert 0 < row["caps"][0]["resets_in"] <= 60
    page = httpx2.get(f"{server.url}/router/status", headers=headers).text
    assert "<h2>Callers</h2>" in page


def test_a_downgrade_that_cannot_serve_the_messages_route_is_refused_naming_the_cap_and_its_group(
    upstream: MockUpstream, serve: Any
) -> None:
    with FakeUpstream(kind="anthropic") as claude:
        claude.script("m", reply.ok("hello"))
        settings = make_settings(
            upstream.url,
            api_keys=KEYS,
            providers={"claude": claude.provider()},
            groups={"main": {"members": ["claude/m"]}, "cheap": {"members": ["mock2/usage-10"]}},
            callers={"team-a": {"rpm": 1, "downgrade_to": "group/cheap"}},
            routes=["/v1/chat/completions", "/v1/messages"],
        )
        server = serve(settings)
        body = {"model": "group/main", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
        headers = {"x-api-key": TEAM_A}
        assert httpx2.post(f"{server.url}/v1/messages", json=body, headers=headers, timeout=10).status_code == 200
        refused = httpx2.post(f"{server.url}/v1/messages", json=body, headers=headers, timeout=10)
    assert refused.status_code == 400
    assert refused.headers["x-router-limit"] == "rpm"
    error = refused.json()["error"]
    assert error["type"] == "invalid_request_error"  # Anthropic's shape, on its route
    assert "protocol_mismatch" in error["message"]
    assert "the rpm cap of team-a" in error["message"] and "group/cheap" in error["message"]


@pytest.mark.parametrize("reader", ["sessions", "sticky"])
def test_a_session_id_over_256_bytes_is_refused_with_a_400_naming_the_header(
    upstream: MockUpstream, serve: Any, reader: str
) -> None:
    if reader == "sessions":
        settings = _settings(upstream, sessions={"tokens_per_session": 1000})
    else:
        groups = {"main": {"members": ["mock/usage-100", "mock2/usage-10"], "sticky": {"key": "session"}}}
        settings = make_settings(upstream.url, groups=groups, api_keys=KEYS)  # type: ignore[attr-defined]
    server = serve(settings)
    assert _ask(server, TEAM_A, **{"x-session-id": "s" * 256}).status_code == 200  # 256 bytes: kept
    asked = sum(upstream.counts().values())
    refused = _ask(server, TEAM_A, **{"x-session-id": "s" * 257})
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_session_id")
    assert "x-session-id" in error["message"] and "s" * 257 not in refused.text
    assert sum(upstream.counts().values()) == asked  # the refused request reached no upstream


def test_the_usage_route_shows_an_unknown_session_as_zeros_and_keeps_no_tally(
    upstream: MockUpstream, serve: Any
) -> None:
    server = serve(_settings(upstream, sessions={"tokens_per_session": 1000}, usage_route="/v1/router/usage"))
    router = cast(ModelRouter, server.server.config.app)
    tallies = router._callers.tallies  # type: ignore[union-attr]  # how many session tallies are kept
    assert _ask(server, TEAM_A, **{"x-session-id": "known"}).status_code == 200
    headers = {"authorization": f"Bearer {TEAM_A}"}
    known = httpx2.get(f"{server.url}/v1/router/usage", headers={**headers, "x-session-id": "known"}).json()
    assert [(cap["cap"], cap["used"]) for cap in known["session"]] == [("tokens_per_session", 103)]
    too_long = {**headers, "x-session-id": "s" * 257}
    refused = httpx2.get(f"{server.url}/v1/router/usage", headers=too_long)
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_session_id")
    for n in range(20):
        unknown = httpx2.get(f"{server.url}/v1/router/usage", headers={**headers, "x-session-id": f"new-{n}"}).json()
        assert [(cap["cap"], cap["used"]) for cap in unknown["session"]] == [("tokens_per_session", 0)]
    assert tallies.sessions_kept() == 1
