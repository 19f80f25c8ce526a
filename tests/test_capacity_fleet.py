"""Sticky sessions across a fleet: two uvicorn processes sharing one redis-server agree on each
session's member, as a load balancer alternates a conversation's turns between them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx2
import pytest

from .conftest import API_KEY
from .fleet import Fleet, RedisServer, RouterProcess
from .mock_upstream import MockUpstream

pytestmark = pytest.mark.fleet


@pytest.fixture(scope="module")
def pair(
    redis_server: RedisServer, upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[RouterProcess]]:
    workdir = tmp_path_factory.mktemp("sticky-fleet")
    config = workdir / "router.toml"
    base = f"{upstream.url}/v1"  # type: ignore[attr-defined]
    config.write_text(f"""
allow_unauthenticated = true
state_url = "{redis_server.url}"
state_key_prefix = "sticky{time.monotonic_ns()}"

[providers.mock]
base_url = "{base}"
api_key = "{API_KEY}"

[groups.chat]
strategy = "rotate"
members = ["mock/rid-s1", "mock/rid-s2", "mock/rid-s3"]
sticky = {{ key = "session" }}

[groups.limits]
members = ["mock/status-429-ra30-fleetrl", "mock/rid-rl"]
""")
    routers = [RouterProcess(name, config, workdir) for name in ("a", "b")]
    with Fleet(routers):
        yield routers


def _turn(router: RouterProcess, session: str) -> tuple[str, str]:
    body = {"model": "group/chat", "messages": [{"role": "user", "content": "hi"}]}
    response = httpx2.post(
        f"{router.url}/v1/chat/completions", json=body, headers={"x-session-id": session}, timeout=10
    )
    assert response.status_code == 200, response.text
    return response.headers["x-router-model"], response.headers["x-router-sticky"]


def test_two_processes_sharing_state_agree_on_each_sessions_member(pair: list[RouterProcess]) -> None:
    a, b = pair
    members: dict[str, set[str]] = {}
    outcomes: dict[str, list[str]] = {}
    for session in ("one", "two", "three"):
        for router in (a, b, a, b):
            member, outcome = _turn(router, session)
            members.setdefault(session, set()).add(member)
            outcomes.setdefault(session, []).append(outcome)
    assert all(len(served) == 1 for served in members.values()), members
    assert len(set().union(*members.values())) >= 2  # the sessions themselves are spread
    assert all(seen == ["miss", "hit", "hit", "hit"] for seen in outcomes.values()), outcomes


def test_a_429_in_one_process_keeps_the_other_from_calling_that_member(
    pair: list[RouterProcess], upstream: MockUpstream
) -> None:
    a, b = pair
    body = {"model": "group/limits", "messages": [{"role": "user", "content": "hi"}]}
    first = httpx2.post(f"{a.url}/v1/chat/completions", json=body, timeout=10)
    time.sleep(0.2)  # the mark travels by pub/sub
    second = httpx2.post(f"{b.url}/v1/chat/completions", json=body, timeout=10)
    assert (first.status_code, second.status_code) == (200, 200)
    assert second.headers["x-router-model"] == "mock/rid-rl"
    assert len([hit for hit in upstream.hits if hit.model == "status-429-ra30-fleetrl"]) == 1
