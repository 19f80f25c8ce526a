"""A fleet behaves like one process: routers in separate uvicorn processes share one real
redis-server (``state_url``), and requests alternate between them, each on a fresh connection,
as a load balancer would send them.

Each test uses groups of its own, so the shared breakers, counters and budgets of one test never
meet another's. One test kills Redis under load and starts it again (whatever happens). The last
two run routers in this process: mounted without lifespan, and with one.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from asgi_router import ModelRouter
from asgi_router.fleet.shared_state import SharedState

from .conftest import API_KEY, host_app, make_settings
from .fleet import REDIS_PASSWORD, Fleet, RedisServer, RouterProcess
from .mock_upstream import MockUpstream
from .servers import ServerThread
from .waiting import eventually, polled

pytestmark = pytest.mark.fleet


def _config(redis: RedisServer, upstream: MockUpstream, prefix: str) -> str:
    base = f"{upstream.url}/v1"  # type: ignore[attr-defined]
    return f"""
allow_unauthenticated = true
status_route = "/router/status"
state_url = "{redis.url}"
state_key_prefix = "{prefix}"

[breaker]
consecutive_failures = 3
open_for = 30

[providers.mock]
base_url = "{base}"
api_key = "{API_KEY}"
timeouts = {{ connect = 1, first_byte = 2, idle = 2, total = 10 }}

[providers.mock2]
base_url = "{base}"
api_key = "{API_KEY}"

[groups.breaker]
members = ["mock/status-503-fleet", "mock2/ok"]

[groups.rotate]
strategy = "rotate"
members = ["mock/rid-a", "mock/rid-b"]

[groups.budget]
members = [{{ ref = "mock/rid-budget", rpm = 4 }}, "mock2/ok"]

[groups.load]
strategy = "rotate"
members = ["mock/rid-la", "mock/rid-lb", "mock/rid-lc"]

[groups.bound]
members = [{{ ref = "mock/rid-bound", rpm = 100 }}, "mock2/ok"]

[groups.seen]
members = ["mock/status-503-seen", "mock2/ok"]

[groups.after]
strategy = "rotate"
members = ["mock/rid-x", "mock/rid-y"]
"""


@pytest.fixture(scope="module")
def fleet(
    redis_server: RedisServer, upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[RouterProcess]]:
    """Four router processes sharing the session's redis-server (most tests use the first two)."""
    workdir = tmp_path_factory.mktemp("fleet")
    config = workdir / "router.toml"
    config.write_text(_config(redis_server, upstream, f"fleet{time.monotonic_ns()}"))
    routers = [RouterProcess(name, config, workdir) for name in ("a", "b", "c", "d")]
    with Fleet(routers):
        yield routers


def ask(router: RouterProcess, model: str) -> httpx2.Response:
    """One chat request on a fresh connection (as a load balancer spreads them)."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    return httpx2.post(f"{router.url}/v1/chat/completions", json=body, timeout=10)


def served_by(router: RouterProcess, model: str) -> str:
    response = ask(router, model)
    assert response.status_code == 200, response.text
    return response.headers["x-router-model"]


def _phase(router: RouterProcess, key: str) -> str | None:
    """The phase of ``key``'s breaker on ``router``'s status page."""
    page = httpx2.get(f"{router.url}/router/status.json", timeout=5)
    assert page.status_code == 200, page.text
    candidates = {c["key"]: c for p in page.json()["providers"] for c in p["candidates"]}
    found = candidates.get(key)
    return None if found is None else found["breaker"]["phase"]


def test_a_breakers_failures_count_across_processes_and_the_other_skips_it_once_open(
    fleet: list[RouterProcess], upstream: MockUpstream
) -> None:
    a, b = fleet[:2]
    for router in (a, b, a):  # three failures in the fleet: two in a, one in b
        assert served_by(router, "group/breaker") == "mock2/ok"
    assert upstream.count("status-503-fleet") == 3
    for router in (a, b):  # the opening is published at once: both show it
        polled(lambda router=router: _phase(router, "mock/status-503-fleet") == "open", what=f"open on {router.name}")
    for router in (b, a, b, a):
        response = ask(router, "group/breaker")
        assert response.status_code == 200
        assert response.headers["x-router-model"] == "mock2/ok"
    assert upstream.count("status-503-fleet") == 3  # b opened it though it failed only once


def test_a_breaker_opened_in_one_process_shows_open_on_another_processs_status_page_labelled_shared(
    fleet: list[RouterProcess], redis_server: RedisServer
) -> None:
    first, second = fleet[0], fleet[1]
    for _ in range(3):  # consecutive_failures = 3, all in the first process
        assert served_by(first, "group/seen") == "mock2/ok"

    def shown_open() -> tuple[httpx2.Response, dict[str, Any]] | None:
        page = httpx2.get(f"{second.url}/router/status.json", timeout=5)
        assert page.status_code == 200, page.text
        data = page.json()
        candidates = {c["key"]: c for p in data["providers"] for c in p["candidates"]}
        return (page, data) if candidates["mock/status-503-seen"]["breaker"]["phase"] == "open" else None

    page, data = polled(shown_open, within=5, every=0.05, what="the breaker shown open on the other process")
    assert data["state"] == "shared"
    # The requests were the first process's: the second's recent requests are its own.
    assert all(request["ref"] != "group/seen" for request in data["recent"]), data["recent"]
    assert REDIS_PASSWORD not in page.text
    html = httpx2.get(f"{second.url}/router/status", timeout=5).text
    assert REDIS_PASSWORD not in html


def test_rotate_alternates_across_processes(fleet: list[RouterProcess]) -> None:
    a, b = fleet[:2]
    winners = []
    for router in (a, b, a, b, a, b):
        winners.append(served_by(router, "group/rotate"))
    assert winners == ["mock/rid-a", "mock/rid-b"] * 3


def test_an_rpm_budget_counts_the_requests_of_both_processes(fleet: list[RouterProcess]) -> None:
    a, b = fleet[:2]
    winners = []
    for router in (a, b) * 5:
        winners.append(served_by(router, "group/budget"))
        time.sleep(0.05)  # the slice is refilled in the background
    assert winners.count("mock/rid-budget") == 4, winners  # not 4 per process
    assert winners.count("mock2/ok") == 6


async def _load(routers: list[RouterProcess], seconds: float, model: str, at_least: int = 0) -> list[tuple[int, float]]:
    """Requests from 4 clients per router for ``seconds``, and on until ``at_least`` were made
    (a loaded machine serves fewer a second; never past 20 s): (status, latency) of each."""
    results: list[tuple[int, float]] = []
    started_all = time.monotonic()
    deadline, limit = started_all + seconds, started_all + 20.0

    async def client(router: RouterProcess) -> None:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        async with httpx2.AsyncClient(base_url=router.url, timeout=10) as http:
            while (now := time.monotonic()) < deadline or (len(results) < at_least and now < limit):
                started = time.monotonic()
                response = await http.post("/v1/chat/completions", json=body)
                results.append((response.status_code, time.monotonic() - started))

    await asyncio.gather(*(client(router) for router in routers for _ in range(4)))
    return results


@pytest.mark.anyio
async def test_an_rpm_budget_holds_across_four_processes_under_concurrent_load(
    fleet: list[RouterProcess], upstream: MockUpstream
) -> None:
    results = await _load(fleet, 2.0, "group/bound", at_least=220)
    assert all(status == 200 for status, _ in results)
    served = upstream.count("rid-bound")
    assert len(results) >= 220  # the load asked for twice the budget, and more
    # Never more than max(2, 5 %) over the budget; a little under it at most a slice per process.
    assert 100 - 4 * 2 - 2 <= served <= 100 + max(2, 5), served


@pytest.mark.anyio
async def test_redis_killed_under_load_fails_no_request_and_sharing_resumes_once_it_is_back(
    fleet: list[RouterProcess], redis_server: RedisServer
) -> None:
    loop = asyncio.get_running_loop()
    pair = fleet[:2]
    try:
        load = asyncio.ensure_future(_load(pair, 1.5, "group/load"))
        await asyncio.sleep(0.5)
        await loop.run_in_executor(None, redis_server.kill)
        results = await load
    finally:
        if redis_server.process is None or redis_server.process.poll() is not None:
            await loop.run_in_executor(None, redis_server.start)  # the next tests need it
    assert results and all(status == 200 for status, _ in results), {status for status, _ in results}
    # No request waited on the dead store (a request waits 50 ms at most for it): the slowest stays
    # far under the seconds a socket timeout would cost; generous, the machine has two shared cores.
    assert max(latency for _, latency in results) < 2.0

    a, b = pair

    async def one_sequence() -> bool:  # again, across both processes
        winners = [await loop.run_in_executor(None, served_by, router, "group/after") for router in (a, b, a, b)]
        return winners[0] != winners[1] and winners[1] != winners[2] and winners[2] != winners[3]

    await eventually(one_sequence, within=15, every=0.2)  # reconnection backs off up to 2 s; generous

    for router in pair:
        log = router.log()
        # Said once per outage, not per request (hundreds were served meanwhile): once for the
        # kill, at most once more should a busy machine have timed a call out before it.
        assert 1 <= log.count("is unreachable") <= 2, log
        assert log.count("is reachable again") == log.count("is unreachable"), log
        assert REDIS_PASSWORD not in log
        assert f"fleet:***@127.0.0.1:{redis_server.port}" in log
        # The store named once at start-up, and the recovery said at INFO (not a warning), with
        # no doubled "asgi_router: " prefix on a logger already named so.
        assert re.search(
            rf"^INFO asgi_router shared state: redis://fleet:\*\*\*@127\.0\.0\.1:{redis_server.port}/\d+, prefix \S+$",
            log,
            re.MULTILINE,
        ), log
        assert "INFO asgi_router shared state at " in log and "WARNING asgi_router shared state at " in log
        assert "asgi_router: " not in log


def _mounted(redis: RedisServer, upstream: MockUpstream, prefix: str) -> tuple[Starlette, ModelRouter]:
    """A router mounted under ``/llm`` in a parent app: a mounted app gets no lifespan."""
    settings = make_settings(
        upstream.url,  # type: ignore[attr-defined]
        state_url=redis.url,
        state_key_prefix=prefix,
        groups={"rotate": {"strategy": "rotate", "members": ["mock/rid-a", "mock/rid-b"]}},
    )
    router = ModelRouter(host_app(), settings=settings)
    return Starlette(routes=[Mount("/llm", app=router)]), router


def test_routers_without_lifespan_share_state_too(redis_server: RedisServer, upstream: MockUpstream) -> None:
    prefix = f"mounted{time.monotonic_ns()}"
    (first, _), (second, _) = _mounted(redis_server, upstream, prefix), _mounted(redis_server, upstream, prefix)
    with ServerThread(first, lifespan="off") as one, ServerThread(second, lifespan="off") as two:
        body = {"model": "group/rotate", "messages": []}
        winners = []
        for url in (one.url, two.url) * 3:
            response = httpx2.post(f"{url}/llm/v1/chat/completions", json=body, timeout=10)
            winners.append(response.headers["x-router-model"])
            time.sleep(0.05)
    # The first request connects; from the moment it is up, one sequence across both routers.
    tail = winners[2:]
    assert all(tail[i] != tail[i + 1] for i in range(len(tail) - 1)), winners


def test_lifespan_startup_connects_before_the_first_request(redis_server: RedisServer, upstream: MockUpstream) -> None:
    settings = make_settings(upstream.url, state_url=redis_server.url)  # type: ignore[attr-defined]
    router = ModelRouter(host_app(), settings=settings)
    state = router.state
    assert isinstance(state, SharedState)
    with ServerThread(router, lifespan="on"):
        polled(lambda: state.link.up, within=5, what="the store connection")
