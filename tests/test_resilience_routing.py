"""Resilience meets routing: leases in hedge races, one state for breakers and statistics, budgets on retries."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import pytest

from asgi_router.transports.provider import ProviderRuntime
from bench.asgi_calls import receive_once

from .conftest import SentMessages, pool_is_quiet
from .doubles import FakeClock
from .fakes import FakeTransport
from .mock_upstream import MockUpstream
from .resilient import chat, events_of, routed_router, tag
from .waiting import eventually

pytestmark = pytest.mark.anyio


async def test_a_lost_hedge_frees_its_slot_and_leaves_the_losers_breakers_alone(upstream: MockUpstream) -> None:
    groups = {"h": {"members": ["mock/slow-600", "mock2/ok"], "hedge_after": 0.05}}
    breaker = {"consecutive_failures": 1}  # any failure recorded against the loser would open it
    async with routed_router(upstream, groups=groups, breaker=breaker) as (client, router):
        response = await chat(client, "group/h")
        events = await events_of(response, router)
        await eventually(lambda: pool_is_quiet(router))
        state = router.state
    assert response.headers["x-router-model"] == "mock2/ok"
    assert sorted(events) == [("mock/slow-600", "aborted", "hedge_lost"), ("mock2/ok", "served", "served")]
    assert router.state.breaker("mock/slow-600") is None and router.state.breaker("mock") is None
    # both leases (per provider) and both statistics (per candidate) released
    assert [state.in_flight(key) for key in ("mock", "mock2", "mock/slow-600", "mock2/ok")] == [0, 0, 0, 0]


async def test_a_hedged_group_whose_members_are_all_open_still_tries_the_oldest(upstream: MockUpstream) -> None:
    clock = FakeClock()
    first, second = f"status-503-{tag()}", f"status-503-{tag()}"
    groups = {"h": {"members": [f"mock/{first}", f"mock2/{second}"], "hedge_after": 0.05}}
    breaker = {"consecutive_failures": 1}
    async with routed_router(upstream, clock=clock, groups=groups, breaker=breaker, retries=0) as (client, router):
        await chat(client, f"mock2/{second}")  # opens at t0
        clock.advance(5)
        await chat(client, f"mock/{first}")  # opens at t0 + 5
        response = await chat(client, "group/h")
        events = await events_of(response, router)
    assert events == [
        (f"mock/{first}", "skipped", "circuit_open"),
        (f"mock2/{second}", "skipped", "circuit_open"),
        (f"mock2/{second}", "failed", "upstream_5xx"),
    ]
    assert response.status_code == 502


async def test_the_router_state_holds_the_statistics_strategies_read(upstream: MockUpstream) -> None:
    groups = {"lb": {"strategy": "least_busy", "members": ["mock/slow-300", "mock2/ok"]}}
    async with routed_router(upstream, groups=groups) as (client, router):
        state = router.state
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(chat, client, "group/lb")
            # one table, two kinds of key: the candidate (bookkeeper) and its provider (gate lease)
            await eventually(lambda: (state.in_flight("mock/slow-300"), state.in_flight("mock")) == (1, 1))
            busy = await chat(client, "group/lb")
        assert busy.headers["x-router-model"] == "mock2/ok"  # least_busy read the shared state
        assert (state.in_flight("mock/slow-300"), state.in_flight("mock")) == (0, 0)
        assert state.latency("mock/slow-300") is not None


async def test_same_candidate_retries_spend_the_members_rpm_budget(upstream: MockUpstream) -> None:
    model = f"fail-5-{tag()}-503"
    groups = {"one": {"members": [{"ref": f"mock/{model}", "rpm": 2}]}}  # one member: retries = 2
    async with routed_router(upstream, groups=groups) as (client, router):
        response = await chat(client, "group/one")
        events = await events_of(response, router)
    assert events == [
        (f"mock/{model}", "failed", "upstream_5xx"),
        (f"mock/{model}", "failed", "upstream_5xx"),
        (f"mock/{model}", "skipped", "over_budget"),  # a retry is a request like any other
    ]
    assert upstream.count(model) == 2
    assert response.status_code == 502  # decided by the contacted attempts, not the skip
    assert response.headers["x-router-attempts"] == "2"


class _Scripted:
    """A streamed 200 whose first chunk waits for ``go``; its close waits for ``closable``."""

    def __init__(self, go: anyio.Event, closable: anyio.Event | None = None) -> None:
        self.status = 200
        self.raw_headers = [(b"content-type", b"text/event-stream")]
        self.drained = False
        self.closed = False
        self._go = go
        self._closable = closable
        self.chunks = self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        await self._go.wait()
        yield b"data: {}\n\n"

    async def aclose(self) -> None:
        if self._closable is not None:
            await self._closable.wait()
        self.closed = True


async def test_a_winner_the_client_never_receives_is_released(upstream: MockUpstream) -> None:
    """The client leaves while the race waits for its loser to close: the winner is let go too."""
    go_first, loser_closable, never = anyio.Event(), anyio.Event(), anyio.Event()
    responses: list[_Scripted] = []

    class Transport(FakeTransport):
        async def send(self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes) -> _Scripted:
            first = not responses
            responses.append(_Scripted(go_first, None) if first else _Scripted(never, loser_closable))
            return responses[-1]

    groups = {"h": {"members": ["mock/a", "mock2/b"], "hedge_after": 0.05}}
    async with routed_router(upstream, groups=groups, router={"transport": Transport()}) as (_, router):
        body = json.dumps({"model": "group/h", "stream": True, "messages": []}).encode()
        leave = anyio.Event()
        sent = SentMessages()

        receive = receive_once(body, then=leave.wait)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/chat/completions",
            "headers": [(b"content-type", b"application/json"), (b"x-request-id", b"never-received")],
            "query_string": b"",
        }
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(router, scope, receive, sent)
            await eventually(lambda: len(responses) == 2)  # the hedge has started
            go_first.set()  # the first commits; the loser is cancelled and starts closing ...
            await anyio.sleep(0.05)
            leave.set()  # ... when the client leaves
            await anyio.sleep(0.05)
            loser_closable.set()
        assert await router.events.drain(5)
        [record] = [r for r in router.recent.snapshot() if r.request_id == "never-received"]
        state = router.state
    assert [r.closed for r in responses] == [True, True]
    # nothing of the answer reached the client: only the 499 a server drops (responses/client_gone.py)
    assert sent == [
        {"type": "http.response.start", "status": 499, "headers": []},
        {"type": "http.response.body", "body": b"", "more_body": False},
    ]
    assert sorted((e.candidate, e.outcome, e.reason) for e in record.events) == [
        ("mock/a", "aborted", "client_disconnected"),
        ("mock2/b", "aborted", "client_disconnected"),
    ]
    # both leases (per provider) and both statistics (per candidate) released
    assert [state.in_flight(key) for key in ("mock", "mock2", "mock/a", "mock2/b")] == [0, 0, 0, 0]
