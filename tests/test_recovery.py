"""Recovery and sickness, end to end: stepwise return after an outage, slowness as a symptom.

Upstreams are the test kit's :class:`~asgi_router.testing.FakeUpstream` on 127.0.0.1 (two
providers, ``a`` and ``b``, both pointing at it). Where a test counts shares or walks through a
minute-long outage, the router runs on an injected :class:`~tests.doubles.FakeClock` (the
calls still cross real sockets); where it measures times to first byte, it runs on the real
clock with compressed settings (``window = 1``, targets of tens of milliseconds).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from asgi_lifespan import LifespanManager

from asgi_router import ModelRouter, RouterSettings
from asgi_router.resilience.breaker import Phase
from asgi_router.testing import FakeUpstream, reply

from .conftest import host_app
from .doubles import FakeClock
from .metrics_helpers import Scrape
from .resilient import chat, record_of
from .waiting import eventually

pytestmark = pytest.mark.anyio

#: The compressed breaker the issue's scenarios run on (the ramp at its defaults).
FAST = {"consecutive_failures": 2, "open_for": 1, "probe_interval": 0.2, "ramp_step": 2}


@asynccontextmanager
async def recovering(
    upstream: FakeUpstream, *, clock: Callable[[], float] | None = None, **settings: Any
) -> AsyncIterator[tuple[httpx2.AsyncClient, ModelRouter]]:
    """An in-process client and its router (lifespan running) over providers ``a`` and ``b``."""
    providers = {
        name: upstream.provider(timeouts={"connect": 1, "first_byte": 2, "idle": 2, "total": 10}, **extra)
        for name, extra in {"a": {}, "b": {}, **settings.pop("providers", {})}.items()
    }
    config = RouterSettings(
        providers=providers, allow_unauthenticated=True, metrics_route="/metrics", status_route="/status", **settings
    )
    router = ModelRouter(host_app(), settings=config, **({"clock": clock} if clock is not None else {}))
    async with (
        LifespanManager(router) as manager,
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=manager.app), base_url="http://r", timeout=30) as client,
    ):
        yield client, router


async def served_by(client: httpx2.AsyncClient, model: str = "group/g", **body: Any) -> str:
    response = await chat(client, model, **body)
    assert response.status_code == 200, response.text
    return response.headers["x-router-model"]


async def events(client: httpx2.AsyncClient, router: ModelRouter, **body: Any) -> list[tuple[str, str, str]]:
    response = await chat(client, "group/g", **body)
    assert response.status_code == 200, response.text
    record = await record_of(response, router)
    return [(event.candidate, event.outcome, event.reason) for event in record.events]


def phase(router: ModelRouter, key: str) -> Phase | None:
    view = router.state.breaker(key)
    return view.phase if view is not None else None


async def status_of(client: httpx2.AsyncClient, key: str) -> dict[str, Any]:
    data = (await client.get("/status.json")).json()
    for provider in data["providers"]:
        for candidate in provider["candidates"]:
            if candidate["key"] == key:
                return dict(candidate["breaker"])
    raise AssertionError(f"{key} is not on the status page")


async def scrape(client: httpx2.AsyncClient) -> Scrape:
    response = await client.get("/metrics")
    assert response.status_code == 200
    return Scrape(response.text)


# --- stepwise recovery ------------------------------------------------------------------------


async def test_a_recovered_model_gets_a_tenth_then_half_then_all_of_its_share_back(fake_upstream: FakeUpstream) -> None:
    clock = FakeClock()
    fake_upstream.script("primary", reply.status(503), reply.status(503), reply.ok())
    groups = {"g": {"members": ["a/primary", "b/backup"]}}
    async with recovering(fake_upstream, clock=clock, groups=groups, breaker=FAST) as (client, router):
        assert [await served_by(client), await served_by(client)] == ["b/backup", "b/backup"]
        assert phase(router, "a/primary") is Phase.OPEN
        clock.advance(1)
        assert await served_by(client) == "a/primary"  # the probe: recovered, and the ramp begins

        tenth = [await served_by(client) for _ in range(30)]
        assert tenth.count("a/primary") == 3
        assert (await status_of(client, "a/primary"))["notes"] == ["recovering 10% → 50%"]
        assert (await scrape(client)).value("asgi_router_ramp_share", candidate="a/primary") == 0.1
        skipped = await events(client, router)
        assert skipped == [("a/primary", "skipped", "recovering"), ("b/backup", "served", "served")]

        clock.advance(2)  # ramp_step without a failure: the next step
        half = [await served_by(client) for _ in range(10)]
        assert half.count("a/primary") == 5  # and the fifth success in a row ends the ramp
        assert [await served_by(client) for _ in range(10)] == ["a/primary"] * 10
        assert (await status_of(client, "a/primary"))["notes"] == []
        assert (await scrape(client)).value("asgi_router_ramp_share", candidate="a/primary") == 1.0
        assert (await scrape(client)).value("asgi_router_breaker_state", candidate="a/primary") == 0


async def test_a_failure_during_the_ramp_reopens_the_breaker(fake_upstream: FakeUpstream) -> None:
    clock = FakeClock()
    fake_upstream.script("primary", reply.status(503), reply.status(503), reply.ok())
    groups = {"g": {"members": ["a/primary", "b/backup"]}}
    async with recovering(fake_upstream, clock=clock, groups=groups, breaker=FAST) as (client, router):
        await served_by(client), await served_by(client)
        clock.advance(1)
        assert await served_by(client) == "a/primary"
        fake_upstream.script("primary", reply.status(503))  # it relapses
        winners = [await served_by(client) for _ in range(10)]
        assert winners == ["b/backup"] * 10  # the tenth tried it, failed, and failed over
        assert phase(router, "a/primary") is Phase.OPEN
        assert await events(client, router) == [
            ("a/primary", "skipped", "circuit_open"),
            ("b/backup", "served", "served"),
        ]
        clock.advance(0.2)  # probe_interval: the next request probes it again
        fake_upstream.script("primary", reply.ok())
        assert await served_by(client) == "a/primary"


async def test_with_one_candidate_the_ramp_never_turns_requests_into_502s(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("solo", reply.status(503), reply.status(503), reply.ok())
    groups = {"g": {"members": ["a/solo"]}}
    clock = FakeClock()
    async with recovering(fake_upstream, clock=clock, groups=groups, breaker=FAST, retries=0) as (client, router):
        assert (await chat(client, "group/g")).status_code == 502
        assert (await chat(client, "group/g")).status_code == 502
        assert phase(router, "a/solo") is Phase.OPEN
        clock.advance(1.05)  # open_for
        statuses = [(await chat(client, "group/g")).status_code for _ in range(20)]
        assert statuses == [200] * 20
        view = router.state.breaker("a/solo")
        assert view is not None and view.phase is Phase.CLOSED
        # Past its share, the one candidate is skipped as recovering and then tried anyway.
        fake_upstream.script("solo", reply.ok())
        assert await events(client, router) in (
            [("a/solo", "skipped", "recovering"), ("a/solo", "served", "served")],
            [("a/solo", "served", "served")],  # the ramp may have ended by now (successes in a row)
        )


async def test_at_the_defaults_a_primary_down_for_a_minute_serves_again_within_30_s_of_recovering(
    fake_upstream: FakeUpstream,
) -> None:
    """The independent sequence test: 503 for 60 s, then healthy; a request every 4 s."""
    clock = FakeClock(0.0)
    fake_upstream.script("primary", reply.status(503))
    groups = {"g": {"members": ["a/primary", "b/backup"]}}
    served: list[tuple[float, str]] = []
    async with recovering(fake_upstream, clock=clock, groups=groups) as (client, _):
        for _ in range(30):
            if clock.now >= 60:
                fake_upstream.script("primary", reply.ok())
            served.append((clock.now, await served_by(client)))
            clock.advance(4)
    back = [at for at, winner in served if winner == "a/primary"]
    assert back and back[0] >= 60
    assert back[0] - 60 <= 30
    assert [winner for _, winner in served[-5:]] == ["a/primary"] * 5  # and the ramp has ended


async def test_a_health_probe_that_closes_the_provider_starts_its_ramp(fake_upstream: FakeUpstream) -> None:
    clock = FakeClock()
    health = {"interval": 0.05, "path": "/models", "unhealthy_threshold": 1, "timeout": 1}
    groups = {"g": {"members": ["a/primary", "b/backup"]}}
    async with recovering(
        fake_upstream, clock=clock, groups=groups, breaker=FAST, providers={"a": {"health": health}}
    ) as (client, router):
        router.state.trip("a", router.settings.breaker, clock())  # as failing probes would
        clock.advance(1)
        await eventually(lambda: (view := router.state.breaker("a")) is not None and view.phase is Phase.CLOSED)
        view = router.state.breaker("a")
        assert view is not None and view.phase is Phase.CLOSED and view.ramp_step == 0
        winners = [await served_by(client) for _ in range(10)]
        assert winners.count("a/primary") == 1
        assert (await scrape(client)).value("asgi_router_ramp_share", candidate="a/primary") == 0.1


# --- slowness ---------------------------------------------------------------------------------

#: Slowness judged on a one-second window: three streamed calls are enough evidence.
SLOW_RULE = {"window": 1, "min_requests": 3, "consecutive_failures": 50, "ramp": []}


async def test_a_slow_and_failing_member_opens_with_cause_slow(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("sick", reply.slow(0.15), reply.status(503), reply.slow(0.15))
    groups = {"g": {"members": [{"ref": "a/sick", "latency_target": 0.05}, "b/fast"]}}
    async with recovering(fake_upstream, groups=groups, breaker=SLOW_RULE) as (client, router):
        winners = [await served_by(client, stream=True) for _ in range(3)]
        assert winners == ["a/sick", "b/fast", "a/sick"]  # one failure in three, the p90 three times the target
        view = router.state.breaker("a/sick")
        assert view is not None and (view.phase, view.cause) == (Phase.OPEN, "slow")
        response = await chat(client, "group/g", stream=True)
        record = await record_of(response, router)
        skipped = record.events[0]
        assert (skipped.candidate, skipped.reason, skipped.cause) == ("a/sick", "circuit_open", "slow")
        status = await status_of(client, "a/sick")
        assert status["cause"] == "slow"
        (note,) = status["notes"]
        assert note.startswith("opened: slow (p90 0.") and note.endswith(" s / target 0.05 s)")
        assert (await scrape(client)).value("asgi_router_slow_requests_total", candidate="a/sick") == 2


async def test_a_slow_but_healthy_member_is_tried_after_a_fast_one_and_comes_back_once_fast(
    fake_upstream: FakeUpstream,
) -> None:
    fake_upstream.script("slowpoke", reply.slow(0.15))
    groups = {"g": {"members": [{"ref": "a/slowpoke", "latency_target": 0.05}, "b/fast"]}}
    skipped = 0.0

    def clock() -> float:  # real time, so times to first byte are measured, moved on past the window
        return time.monotonic() + skipped

    async with recovering(fake_upstream, clock=clock, groups=groups, breaker=SLOW_RULE) as (client, router):
        assert [await served_by(client, stream=True) for _ in range(3)] == ["a/slowpoke"] * 3
        assert router.state.slow("a/slowpoke", clock())
        assert phase(router, "a/slowpoke") in (None, Phase.CLOSED)  # demoted, not cut off
        assert await served_by(client, stream=True) == "b/fast"
        assert (await status_of(client, "a/slowpoke"))["notes"] == ["slow"]

        fake_upstream.script("slowpoke", reply.ok())  # fast again
        skipped += 1.05  # the mark runs out with the window
        assert [await served_by(client, stream=True) for _ in range(4)] == ["a/slowpoke"] * 4
        assert not router.state.slow("a/slowpoke", clock())
        assert (await status_of(client, "a/slowpoke"))["notes"] == []


async def test_non_streamed_slowness_is_ignored_by_the_rule(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("thinker", reply.slow(0.15))
    groups = {"g": {"members": ["a/thinker", "b/fast"]}}
    breaker = {**SLOW_RULE, "latency_target": 0.05}
    async with recovering(fake_upstream, groups=groups, breaker=breaker) as (client, router):
        assert [await served_by(client) for _ in range(5)] == ["a/thinker"] * 5
        assert not router.state.slow("a/thinker", time.monotonic())
        with pytest.raises(AssertionError):  # not a streamed call: none counted as slow
            (await scrape(client)).value("asgi_router_slow_requests_total", candidate="a/thinker")


async def test_a_fast_member_with_errors_below_the_classic_thresholds_is_untouched(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("steady", reply.ok(), reply.ok(), reply.status(503), reply.ok(), reply.ok(), reply.ok())
    groups = {"g": {"members": ["a/steady", "b/fast"]}}
    breaker = {**SLOW_RULE, "latency_target": 1.0}
    async with recovering(fake_upstream, groups=groups, breaker=breaker) as (client, router):
        winners = [await served_by(client, stream=True) for _ in range(8)]
        assert winners == ["a/steady"] * 2 + ["b/fast"] + ["a/steady"] * 5
        assert phase(router, "a/steady") is Phase.CLOSED
        assert not router.state.slow("a/steady", time.monotonic())
