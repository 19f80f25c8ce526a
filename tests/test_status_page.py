"""The status page and its JSON twin: what they show, and who may see them.

The page itself is checked in a real browser in ``test_status_browser.py``; here are its data (the
JSON twin, which the page draws), its inbound auth as a browser meets it, and what makes it a
self-contained page.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

import pytest

from asgi_router import InMemoryState, RequestRecord

from .conftest import CLIENT_KEY
from .mock_upstream import MockUpstream
from .routing_helpers import chat_body, router_client

pytestmark = pytest.mark.anyio

_AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}
_PAGE = "/router/status"


def _basic(password: str, user: str = "ops") -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _status(**settings: Any) -> dict[str, Any]:
    return {"status_route": _PAGE, "api_keys": [CLIENT_KEY], **settings}


async def test_the_json_shows_breakers_ttfb_in_flight_budgets_and_recent_requests(
    upstream: MockUpstream, refused_url: str
) -> None:
    groups = {"g": {"members": ["down/ok", {"ref": "mock/ok", "rpm": 100, "tpm": 5000}]}}
    settings = _status(groups=groups, breaker={"consecutive_failures": 1, "open_for": 30})
    async with router_client(upstream, refused_url, **settings) as (client, _):
        first = await client.post("/v1/chat/completions", json=chat_body("group/g"), headers=_AUTH)
        second = await client.post("/v1/chat/completions", json=chat_body("group/g"), headers=_AUTH)
        response = await client.get(f"{_PAGE}.json", headers=_AUTH)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    data = response.json()
    assert data["state"] == "this process"
    providers = {provider["name"]: provider for provider in data["providers"]}
    assert set(providers) == {"down", "mock", "mock2"}
    down = providers["down"]
    assert down["breaker"]["phase"] == "open"
    assert 20 < down["breaker"]["half_opens_in"] <= 30
    (down_ok,) = down["candidates"]
    assert (down_ok["key"], down_ok["breaker"]["phase"]) == ("down/ok", "open")
    (mock_ok,) = providers["mock"]["candidates"]
    assert mock_ok["breaker"] == {
        "phase": "closed",
        "half_opens_in": None,
        "consecutive_failures": 0,
        "cause": None,
        "share": 1.0,
        "notes": [],
    }
    assert mock_ok["ttfb_ms"] > 0
    assert mock_ok["in_flight"] == 0
    assert mock_ok["rpm"] == {"used": 2, "limit": 100}
    assert 0 < mock_ok["tpm"]["used"] <= 5000 and mock_ok["tpm"]["limit"] == 5000
    assert providers["mock2"]["candidates"] == []  # configured, but no model of it is named
    recent = data["recent"]
    assert [request["request_id"] for request in recent] == [
        second.headers["x-request-id"],
        first.headers["x-request-id"],
    ]  # newest first
    assert [(a["candidate"], a["outcome"], a["reason"]) for a in recent[1]["attempts"]] == [
        ("down/ok", "failed", "connect_error"),
        ("mock/ok", "served", "served"),
    ]
    assert [(a["candidate"], a["outcome"], a["reason"]) for a in recent[0]["attempts"]] == [
        ("down/ok", "skipped", "circuit_open"),
        ("mock/ok", "served", "served"),
    ]
    assert recent[0]["status"] == 200 and recent[0]["winner"] == "mock/ok" and recent[0]["principal"].startswith("key-")
    assert data["events"] == {"dropped": 0, "failures": 0}


async def test_the_page_asks_a_browser_for_basic_credentials_and_takes_a_key_as_the_password(
    upstream: MockUpstream,
) -> None:
    async with router_client(upstream, **_status()) as (client, _):
        anonymous = await client.get(_PAGE)
        anonymous_json = await client.get(f"{_PAGE}.json")
        wrong = await client.get(_PAGE, headers=_basic("rk-not-the-key-0123456789"))
        page = await client.get(_PAGE, headers=_basic(CLIENT_KEY))
        as_bearer = await client.get(f"{_PAGE}.json", headers=_AUTH)
        chat_with_basic = await client.post(
            "/v1/chat/completions", json=chat_body("mock/ok"), headers=_basic(CLIENT_KEY)
        )
    for refused in (anonymous, anonymous_json, wrong):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"] == 'Basic realm="asgi_router", charset="UTF-8"'
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    assert as_bearer.status_code == 200
    assert chat_with_basic.status_code == 401  # Basic is for the pages a browser opens, not the API


async def test_an_authorize_callable_decides_for_the_status_page(upstream: MockUpstream) -> None:
    def authorize(scope: Any, headers: Any) -> object:
        return "ops" if headers.get("x-ops") == "yes" else None

    async with router_client(upstream, status_route=_PAGE, authorize=authorize) as (client, _):
        refused = await client.get(_PAGE)
        admitted = await client.get(_PAGE, headers={"x-ops": "yes"})
    assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Basic ")
    assert admitted.status_code == 200


async def test_the_page_is_self_contained_and_allows_only_its_own_script_and_style(upstream: MockUpstream) -> None:
    async with router_client(upstream, **_status()) as (client, _):
        page = await client.get(_PAGE, headers=_AUTH)
        head = await client.head(_PAGE, headers=_AUTH)
    html = page.text
    assert "http://" not in html and "https://" not in html and "<link" not in html and " src=" not in html
    policy = page.headers["content-security-policy"]
    assert policy.startswith("default-src 'none';") and "connect-src 'self'" in policy and "unsafe" not in policy
    for tag in ("script", "style"):
        (code,) = re.findall(rf"<{tag}>(.*?)</{tag}>", html, re.DOTALL)
        digest = base64.b64encode(hashlib.sha256(code.encode()).digest()).decode()
        assert f"{tag}-src 'sha256-{digest}'" in policy
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) > 1000


async def test_data_cannot_break_out_of_the_page(upstream: MockUpstream) -> None:
    async with router_client(upstream, **_status()) as (client, router):
        router.recent.add(RequestRecord("r1", "</script><script>alert(1)</script>"))
        page = await client.get(_PAGE, headers=_AUTH)
    assert "<script>alert(1)" not in page.text
    assert "\\u003c/script>\\u003cscript>alert(1)\\u003c/script>" in page.text


class _SharedState(InMemoryState):
    """A state that says it is shared by several processes (as a shared store's does)."""

    shared = True


async def test_shared_state_is_labelled_so(upstream: MockUpstream) -> None:
    async with router_client(upstream, router={"state": _SharedState()}, **_status()) as (client, _):
        data = (await client.get(f"{_PAGE}.json", headers=_AUTH)).json()
    assert data["state"] == "shared"


async def test_a_status_page_below_a_prefix_reads_its_json_next_to_it(upstream: MockUpstream) -> None:
    async with router_client(upstream, **_status(status_route="/ops/router")) as (client, _):
        page = await client.get("/ops/router", headers=_AUTH)
        twin = await client.get("/ops/router.json", headers=_AUTH)
    assert '"json_path":"router.json"' in page.text  # relative: it works below any root_path too
    assert twin.status_code == 200


async def test_without_status_route_the_paths_are_the_host_apps(upstream: MockUpstream) -> None:
    async with router_client(upstream, api_keys=[CLIENT_KEY]) as (client, _):
        response = await client.get(_PAGE, headers=_AUTH)
    assert response.status_code == 404
    assert response.json() == {"detail": "Not Found"}  # FastAPI's, the host app's


async def test_requests_refused_before_routing_are_counted_apart_and_cannot_crowd_out_routed_ones(
    upstream: MockUpstream,
) -> None:
    async with router_client(upstream, **_status()) as (client, router):
        routed = [
            (await client.post("/v1/chat/completions", json=chat_body("mock/ok"), headers=_AUTH)).headers[
                "x-request-id"
            ]
            for _ in range(3)
        ]
        for _ in range(120):  # unauthenticated: refused before any routing
            assert (await client.post("/v1/chat/completions", json=chat_body("mock/ok"))).status_code == 401
        bad = await client.post("/v1/chat/completions", json={"model": "no such thing", "messages": []}, headers=_AUTH)
        assert bad.status_code == 400
        data = (await client.get(f"{_PAGE}.json", headers=_AUTH)).json()
        page = (await client.get(_PAGE, headers=_AUTH)).text
    assert [request["request_id"] for request in data["recent"]] == routed[::-1]
    refused = data["refused"]
    assert refused["total"] == 121 and refused["by_status"] == {"400": 1, "401": 120}
    assert refused["recent"][0]["status"] == 400 and len(refused["recent"]) == 10
    assert 'id="refused"' in page
    # The documented ring keeps its meaning: every finished request, routed or not, oldest first.
    everything = router.recent.snapshot()
    assert everything[-1].status == 400 and everything[-2].status == 401
