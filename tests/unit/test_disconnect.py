"""DisconnectWatch: the disconnect listener starts only for requests still going after a tick."""

from __future__ import annotations

import asyncio

import pytest

from asgi_router.disconnect import WATCH_AFTER, DisconnectWatch
from asgi_router.watchdog import TaskScope, Ticker, ticker_for

pytestmark = pytest.mark.anyio


class _Client:
    """Stands in for ``_Exchange.watch_disconnect``: records that it ran and cancels on demand."""

    def __init__(self) -> None:
        self.listening = 0
        self.left = asyncio.Event()
        self.stopped = False

    async def listen(self, scope: TaskScope) -> None:
        self.listening += 1
        try:
            await self.left.wait()
            scope.cancel()
        except asyncio.CancelledError:
            self.stopped = True
            raise


async def test_work_done_within_the_first_tick_never_starts_a_listener() -> None:
    loop = asyncio.get_running_loop()
    client = _Client()
    before = ticker_for(loop).pending()
    with TaskScope() as scope:
        watch = DisconnectWatch(loop, client.listen, scope)
        await asyncio.sleep(0)  # a fast answer: a loop turn or two
        watch.close()
    await asyncio.sleep(WATCH_AFTER + 2 * Ticker.RESOLUTION)
    assert client.listening == 0 and not watch.listening
    assert ticker_for(loop).pending() == before


async def test_longer_work_gets_a_listener_and_a_client_leaving_cancels_it() -> None:
    loop = asyncio.get_running_loop()
    client = _Client()
    with TaskScope() as scope:
        watch = DisconnectWatch(loop, client.listen, scope)
        loop.call_later(0.1, client.left.set)  # the client leaves while the upstream is slow
        started = loop.time()
        try:
            await asyncio.sleep(5)
        finally:
            watch.close()
    assert scope.cancelled_caught and client.listening == 1
    assert loop.time() - started < 1.0


async def test_closing_stops_a_started_listener() -> None:
    loop = asyncio.get_running_loop()
    client = _Client()
    with TaskScope() as scope:
        watch = DisconnectWatch(loop, client.listen, scope)
        await asyncio.sleep(WATCH_AFTER + 3 * Ticker.RESOLUTION)
        assert watch.listening
        watch.close()
    await asyncio.sleep(0)
    assert client.stopped and not scope.cancelled_caught
