"""One router, called on several event loops: each loop gets an upstream client of its own.

``TestClient(app)`` without ``with`` (FastAPI's module-level pattern) runs every call on a fresh
loop, as does one ``asyncio.run`` per test; a client made on the first loop is dead on the
next. Each loop's client is closed when that loop ends (no "Unclosed client session": pytest
turns such warnings into errors, and ``gc.collect()`` makes them surface in the test that left
them). A failure of the router's own client is the router's error, never the upstream's.
"""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from starlette.testclient import TestClient

from asgi_router import ModelRouter
from asgi_router.resilience.breaker import BreakerView

from .conftest import host_app, make_settings
from .fakes import FakeTransport
from .mock_upstream import MockUpstream
from .resilient import routed_router
from .servers import ServerThread

pytestmark = pytest.mark.both_transports  # each transport keeps one client per event loop

_CHAT = {"model": "mock/ok", "messages": [{"role": "user", "content": "hi"}]}


def test_testclient_without_with_serves_every_call_each_on_its_own_loop(upstream: MockUpstream) -> None:
    router = ModelRouter(host_app(), settings=make_settings(upstream.url))  # type: ignore[attr-defined]
    client = TestClient(router)  # no ``with``: no lifespan, a new event loop per call
    answers = [client.post("/v1/chat/completions", json=_CHAT) for _ in range(3)]
    streamed = client.post("/v1/chat/completions", json={**_CHAT, "stream": True})
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert {answer.json()["choices"][0]["message"]["content"] for answer in answers} == {"hello from ok"}
    assert streamed.status_code == 200 and streamed.text.rstrip().endswith("data: [DONE]")
    assert not router.transport.is_open  # each call's loop closed its own client as it ended
    gc.collect()


def test_one_asyncio_run_per_call_through_asgitransport_is_served_every_time(upstream: MockUpstream) -> None:
    router = ModelRouter(host_app(), settings=make_settings(upstream.url))  # type: ignore[attr-defined]

    async def one_call() -> int:
        transport = httpx2.ASGITransport(app=router)
        async with httpx2.AsyncClient(transport=transport, base_url="http://router") as client:
            return (await client.post("/v1/chat/completions", json=_CHAT)).status_code

    assert [asyncio.run(one_call()), asyncio.run(one_call())] == [200, 200]
    assert not router.transport.is_open
    gc.collect()


def test_a_server_without_lifespan_closes_its_loops_client_when_it_stops(upstream: MockUpstream) -> None:
    router = ModelRouter(host_app(), settings=make_settings(upstream.url))  # type: ignore[attr-defined]
    with ServerThread(router, lifespan="off") as server:
        answer = httpx2.post(f"{server.url}/v1/chat/completions", json=_CHAT)
        assert router.transport.is_open
    assert answer.status_code == 200
    assert not router.transport.is_open
    gc.collect()


class _LoopClosed(FakeTransport):
    """A transport whose own client is broken the way a client of an ended loop is."""

    async def send(self, *args: Any) -> Any:
        raise RuntimeError("Event loop is closed")


class _BreaksMidStream(FakeTransport):
    """A transport whose response's client breaks after the first chunk (the router's side)."""

    status = 200
    drained = False

    def __init__(self) -> None:
        self.raw_headers = [(b"content-type", b"text/event-stream")]
        self.chunks = self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        yield b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}\n\n'  # a real event: committed
        raise RuntimeError("Event loop is closed")

    async def aclose(self) -> None: ...

    async def send(self, *args: Any) -> _BreaksMidStream:
        return self


@dataclass
class _Broken:
    """The answer while the router's own client was broken, the router's numbers just after,
    and the next answer once it works again."""

    answer: httpx2.Response
    breakers: list[BreakerView | None]
    latency: float | None
    in_flight: int
    after: httpx2.Response


async def _own_client_broken(upstream: MockUpstream, broken: FakeTransport, stream: bool) -> _Broken:
    """One request of group ``g`` (mock/ok, then mock2/ok) over ``broken``, whose breaker opens at
    the first failure counted against it, then one through a router on a working transport that
    shares the first one's state (its breakers and statistics)."""
    settings: dict[str, Any] = {
        "groups": {"g": {"members": ["mock/ok", "mock2/ok"]}},
        "breaker": {"consecutive_failures": 1},
    }
    async with routed_router(upstream, router={"transport": broken}, **settings) as (client, router):
        answer = await client.post("/v1/chat/completions", json={**_CHAT, "model": "group/g", "stream": stream})
        state = router.state
        breakers = [state.breaker(key) for key in ("mock/ok", "mock")]
        latency, in_flight = state.latency("mock/ok"), state.in_flight("mock/ok")
    async with routed_router(upstream, router={"state": state}, **settings) as (client, _):
        after = await client.post("/v1/chat/completions", json={**_CHAT, "model": "group/g"})
    return _Broken(answer, breakers, latency, in_flight, after)


@pytest.mark.anyio
async def test_a_failure_of_the_routers_own_client_counts_against_no_breaker_or_statistic(
    upstream: MockUpstream,
) -> None:
    broken = await _own_client_broken(upstream, _LoopClosed(), stream=False)
    error = broken.answer.json()["error"]
    assert (broken.answer.status_code, error["code"], error["type"]) == (500, "router_error", "server_error")
    assert error["attempts"] == [{"candidate": "mock/ok", "reason": "router_error", "status": None}]
    # One failure would have opened mock/ok's breaker had it been blamed on the upstream.
    after = broken.after
    assert (after.status_code, after.headers["x-router-model"], after.headers["x-router-attempts"]) == (
        200,
        "mock/ok",
        "1",
    )
    assert all(view is None or view.consecutive_failures == 0 for view in broken.breakers)
    assert (broken.latency, broken.in_flight) == (None, 0)  # no first-byte-timeout penalty; slot released


@pytest.mark.anyio
async def test_a_stream_cut_by_the_routers_own_client_says_router_error_and_blames_no_upstream(
    upstream: MockUpstream,
) -> None:
    broken = await _own_client_broken(upstream, _BreaksMidStream(), stream=True)
    cut = broken.answer
    error = json.loads(cut.text.rstrip("\n").rsplit("\n\n", 1)[-1].removeprefix("data: "))["error"]
    assert (cut.status_code, error["code"]) == (200, "router_error")
    assert "see the server log" in error["message"] and "[DONE]" not in cut.text
    assert (broken.after.headers["x-router-model"], broken.after.headers["x-router-attempts"]) == ("mock/ok", "1")
    assert all(view is None or view.consecutive_failures == 0 for view in broken.breakers)
