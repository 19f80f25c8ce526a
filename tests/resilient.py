"""Helpers for the resilience tests: a router with injected clock/random/sinks, and tags."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from asgi_lifespan import LifespanManager

from asgi_router import ModelRouter
from asgi_router.config.resilience_settings import RetryBudgetSettings
from asgi_router.observability.events import RequestRecord
from asgi_router.observability.sinks import Sink
from asgi_router.resilience.router_state import RouterState

from .conftest import host_app, make_settings
from .doubles import FakeClockLoop
from .fakes import ScriptedTransport
from .mock_upstream import MockUpstream
from .waiting import eventually

#: Fast, jitter-free-enough backoff for tests that only count retries.
FAST_BACKOFF = {"base": 0.005, "cap": 0.01}


def holds_no_retry(state: RouterState, provider: str) -> bool:
    """Whether every retry token ``provider`` was given has been given back.

    Asked through the state's own interface: with nothing in flight, a budget of at least one
    concurrent retry admits one only while none is outstanding (the token taken to ask is given
    straight back).
    """
    assert state.in_flight(provider) == 0, "ask once the provider is idle"
    if not state.begin_retry(provider, RetryBudgetSettings(ratio=0.01, min_concurrent=1)):
        return False
    state.end_retry(provider)
    return True


def tag() -> str:
    """A unique tag for a mock model id, so stateful scenarios and hit counts never collide."""
    return "x" + uuid.uuid4().hex[:10]


async def chat(client: httpx2.AsyncClient, model: str, **body: Any) -> httpx2.Response:
    return await client.post(
        "/v1/chat/completions", json={"model": model, "messages": [{"role": "user", "content": "hi"}], **body}
    )


@asynccontextmanager
async def routed_router(
    upstream: MockUpstream,
    refused_url: str | None = None,
    *,
    clock: Callable[[], float] | None = None,
    random: Callable[[], float] | None = None,
    sinks: Sequence[Sink] = (),
    router: dict[str, Any] | None = None,
    **overrides: Any,
) -> AsyncIterator[tuple[httpx2.AsyncClient, ModelRouter]]:
    """An in-process client and its router (lifespan running), built on ``overrides`` settings;
    ``router`` holds further ``ModelRouter`` keyword arguments (``transport``, ``state``)."""
    kwargs: dict[str, Any] = {"sinks": sinks, **(router or {})}
    if clock is not None:
        kwargs["clock"] = clock
    if random is not None:
        kwargs["random"] = random
    overrides.setdefault("backoff", FAST_BACKOFF)
    instance = ModelRouter(host_app(), settings=make_settings(upstream.url, refused_url, **overrides), **kwargs)  # type: ignore[attr-defined]
    async with (
        LifespanManager(instance) as manager,
        httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=manager.app), base_url="http://router", timeout=30
        ) as client,
    ):
        yield client, instance


def loop_now() -> float:
    """The running loop's time: on a :class:`~tests.doubles.FakeClockLoop`, its fake clock."""
    return asyncio.get_running_loop().time()


@asynccontextmanager
async def scripted_router(
    upstream: MockUpstream, transport: ScriptedTransport, **overrides: Any
) -> AsyncIterator[httpx2.AsyncClient]:
    """An in-process client of a router whose upstream is ``transport`` and whose clock is the
    running loop's, for a test marked ``on_fake_clock``: the router's waits are then exact and
    take no real time."""
    assert isinstance(asyncio.get_running_loop(), FakeClockLoop), "mark the test on_fake_clock"
    async with routed_router(upstream, clock=loop_now, router={"transport": transport}, **overrides) as (client, _):
        yield client


async def record_of(response: httpx2.Response, router: ModelRouter) -> RequestRecord:
    """The finished request's record, from the router's ring of recent requests."""
    assert await router.events.drain(5), "event sinks did not catch up"
    request_id = response.headers["x-request-id"]
    for record in router.recent.snapshot():
        if record.request_id == request_id:
            return record
    raise AssertionError(f"request {request_id} is not among the recent requests")


async def recorded(router: ModelRouter, request_id: str) -> RequestRecord:
    """The record of a request a served router (its own thread and loop) has finished: it lands
    in the ring of recent requests a moment after the response's last byte."""

    def found() -> RequestRecord | None:
        return next((r for r in router.recent.snapshot() if r.request_id == request_id), None)

    await eventually(found)
    record = found()
    assert record is not None
    return record


async def events_of(response: httpx2.Response, router: ModelRouter) -> list[tuple[str, str, str]]:
    """(candidate, outcome, reason) of every attempt event of ``response``'s request."""
    record = await record_of(response, router)
    return [(e.candidate, e.outcome, e.reason) for e in record.events]
