"""EventBus: bounded per-sink queues; slow, blocking or raising sinks never reach the publisher."""

from __future__ import annotations

import asyncio
import threading

import anyio
import anyio.lowlevel
import pytest

from asgi_router.observability.events import RequestRecord
from asgi_router.observability.sinks import EventBus, RecentRequests

from ..doubles import on_fake_clock
from ..waiting import eventually

pytestmark = pytest.mark.anyio


def _record(index: int) -> RequestRecord:
    return RequestRecord(f"req-{index}", "mock/ok")


async def test_every_sink_gets_every_record_in_order() -> None:
    seen_async: list[str] = []
    seen_sync: list[str] = []

    async def async_sink(record: RequestRecord) -> None:
        seen_async.append(record.request_id)

    bus = EventBus([async_sink, lambda record: seen_sync.append(record.request_id)], capacity=100)
    async with anyio.create_task_group() as tasks:
        await tasks.start(bus.run)
        for index in range(20):
            bus.publish(_record(index))
            if index % 5 == 0:
                await anyio.lowlevel.checkpoint()
        assert await bus.drain(5)
        tasks.cancel_scope.cancel()
    expected = [f"req-{index}" for index in range(20)]
    assert seen_async == expected
    assert seen_sync == expected
    assert bus.dropped == 0


async def test_a_blocked_sink_drops_its_overflow_and_the_others_still_get_everything() -> None:
    release = threading.Event()
    recent = RecentRequests(100)

    blocked_on: set[int] = set()

    def blocking(record: RequestRecord) -> None:
        blocked_on.add(threading.get_ident())
        release.wait(10)

    bus = EventBus([blocking, recent], capacity=4)
    async with anyio.create_task_group() as tasks:
        await tasks.start(bus.run)
        for index in range(30):
            bus.publish(_record(index))
            await anyio.sleep(0.001)
        await eventually(lambda: len(recent.snapshot()) >= 30)
        release.set()
        tasks.cancel_scope.cancel()
    assert threading.get_ident() not in blocked_on  # publish never called the blocked sink in place
    assert [r.request_id for r in recent.snapshot()] == [f"req-{index}" for index in range(30)]
    # the blocked sink holds at most one batch (<= capacity) and a full queue; the rest dropped
    assert 30 - 2 * 4 <= bus.dropped < 30


async def test_a_raising_sink_is_logged_once_counted_always_and_keeps_receiving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []

    async def raising(record: RequestRecord) -> None:
        calls.append(record.request_id)
        raise RuntimeError("sink bug")

    def raising_sync(record: RequestRecord) -> None:
        raise RuntimeError("sync sink bug")

    bus = EventBus([raising, raising_sync], capacity=100)
    async with anyio.create_task_group() as tasks:
        await tasks.start(bus.run)
        for index in range(5):
            bus.publish(_record(index))
        assert await bus.drain(5)
        tasks.cancel_scope.cancel()
    assert len(calls) == 5
    assert bus.failures == 10
    assert len([r for r in caplog.records if "event sink" in r.getMessage()]) == 2


@on_fake_clock
async def test_drain_gives_up_after_its_grace_on_a_sink_that_never_returns() -> None:
    async def stuck(record: RequestRecord) -> None:
        await anyio.sleep_forever()

    bus = EventBus([stuck], capacity=10)
    async with anyio.create_task_group() as tasks:
        await tasks.start(bus.run)
        bus.publish(_record(0))
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await bus.drain(0.2) is False
        assert loop.time() - started == pytest.approx(0.2, abs=0.01)
        tasks.cancel_scope.cancel()


def test_without_running_workers_records_are_dropped_and_counted_while_a_direct_sink_is_called_in_place() -> None:
    class Direct:
        direct = True

        def __init__(self) -> None:
            self.seen: list[str] = []

        def __call__(self, record: RequestRecord) -> None:
            self.seen.append(record.request_id)

    direct = Direct()
    bus = EventBus([RecentRequests(10), direct], capacity=2)
    for index in range(5):
        bus.publish(_record(index))
    assert bus.dropped == 3  # the queued sink: 2 kept for a worker that never runs, 3 dropped
    assert direct.seen == [f"req-{index}" for index in range(5)]
    assert bus.lifespan_only() == ["RecentRequests"]


def test_recent_requests_keeps_only_the_newest() -> None:
    recent = RecentRequests(3)

    async def fill() -> None:
        for index in range(5):
            await recent(_record(index))

    anyio.run(fill)
    assert [r.request_id for r in recent.snapshot()] == ["req-2", "req-3", "req-4"]


def test_a_quiet_sink_is_not_queued_for_and_counts_no_drops() -> None:
    class Quiet:
        def __init__(self) -> None:
            self.is_quiet = True

        def __call__(self, record: RequestRecord) -> None:
            raise AssertionError("never called")

        def quiet(self) -> bool:
            return self.is_quiet

    sink = Quiet()
    bus = EventBus([sink], capacity=1)
    for index in range(3):
        bus.publish(_record(index))
    assert bus.dropped == 0  # nothing queued, nothing dropped
    sink.is_quiet = False
    for index in range(3):
        bus.publish(_record(index))
    assert bus.dropped == 2  # queued once awake (capacity 1), no worker running
