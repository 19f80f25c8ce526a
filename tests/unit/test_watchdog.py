"""TaskScope and its watchdogs: the router's own cancellation, without anyio's machinery.

These pin the asyncio semantics the attempt loop, the relay and the disconnect watcher rely on:
a scope swallows only its own cancellation, lets everyone else's through, and leaves the task's
cancellation count as it found it.
"""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest

from asgi_router.core.deadlines import ReadWatchdog, TaskScope, Ticker, Watchdog, new_scope, ticker_for, watchdog_for

pytestmark = pytest.mark.anyio

# A TaskScope is its own watchdog; a ReadWatchdog guards any scope (anyio's, on the httpx path).
WATCHDOGS = pytest.mark.parametrize("kind", ["task scope itself", "read watchdog"])


def _watchdog(kind: str, scope: TaskScope) -> Watchdog:
    return scope if kind == "task scope itself" else ReadWatchdog(scope)


async def _cancel_soon(scope: TaskScope | anyio.CancelScope, delay: float = 0.01) -> None:
    await asyncio.sleep(delay)
    scope.cancel()


async def test_a_scope_cancelled_from_another_task_ends_its_block_and_the_code_after_runs() -> None:
    reached_after = False
    with TaskScope() as scope:
        helper = asyncio.get_running_loop().create_task(_cancel_soon(scope))
        await asyncio.sleep(5)
    reached_after = True
    await helper
    assert scope.cancelled_caught and reached_after
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_an_enclosing_scopes_cancellation_passes_through_an_inner_scope() -> None:
    inner_exited_by_exception = False
    with TaskScope() as outer:
        helper = asyncio.get_running_loop().create_task(_cancel_soon(outer))
        try:
            with TaskScope() as inner:
                await asyncio.sleep(5)
        except asyncio.CancelledError:
            inner_exited_by_exception = True
            raise
    await helper
    assert inner_exited_by_exception
    assert outer.cancelled_caught and not inner.cancelled_caught


async def test_an_inner_scopes_cancellation_stops_at_it_and_the_outer_block_goes_on() -> None:
    with TaskScope() as outer:
        with TaskScope() as inner:
            helper = asyncio.get_running_loop().create_task(_cancel_soon(inner))
            await asyncio.sleep(5)
        await asyncio.sleep(0)  # still inside outer, no longer cancelled
        still_running = True
    await helper
    assert inner.cancelled_caught and not outer.cancelled_caught and still_running


async def test_someone_elses_cancellation_propagates_even_when_the_scope_was_cancelled_too() -> None:
    async def body(scopes: list[TaskScope]) -> None:
        with TaskScope() as scope:
            scopes.append(scope)
            await asyncio.sleep(5)

    scopes: list[TaskScope] = []
    task = asyncio.get_running_loop().create_task(body(scopes))
    await asyncio.sleep(0.01)
    scopes[0].cancel()
    task.cancel()  # e.g. the server cancelling the request task at the same time
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not scopes[0].cancelled_caught


async def test_cancelling_after_the_block_ended_is_a_no_op() -> None:
    with TaskScope() as scope:
        await asyncio.sleep(0)
    scope.cancel()
    await asyncio.sleep(0.01)  # a stray cancellation would land here
    assert not scope.cancelled_caught
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_cancelling_twice_is_one_cancellation_and_the_count_is_restored() -> None:
    with TaskScope() as scope:

        async def twice() -> None:
            await asyncio.sleep(0.01)
            scope.cancel()
            scope.cancel()

        helper = asyncio.get_running_loop().create_task(twice())
        await asyncio.sleep(5)
    await helper
    assert scope.cancelled_caught
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    await asyncio.sleep(0.01)  # and nothing is left pending on the task


async def test_a_cancellation_that_did_not_land_before_the_block_ended_is_taken_back() -> None:
    # The helper cancels just as the block finishes without awaiting again: the request must
    # not linger on the task and hit a later, unrelated await.
    with TaskScope() as scope:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(fut.set_result, None)
        await fut
    scope.cancel()  # after exit: nothing happens
    await asyncio.sleep(0.01)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def _stuck_read(kind: str, *allowances: float) -> tuple[TaskScope, float]:
    """Arm each allowance in turn (a read arriving 20 ms into each but the last), then block in
    the last read until the watchdog cancels it; the scope and the seconds it all took."""
    started = time.monotonic()
    with TaskScope() as scope:
        watchdog = _watchdog(kind, scope)
        for allowance in allowances[:-1]:
            watchdog.arm(allowance)
            await asyncio.sleep(0.02)  # within the allowance
        watchdog.arm(allowances[-1])  # the read that never comes
        try:
            await asyncio.sleep(5)
        finally:
            watchdog.close()
    return scope, time.monotonic() - started


@WATCHDOGS
async def test_a_read_watchdog_cancels_its_task_scope_when_a_read_overruns_and_not_before(kind: str) -> None:
    scope, elapsed = await _stuck_read(kind, 0.05, 0.05)
    assert scope.cancelled_caught
    assert 0.06 <= elapsed < 2.0


@WATCHDOGS
async def test_a_disarmed_watchdog_never_cancels(kind: str) -> None:
    with TaskScope() as scope:
        watchdog = _watchdog(kind, scope)
        watchdog.arm(0.01)
        watchdog.disarm()  # e.g. waiting on a slow client
        await asyncio.sleep(0.05)
        watchdog.close()
    assert not scope.cancelled_caught


async def test_new_scope_is_a_task_scope_only_for_asyncio_native_code() -> None:
    assert isinstance(new_scope(True), TaskScope)
    assert isinstance(new_scope(False), anyio.CancelScope)


async def test_a_task_scope_is_its_own_watchdog_and_an_anyio_scope_gets_one() -> None:
    scope = TaskScope()
    assert watchdog_for(scope) is scope
    assert isinstance(watchdog_for(new_scope(False)), ReadWatchdog)


async def test_leaving_an_armed_task_scope_leaves_the_ticker() -> None:
    ticker = ticker_for(asyncio.get_running_loop())
    before = ticker.pending()
    with TaskScope() as scope:
        scope.arm(30)
        assert ticker.pending() == before + 1
    assert ticker.pending() == before


async def test_an_anyio_task_group_inside_an_anyio_scope_sees_the_client_leave() -> None:
    # Why hedged plans keep an anyio scope: the race's task group must treat the cancellation
    # as its parent's and let it through.
    finished_group = False
    with new_scope(False) as outer:
        helper = asyncio.get_running_loop().create_task(_cancel_soon(outer))
        async with anyio.create_task_group() as group:
            group.start_soon(asyncio.sleep, 5)
            await asyncio.sleep(5)
        finished_group = True
    await helper
    assert outer.cancelled_caught and not finished_group


@WATCHDOGS
async def test_one_ticker_timer_serves_many_watchdogs_and_each_fires_late_never_early(kind: str) -> None:
    loop = asyncio.get_running_loop()
    ticker = ticker_for(loop)
    fired: dict[int, float] = {}

    async def read(index: int, allowance: float) -> None:
        started = loop.time()
        with TaskScope() as scope:
            watchdog = _watchdog(kind, scope)
            watchdog.arm(allowance)
            try:
                await asyncio.sleep(5)
            finally:
                watchdog.close()
        assert scope.cancelled_caught
        fired[index] = loop.time() - started

    allowances = [0.02 + 0.01 * (index % 5) for index in range(200)]
    async with anyio.create_task_group() as group:
        for index, allowance in enumerate(allowances):
            group.start_soon(read, index, allowance)
        await asyncio.sleep(0)
        assert ticker.pending() == 200
    for index, allowance in enumerate(allowances):
        assert allowance <= fired[index] < allowance + 0.5
    assert ticker.pending() == 0


@WATCHDOGS
async def test_a_closed_watchdog_leaves_the_ticker_and_a_rearmed_one_moves_to_a_later_slot(kind: str) -> None:
    ticker = ticker_for(asyncio.get_running_loop())
    before = ticker.pending()
    with TaskScope() as scope:
        watchdog = _watchdog(kind, scope)
        watchdog.arm(0.03)
        assert ticker.pending() == before + 1
        for _ in range(6):  # a chunk every 10 ms keeps pushing the limit out
            await asyncio.sleep(0.01)
            watchdog.arm(0.03)
        watchdog.close()
        assert ticker.pending() == before
        await asyncio.sleep(0.06)
    assert not scope.cancelled_caught


def test_a_finished_loop_and_its_ticker_are_collected_even_with_a_watchdog_left_pending() -> None:
    import gc
    import weakref

    async def make() -> tuple[weakref.ref[Ticker], weakref.ref[asyncio.AbstractEventLoop]]:
        loop = asyncio.get_running_loop()
        with TaskScope() as scope:
            ReadWatchdog(scope).arm(60)  # never closed: its slot and the ticker's timer stay
        return weakref.ref(ticker_for(loop)), weakref.ref(loop)

    ticker, loop = asyncio.run(make())
    gc.collect()
    assert ticker() is None and loop() is None


async def test_a_watchdog_closed_before_the_next_tick_never_takes_a_slot() -> None:
    ticker = ticker_for(asyncio.get_running_loop())
    with TaskScope() as scope:
        scope.arm(30)  # arrives: only a list append
        assert ticker.pending() >= 1 and scope.waiting()
    assert not scope.waiting()
    slotted_before = sum(len(members) for members in ticker._slots.values())
    await asyncio.sleep(2 * Ticker.RESOLUTION)  # the tick drops it
    assert sum(len(members) for members in ticker._slots.values()) == slotted_before
    assert scope not in ticker._arrivals


@WATCHDOGS
async def test_an_allowance_shorter_than_a_tick_fires_at_the_next_tick_never_before(kind: str) -> None:
    scope, elapsed = await _stuck_read(kind, 0.002)
    assert scope.cancelled_caught
    assert 0.002 <= elapsed < 0.5
