"""Circuit breakers, concurrency caps and health probes, end to end on the loopback upstream.

Breaker timing runs on an injected :class:`FakeClock`: "30 s later" is ``clock.advance(30)``.
"""

from __future__ import annotations

import functools
import json

import anyio
import pytest

from asgi_router import ModelRouter
from asgi_router.resilience.breaker import Phase
from bench.asgi_calls import receive_once

from .conftest import API_KEY, SentMessages, chat_scope, host_app, make_settings
from .doubles import FakeClock
from .mock_upstream import MockUpstream
from .resilient import chat, events_of, routed_router, tag
from .waiting import eventually

pytestmark = pytest.mark.anyio


def phase(router: ModelRouter, key: str) -> Phase | None:
    view = router.state.breaker(key)
    return view.phase if view is not None else None


async def test_breaker_opens_skips_probes_reopens_for_probe_interval_then_closes(upstream: MockUpstream) -> None:
    clock = FakeClock()
    model = f"fail-3-{tag()}-503"
    name = f"mock/{model}"
    groups = {"g": {"members": [name, "mock2/ok"]}}
    breaker = {"consecutive_failures": 2, "open_for": 30, "probe_interval": 10, "ramp": []}
    async with routed_router(upstream, clock=clock, groups=groups, breaker=breaker) as (client, router):

        async def winner() -> str:
            response = await chat(client, "group/g")
            assert response.status_code == 200
            return response.headers["x-router-model"]

        assert [await winner(), await winner()] == ["mock2/ok", "mock2/ok"]  # two failures: open
        assert phase(router, name) is Phase.OPEN
        skipped = await chat(client, "group/g")
        assert await events_of(skipped, router) == [(name, "skipped", "circuit_open"), ("mock2/ok", "served", "served")]
        assert skipped.headers["x-router-attempts"] == "1"  # a skip is not an attempt
        assert upstream.count(model) == 2  # no connection to an open candidate

        clock.advance(30)
        assert await winner() == "mock2/ok"  # the half-open probe fails (third failure) ...
        assert upstream.count(model) == 3
        view = router.state.breaker(name)
        assert view is not None and view.phase is Phase.OPEN and view.open_for == 10  # ... re-open, probe_interval

        clock.advance(9)
        assert await winner() == "mock2/ok"
        assert upstream.count(model) == 3  # 9 s into a 10 s wait: still skipped

        clock.advance(1)
        assert await winner() == name  # the probe succeeds and closes it (no ramp here)
        assert phase(router, name) is Phase.CLOSED
        assert await winner() == name
        assert upstream.count(model) == 5


async def test_when_every_candidate_is_open_the_one_opened_longest_ago_is_tried(upstream: MockUpstream) -> None:
    clock = FakeClock()
    first, second = f"status-503-{tag()}", f"status-503-{tag()}"
    groups = {"g": {"members": [f"mock/{first}", f"mock2/{second}"]}}
    breaker = {"consecutive_failures": 1}
    async with routed_router(upstream, clock=clock, groups=groups, breaker=breaker, retries=0) as (client, router):
        await chat(client, f"mock2/{second}")  # opens at t0
        clock.advance(5)
        await chat(client, f"mock/{first}")  # opens at t0 + 5
        clock.advance(1)
        response = await chat(client, "group/g")
        events = await events_of(response, router)
    assert events == [
        (f"mock/{first}", "skipped", "circuit_open"),
        (f"mock2/{second}", "skipped", "circuit_open"),
        (f"mock2/{second}", "failed", "upstream_5xx"),
    ]
    assert upstream.attempts(response.headers["x-request-id"]) == [second]
    assert response.status_code == 502  # decided by the one contacted, not by the skips
    assert response.headers["x-router-attempts"] == "1"


async def test_a_plan_of_one_open_candidate_is_still_tried_and_its_success_closes_it(upstream: MockUpstream) -> None:
    clock = FakeClock()
    model = f"fail-1-{tag()}-503"
    async with routed_router(upstream, clock=clock, breaker={"consecutive_failures": 1}, retries=0) as (client, router):
        failed = await chat(client, f"mock/{model}")
        assert phase(router, f"mock/{model}") is Phase.OPEN
        served = await chat(client, f"mock/{model}")
        events = await events_of(served, router)
        assert phase(router, f"mock/{model}") is Phase.CLOSED
    assert failed.status_code == 502
    assert served.status_code == 200
    assert events == [(f"mock/{model}", "skipped", "circuit_open"), (f"mock/{model}", "served", "served")]


async def test_an_open_breaker_stops_same_candidate_retries(upstream: MockUpstream) -> None:
    model = f"status-503-{tag()}"
    async with routed_router(upstream, retries=5, breaker={"consecutive_failures": 2}) as (client, router):
        response = await chat(client, f"mock/{model}")
        events = await events_of(response, router)
    assert upstream.count(model) == 2
    assert [reason for _, _, reason in events] == ["upstream_5xx", "upstream_5xx", "circuit_open"]


@pytest.mark.parametrize(("member", "reason"), [("break-2", "stream_interrupted"), ("stall-2", "timeout")])
@pytest.mark.both_transports
async def test_a_late_failure_after_commit_counts_against_the_candidate(
    upstream: MockUpstream, member: str, reason: str
) -> None:
    groups = {"g": {"members": [f"mock/{member}", "mock2/ok"]}}
    timeouts = {"connect": 1, "first_byte": 1, "idle": 0.15, "total": 10}
    breaker = {"consecutive_failures": 2}
    async with routed_router(upstream, groups=groups, breaker=breaker, timeouts=timeouts) as (client, router):
        for _ in range(2):
            response = await chat(client, "group/g", stream=True)
            assert response.headers["x-router-model"] == f"mock/{member}"  # committed, then broke
            assert f'"code":"{reason}"' in response.text
        assert (await events_of(response, router))[-1] == (f"mock/{member}", "failed", reason)
        assert phase(router, f"mock/{member}") is Phase.OPEN
        after = await chat(client, "group/g", stream=True)
        assert after.headers["x-router-model"] == "mock2/ok"
        assert (await events_of(after, router))[0] == (f"mock/{member}", "skipped", "circuit_open")


@pytest.mark.both_transports
async def test_connect_errors_open_the_provider_breaker_for_all_its_models(
    upstream: MockUpstream, refused_url: str
) -> None:
    groups = {"g": {"members": ["down/a", "down/b", "mock/ok"]}, "h": {"members": ["down/c", "mock/ok"]}}
    async with routed_router(upstream, refused_url, groups=groups, breaker={"consecutive_failures": 2}) as (
        client,
        router,
    ):
        first = await chat(client, "group/g")
        assert phase(router, "down") is Phase.OPEN
        assert phase(router, "down/a") is Phase.CLOSED  # one failure each: the candidates stay closed
        second = await chat(client, "group/h")
        events = await events_of(second, router)
    assert first.headers["x-router-model"] == "mock/ok"
    assert events == [("down/c", "skipped", "circuit_open"), ("mock/ok", "served", "served")]


async def test_5xx_answers_count_against_the_candidate_not_the_provider(upstream: MockUpstream) -> None:
    bad = [f"mock/status-503-{tag()}" for _ in range(3)]
    groups = {"g": {"members": [*bad, "mock/ok"]}}
    async with routed_router(upstream, groups=groups, breaker={"consecutive_failures": 2}) as (client, router):
        response = await chat(client, "group/g")
        assert phase(router, "mock") is None  # the provider answered every time
    assert response.headers["x-router-model"] == "mock/ok"


async def test_a_provider_at_max_concurrent_is_skipped_as_saturated(upstream: MockUpstream) -> None:
    providers = {"capped": {"base_url": f"{upstream.url}/v1", "api_key": API_KEY, "max_concurrent": 1}}  # type: ignore[attr-defined]
    groups = {"g": {"members": ["capped/ok", "mock2/ok"]}}
    async with routed_router(upstream, providers=providers, groups=groups) as (client, router):
        state = router.state
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(chat, client, "capped/slow-400")
            await eventually(lambda: state.in_flight("capped") == 1)
            grouped = await chat(client, "group/g")
            alone = await chat(client, "capped/ok")
        after = await chat(client, "capped/ok")
        events = await events_of(grouped, router)
    assert grouped.headers["x-router-model"] == "mock2/ok"
    assert events == [("capped/ok", "skipped", "saturated"), ("mock2/ok", "served", "served")]
    assert alone.status_code == 503
    assert alone.json()["error"]["code"] == "upstream_saturated"
    assert after.status_code == 200  # the slot came back when the slow request ended
    assert state.in_flight("capped") == 0


async def test_a_committed_stream_holds_its_concurrency_slot_until_it_ends(upstream: MockUpstream) -> None:
    providers = {"capped": {"base_url": f"{upstream.url}/v1", "api_key": API_KEY, "max_concurrent": 1}}  # type: ignore[attr-defined]
    async with routed_router(upstream, providers=providers) as (client, router):
        state = router.state
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(functools.partial(chat, client, "capped/trickle-20", stream=True))  # ~0.4 s of streaming
            await eventually(lambda: state.in_flight("capped") == 1)
            await anyio.sleep(0.1)  # well after the commit
            during = await chat(client, "capped/ok")
        assert during.status_code == 503
        assert state.in_flight("capped") == 0


async def test_health_probes_open_the_provider_breaker_and_let_it_close_again(upstream: MockUpstream) -> None:
    probe = tag()
    upstream.health_status[probe] = 503
    health = {"interval": 0.05, "path": f"/health/{probe}", "unhealthy_threshold": 2, "timeout": 1}
    providers = {"hp": {"base_url": f"{upstream.url}/v1", "api_key": API_KEY, "health": health}}  # type: ignore[attr-defined]
    groups = {"g": {"members": ["hp/ok", "mock2/ok"]}}
    breaker = {"open_for": 0.15, "probe_interval": 0.1, "ramp": []}
    async with routed_router(upstream, providers=providers, groups=groups, breaker=breaker) as (client, router):
        await eventually(lambda: phase(router, "hp") is Phase.OPEN)
        while_down = await chat(client, "group/g")
        assert await events_of(while_down, router) == [
            ("hp/ok", "skipped", "circuit_open"),
            ("mock2/ok", "served", "served"),
        ]
        upstream.health_status[probe] = 200
        await eventually(lambda: phase(router, "hp") is Phase.CLOSED)
        recovered = await chat(client, "group/g")
        assert recovered.headers["x-router-model"] == "hp/ok"
        probes_at_shutdown = upstream.health_hits[probe]
    await anyio.sleep(0.2)
    assert upstream.health_hits[probe] <= probes_at_shutdown + 1  # probing stopped with the lifespan


async def test_without_health_settings_nothing_is_probed(upstream: MockUpstream) -> None:
    before = sum(upstream.health_hits.values())
    async with routed_router(upstream) as (client, _):
        await anyio.sleep(0.1)
        await chat(client, "mock/ok")
    assert sum(upstream.health_hits.values()) == before


@pytest.mark.both_transports
async def test_a_client_leaving_mid_stream_gives_the_slot_back(upstream: MockUpstream) -> None:
    """The relay is cancelled, so it never reports; the request's end must still free the slot."""
    providers = {"capped": {"base_url": f"{upstream.url}/v1", "api_key": API_KEY, "max_concurrent": 1}}  # type: ignore[attr-defined]
    router = ModelRouter(host_app(), settings=make_settings(upstream.url, providers=providers))  # type: ignore[attr-defined]
    request = json.dumps({"model": "capped/trickle-500", "stream": True, "messages": []}).encode()
    sent = SentMessages()

    async def chunks_flowing() -> None:
        await eventually(lambda: len(sent) >= 3)  # the response started and chunks are flowing: then leave

    receive = receive_once(request, then=chunks_flowing)

    scope = chat_scope()
    with anyio.fail_after(5):
        await router(scope, receive, sent)  # type: ignore[arg-type]
    await router.transport.aclose()
    state = router.state
    assert sent[0]["type"] == "http.response.start"
    assert sent[-1].get("more_body", True)  # cut off mid-stream, not finished
    assert state.in_flight("capped") == 0
