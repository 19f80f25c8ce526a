"""DisconnectWatch: the disconnect listener starts only for requests still going after a tick."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
import pytest

from asgi_router.disconnect import WATCH_AFTER, DisconnectWatch, Watching
from asgi_router.watchdog import TaskScope, Ticker, ticker_for

pytestmark = pytest.mark.anyio


class _Client:
    """An ASGI ``receive`` whose client leaves on demand; counts the calls and what ended them."""

    def __init__(self, before_leaving: list[dict[str, Any]] | None = None) -> None:
        self.calls = 0
        self.left = asyncio.Event()
        self.cancelled = 0
        self.heard = 0
        self._before = list(before_leaving or [])

    async def receive(self) -> dict[str, Any]:
        self.calls += 1
        if self._before:
            return self._before.pop(0)
        try:
            await self.left.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return {"type": "http.disconnect"}

    def on_left(self) -> None:
        self.heard += 1


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_work_done_within_the_first_tick_never_calls_receive() -> None:
    loop = asyncio.get_running_loop()
    client = _Client()
    before = ticker_for(loop).pending()
    watch = DisconnectWatch(loop, client.receive, client.on_left)
    await asyncio.sleep(0)  # a fast answer: a loop turn or two
    watch.close()
    await asyncio.sleep(WATCH_AFTER + 2 * Ticker.RESOLUTION)
    assert client.calls == 0 and not watch.listening
    assert ticker_for(loop).pending() == before


async def test_longer_work_listens_and_hears_the_client_leave() -> None:
    loop = asyncio.get_running_loop()
    client = _Client()
    watch = DisconnectWatch(loop, client.receive, client.on_left)
    await asyncio.sleep(WATCH_AFTER + 3 * Ticker.RESOLUTION)
    assert watch.listening and client.calls == 1 and client.heard == 0
    client.left.set()
    await _settle()
    assert client.heard == 1 and not watch.listening
    watch.close()


async def test_other_messages_are_skipped_until_the_disconnect() -> None:
    loop = asyncio.get_running_loop()
    client = _Client(before_leaving=[{"type": "http.request", "body": b"", "more_body": False}])
    watch = DisconnectWatch(loop, client.receive, client.on_left, after=0)
    await asyncio.sleep(2 * Ticker.RESOLUTION)
    assert client.calls == 2 and client.heard == 0
    client.left.set()
    await _settle()
    assert client.heard == 1
    watch.close()


async def test_closing_cancels_a_started_listener_and_reports_nothing() -> None:
    loop = asyncio.get_running_loop()
    client = _Client()
    watch = DisconnectWatch(loop, client.receive, client.on_left, after=0)
    await asyncio.sleep(2 * Ticker.RESOLUTION)
    assert watch.listening
    watch.close()
    await _settle()
    assert client.cancelled == 1 and client.heard == 0


async def test_a_failing_receive_is_logged_and_taken_as_the_client_gone(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    heard: list[bool] = []

    async def broken() -> dict[str, Any]:
        raise RuntimeError("server bug")

    with caplog.at_level(logging.ERROR, logger="asgi_router"):
        watch = DisconnectWatch(loop, broken, lambda: heard.append(True), after=0)
        await asyncio.sleep(2 * Ticker.RESOLUTION)
        await _settle()
    assert heard == [True]
    assert any("receive() failed" in record.getMessage() for record in caplog.records)
    watch.close()


async def test_watching_cancels_its_block_when_the_client_leaves_and_marks_done_on_the_way_out() -> None:
    loop = asyncio.get_running_loop()
    client = _Client()
    done: list[str] = []

    def left(scope: TaskScope | anyio.CancelScope) -> None:
        done.append("left")
        scope.cancel()

    loop.call_later(0.05, client.left.set)
    with Watching(loop, TaskScope(), client.receive, left, lambda: done.append("done")) as scope:
        await asyncio.sleep(5)
    assert scope.cancelled_caught and done == ["left", "done"]


async def test_watching_a_block_that_ends_first_never_listens_and_cancels_nothing() -> None:
    loop = asyncio.get_running_loop()
    client = _Client()
    with Watching(loop, TaskScope(), client.receive, lambda scope: scope.cancel(), lambda: None) as scope:
        await asyncio.sleep(0)
    await asyncio.sleep(WATCH_AFTER + 2 * Ticker.RESOLUTION)
    assert not scope.cancelled_caught and client.calls == 0
