"""Attempt events and sinks, through the router: off the request path, bounded, key-free."""

from __future__ import annotations

import dataclasses
import logging
import threading

import anyio
import httpx2
import pytest

from asgi_router import ModelRouter
from asgi_router.observability.events import AttemptEvent, RequestRecord

from .conftest import API_KEY, host_app, make_settings
from .doubles import RecordSink
from .mock_upstream import MockUpstream
from .resilient import chat, record_of, routed_router, tag
from .waiting import eventually

pytestmark = pytest.mark.anyio


async def test_raising_and_blocking_sinks_never_delay_or_fail_a_request(upstream: MockUpstream) -> None:
    release = threading.Event()

    def raising(record: RequestRecord) -> None:
        raise RuntimeError("sink bug")

    async def raising_async(record: RequestRecord) -> None:
        raise RuntimeError("async sink bug")

    def blocking(record: RequestRecord) -> None:
        release.wait(10)

    async def blocking_async(record: RequestRecord) -> None:
        await anyio.sleep_forever()

    collect = RecordSink()
    sinks = [raising, raising_async, blocking, blocking_async, collect]
    events = {"queue_size": 4, "shutdown_grace": 0.2}
    try:
        async with routed_router(upstream, sinks=sinks, events=events) as (client, router):
            # Two sinks block for good (until the test ends): a request that waited for a sink
            # would never finish.
            statuses = [(await chat(client, "mock/ok")).status_code for _ in range(20)]
            # Each raising sink has either been called with a record (and failed) or had it
            # dropped, its queue full while it was behind: the request never waits either way.
            raising_workers = [w for w in router.events._workers if w.sink in (raising, raising_async)]
            await eventually(lambda: len(collect) >= 20 and all(w.failures + w.dropped >= 20 for w in raising_workers))
        # and the lifespan's shutdown ended with them still stuck: they got shutdown_grace, not forever
    finally:
        release.set()
    assert statuses == [200] * 20
    assert len(collect) == 20  # the well-behaved sink got everything
    # both raising sinks were called for every request they were not too far behind to queue
    assert [w.failures + w.dropped for w in raising_workers] == [20, 20]
    assert router.events.failures >= 2 * 4
    # each blocked sink holds at most one batch and a full queue (4 + 4): the rest is dropped
    assert router.events.dropped >= 2 * (20 - 8)


@pytest.mark.both_transports
async def test_events_and_records_never_carry_the_api_key(upstream: MockUpstream, refused_url: str) -> None:
    collect = RecordSink()
    flaky = f"fail-1-{tag()}-503"
    groups = {"g": {"members": ["down/x", "mock/status-401", "mock/break-1", "mock2/ok"]}}
    async with routed_router(upstream, refused_url, sinks=[collect], groups=groups) as (client, router):
        for model, stream in [("group/g", False), ("group/g", True), (f"mock/{flaky}", False), ("x/y", False)]:
            await chat(client, model, stream=stream)
        assert await router.events.drain(5)
    assert len(collect) == 4
    reasons = {event.reason for record in collect for event in record.events}
    assert {"connect_error", "auth_error", "stream_interrupted", "upstream_5xx", "served"} <= reasons
    for record in collect:
        texts = [repr(record), str(dataclasses.asdict(record))] + [repr(event) for event in record.events]
        for text in texts:
            assert API_KEY not in text
            assert API_KEY[3:12] not in text


@pytest.mark.both_transports
async def test_every_attempt_is_one_frozen_event_with_index_timing_and_status(upstream: MockUpstream) -> None:
    model = f"fail-1-{tag()}-503"
    async with routed_router(upstream) as (client, router):
        response = await chat(client, f"mock/{model}", stream=True)
        record = await record_of(response, router)
    first, second = record.events
    assert (first.index, second.index) == (0, 1)
    assert (first.outcome, first.reason, first.status) == ("failed", "upstream_5xx", 503)
    assert (second.outcome, second.reason, second.status) == ("served", "served", 200)
    assert second.ttfb is not None and 0 <= second.ttfb <= second.latency
    assert record.status == 200 and record.winner == f"mock/{model}" and record.stream
    assert record.bytes_relayed == len(response.content)
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.reason = "served"  # type: ignore[misc]
    assert isinstance(first, AttemptEvent)


async def test_the_log_line_lists_every_attempt_including_retries(
    upstream: MockUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_router")
    model = f"fail-1-{tag()}-503"
    async with routed_router(upstream) as (client, router):
        response = await chat(client, f"mock/{model}")
        assert await router.events.drain(5)
    request_id = response.headers["x-request-id"]
    lines = [r.getMessage() for r in caplog.records if f"request_id={request_id}" in r.getMessage()]
    assert len(lines) == 1
    assert f"attempts=[mock/{model}:failed:upstream_5xx(503) mock/{model}:served:served(200)]" in lines[0]
    assert "status=200" in lines[0]


async def test_recent_requests_keeps_the_newest_few(upstream: MockUpstream) -> None:
    async with routed_router(upstream, events={"recent": 3}) as (client, router):
        ids = [(await chat(client, "mock/ok")).headers["x-request-id"] for _ in range(5)]
        assert await router.events.drain(5)
        kept = [record.request_id for record in router.recent.snapshot()]
    assert kept == ids[-3:]


async def test_recent_requests_are_kept_without_a_lifespan_while_sinks_get_nothing(upstream: MockUpstream) -> None:
    collect = RecordSink()
    router = ModelRouter(host_app(), settings=make_settings(upstream.url), sinks=[collect])
    try:
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router), base_url="http://router") as client:
            response = await chat(client, "mock/ok")
        assert response.status_code == 200
        [record] = router.recent.snapshot()
        assert (record.request_id, record.status, record.winner) == (
            response.headers["x-request-id"],
            200,
            "mock/ok",
        )
        assert collect == [] and router.events.pending  # queued, never delivered
    finally:
        await router.transport.aclose()
