"""Hedging over real loopback upstreams: the slow first member loses and sees the disconnect."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import pytest

from asgi_router import ModelRouter
from asgi_router.transports.provider import ProviderRuntime

from .conftest import API_KEY, host_app, make_settings, pool_is_quiet
from .doubles import RecordSink, on_fake_clock
from .fakes import Answer, FakeTransport, ScriptedTransport
from .mock_upstream import MockUpstream
from .resilient import loop_now, scripted_router
from .routing_helpers import chat_body, router_client, seen_all
from .servers import ServerThread
from .waiting import eventually

pytestmark = pytest.mark.anyio

_TIMEOUTS = {"connect": 1, "first_byte": 5, "idle": 5, "total": 20}


def _hedged(members: list[str], hedge_after: float = 0.2, **group: Any) -> dict[str, Any]:
    return {"groups": {"h": {"members": members, "hedge_after": hedge_after, **group}}, "timeouts": _TIMEOUTS}


async def _wait_quiet(router: ModelRouter) -> None:
    await eventually(lambda: pool_is_quiet(router), within=3)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.both_transports
async def test_slow_first_member_loses_the_race_and_its_upstream_sees_the_disconnect(
    upstream: MockUpstream, stream: bool
) -> None:
    with RecordSink.logged() as records:
        async with router_client(upstream, **_hedged(["mock/slow-3000", "mock2/ok"])) as (client, router):
            response = await client.post("/v1/chat/completions", json=chat_body("group/h", stream=stream))
            await _wait_quiet(router)
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "mock2/ok"
    assert response.headers["x-router-attempts"] == "2"
    assert "hello from ok" in response.text or "Hello" in response.text
    request_id = response.headers["x-request-id"]
    slow, fast = seen_all(upstream, request_id, 2)
    assert (slow.model, slow.disconnected, slow.completed) == ("slow-3000", True, False)  # its 3 s not waited
    assert (fast.model, fast.completed) == ("ok", True)
    events = records.of(request_id).events
    assert sorted((e.candidate, e.outcome, e.reason) for e in events) == [
        ("mock/slow-3000", "aborted", "hedge_lost"),
        ("mock2/ok", "served", "served"),
    ]
    lost = next(e for e in events if e.reason == "hedge_lost")
    assert lost.latency >= 0.2  # it ran at least until the hedge started


@pytest.mark.both_transports
async def test_first_member_that_commits_later_still_wins_and_the_hedge_is_cancelled(upstream: MockUpstream) -> None:
    async with router_client(upstream, **_hedged(["mock/slow-400", "mock2/slow-3000"], hedge_after=0.1)) as (
        client,
        router,
    ):
        response = await client.post("/v1/chat/completions", json=chat_body("group/h"))
        await _wait_quiet(router)
    assert response.headers["x-router-model"] == "mock/slow-400"
    assert response.headers["x-router-attempts"] == "2"
    first, hedge = seen_all(upstream, response.headers["x-request-id"], 2)
    assert first.completed and not first.disconnected
    assert hedge.disconnected and not hedge.completed


async def test_a_racer_timing_out_in_its_own_task_leaves_the_request_and_the_other_racer_going(
    upstream: MockUpstream,
) -> None:
    # The first member's first-byte limit (0.3 s) runs out while the hedge (started at 0.1 s,
    # answering at 0.7 s, its own limit 5 s) still runs. Each racer bounds its reads in a scope
    # of its own: the racer's task is cut, never the request's, so the hedge wins.
    quick = {"connect": 1, "first_byte": 0.3, "idle": 5, "total": 20}
    providers = {
        name: {"base_url": f"{upstream.url}/v1", "api_key": API_KEY, "timeouts": timeouts}
        for name, timeouts in (("mock", quick), ("mock2", _TIMEOUTS))
    }
    with RecordSink.logged() as records:
        hedged = _hedged(["mock/slow-3000", "mock2/slow-600"], hedge_after=0.1)
        async with router_client(upstream, providers=providers, **hedged) as (client, router):
            response = await client.post("/v1/chat/completions", json=chat_body("group/h"))
            await _wait_quiet(router)
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "mock2/slow-600"  # the hedge's answer
    record = records.of(response.headers["x-request-id"])
    assert sorted((e.candidate, e.outcome, e.reason) for e in record.events) == [
        ("mock/slow-3000", "failed", "timeout"),
        ("mock2/slow-600", "served", "served"),
    ]
    assert record.hedge == "won"


async def test_no_hedge_when_the_first_member_commits_in_time(upstream: MockUpstream) -> None:
    async with router_client(upstream, **_hedged(["mock/ok", "mock2/ok"], hedge_after=1.0)) as (client, _):
        response = await client.post("/v1/chat/completions", json=chat_body("group/h", stream=True))
    assert response.headers["x-router-attempts"] == "1"
    assert upstream.attempts(response.headers["x-request-id"]) == ["ok"]


@on_fake_clock
async def test_fast_failure_fails_over_at_once_without_waiting_for_the_hedge_delay(upstream: MockUpstream) -> None:
    transport = ScriptedTransport(Answer.error(502), Answer.error(500), Answer())
    async with scripted_router(upstream, transport, **_hedged(["mock/a", "mock2/b", "mock/c"], 2.0)) as client:
        started = loop_now()
        response = await client.post("/v1/chat/completions", json=chat_body("group/h"))
        elapsed = loop_now() - started
    assert response.headers["x-router-model"] == "mock/c"
    assert response.headers["x-router-attempts"] == "3"
    assert elapsed == pytest.approx(0.0, abs=0.005)  # not the 2 s hedge delay


async def test_hedges_are_capped_to_the_groups_share_of_traffic(upstream: MockUpstream) -> None:
    members = ["mock/slow-400", "mock2/ok"]
    async with router_client(upstream, **_hedged(members, hedge_after=0.1, hedge_budget=0.1)) as (client, _):
        winners = [
            (await client.post("/v1/chat/completions", json=chat_body("group/h"))).headers["x-router-model"]
            for _ in range(3)
        ]
    # the first request may hedge (a credit to start with); the next ones have earned 0.1 each
    assert winners == ["mock2/ok", "mock/slow-400", "mock/slow-400"]


async def test_a_zero_hedge_budget_never_hedges(upstream: MockUpstream) -> None:
    async with router_client(upstream, **_hedged(["mock/slow-300", "mock2/ok"], 0.05, hedge_budget=0)) as (
        client,
        _,
    ):
        response = await client.post("/v1/chat/completions", json=chat_body("group/h"))
    assert (response.headers["x-router-model"], response.headers["x-router-attempts"]) == ("mock/slow-300", "1")


@pytest.mark.both_transports
async def test_client_leaving_mid_race_cancels_both_upstreams_and_frees_the_pool(upstream: MockUpstream) -> None:
    settings = make_settings(upstream.url, **_hedged(["mock/hang", "mock2/hang"], hedge_after=0.1))  # type: ignore[attr-defined]
    router = ModelRouter(host_app(), settings=settings)
    request_id = "hedge-client-leaves"
    with RecordSink.logged() as records, ServerThread(router) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=httpx2.Timeout(0.6)) as client:
            with pytest.raises(httpx2.ReadTimeout):
                await client.post(
                    "/v1/chat/completions", json=chat_body("group/h"), headers={"x-request-id": request_id}
                )
        first, hedge = seen_all(upstream, request_id, 2)
        assert first.disconnected and hedge.disconnected
        await _wait_quiet(router)
        await eventually(lambda: records, within=3)
    record = records.of(request_id)
    assert record.status == 499
    assert sorted((e.candidate, e.outcome, e.reason) for e in record.events) == [
        ("mock/hang", "aborted", "client_disconnected"),
        ("mock2/hang", "aborted", "client_disconnected"),
    ]
    assert router.state.in_flight("mock/hang") == 0
    assert router.state.in_flight("mock2/hang") == 0


class _GatedResponse:
    """A 200 whose first chunk waits for a shared gate; remembers whether it was closed."""

    def __init__(self, gate: anyio.Event) -> None:
        self.status = 200
        self.raw_headers = [(b"content-type", b"text/event-stream")]
        self.drained = False
        self.closed = False
        self._gate = gate
        self.chunks = self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        await self._gate.wait()
        yield b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'

    async def aclose(self) -> None:
        self.closed = True


class _GatedTransport(FakeTransport):
    def __init__(self) -> None:
        self.gate = anyio.Event()
        self.responses: list[_GatedResponse] = []

    async def send(self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes) -> _GatedResponse:
        self.responses.append(_GatedResponse(self.gate))
        return self.responses[-1]


async def test_a_loser_that_commits_at_the_same_moment_is_closed_not_leaked(upstream: MockUpstream) -> None:
    transport = _GatedTransport()
    with RecordSink.logged() as records:
        hedged = _hedged(["mock/a", "mock2/b"], hedge_after=0.05)
        async with router_client(upstream, router={"transport": transport}, **hedged) as (client, router):
            responses: list[httpx2.Response] = []

            async def ask() -> None:
                # streaming: a commit needs only the first chunk, so both attempts finish in the
                # same loop turn and the loser's result is already in when the winner is chosen
                body = chat_body("group/h", stream=True)
                responses.append(await client.post("/v1/chat/completions", json=body))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(ask)
                await eventually(lambda: len(transport.responses) >= 2, within=3)  # the hedge has started
                transport.gate.set()  # both commit in the same instant
    (response,) = responses
    assert response.headers["x-router-model"] == "mock/a"
    assert [r.closed for r in transport.responses] == [True, True]  # the winner after sending, the loser at once
    assert sorted((e.candidate, e.outcome, e.reason) for e in records.of(response.headers["x-request-id"]).events) == [
        ("mock/a", "served", "served"),
        ("mock2/b", "aborted", "hedge_lost"),
    ]
    assert router.state.in_flight("mock2/b") == 0
