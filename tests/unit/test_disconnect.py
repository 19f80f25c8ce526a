"""ListeningScope: the disconnect listener starts only for requests still going after WATCH_AFTER."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import Any

import pytest

from asgi_router.core.deadlines import Deadline
from asgi_router.inbound.disconnect import WATCH_AFTER, ListeningScope

from ..doubles import FAKE_CLOCK_BACKEND

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> object:
    """The loop's timers run on a fake clock: the limits these tests cross take no real time."""
    return FAKE_CLOCK_BACKEND


# How long past its time a loop timer may fire on a busy machine, for the waits below.
SLACK = 0.02


class _Client:
    """The watched request: an ASGI ``receive`` whose client leaves on demand, counting the calls
    and what ended them, and what the scope told it (``client_left``, ``complete``)."""

    def __init__(self, before_leaving: list[dict[str, Any]] | None = None, *, cancel_on_leave: bool = True) -> None:
        self.calls = 0
        self.left = asyncio.Event()
        self.cancelled = 0
        self.told: list[str] = []
        self._cancel = cancel_on_leave
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

    def client_left(self, scope: Deadline) -> None:
        self.told.append("left")
        if self._cancel:
            scope.cancel()

    def complete(self) -> None:
        self.told.append("done")


class _BrokenClient(_Client):
    async def receive(self) -> dict[str, Any]:
        raise RuntimeError("server bug")


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def _watch(client: _Client, after: float = WATCH_AFTER) -> ListeningScope:
    return ListeningScope(client, after)


async def test_work_done_before_watch_after_never_calls_receive() -> None:
    client = _Client()
    with _watch(client) as scope:
        await asyncio.sleep(0)  # a fast answer: a loop turn or two
    await asyncio.sleep(WATCH_AFTER + SLACK)
    assert client.calls == 0 and not scope.expired and client.told == ["done"]


async def test_longer_work_listens_and_a_client_leaving_cancels_the_block_before_it_is_marked_done() -> None:
    loop = asyncio.get_running_loop()
    client = _Client()
    watching = _watch(client)
    loop.call_later(WATCH_AFTER + 3 * SLACK, client.left.set)
    with watching as scope:
        await asyncio.sleep(WATCH_AFTER + 2 * SLACK)
        assert watching.listening and client.calls == 1 and client.told == []
        await asyncio.sleep(5)
    assert scope.expired and client.told == ["left", "done"] and not watching.listening


async def test_a_held_scope_never_calls_receive_before_listen_and_a_passed_mark_listens_at_once() -> None:
    client = _Client()
    watching = ListeningScope(client, 0, held=True)
    with watching:
        await asyncio.sleep(2 * SLACK)  # the mark has passed: the body is still being read
        assert client.calls == 0 and not watching.listening
        watching.listen()
        assert watching.listening
        await _settle()
        assert client.calls == 1
    await _settle()
    assert client.cancelled == 1 and client.told == ["done"]


async def test_a_held_scope_listening_before_its_mark_starts_the_listener_at_the_mark() -> None:
    client = _Client()
    watching = ListeningScope(client, WATCH_AFTER, held=True)
    with watching:
        watching.listen()
        assert not watching.listening
        await asyncio.sleep(WATCH_AFTER + 2 * SLACK)
        assert watching.listening and client.calls == 1


async def test_a_deadline_inside_the_scope_rides_on_its_timer_and_still_ends_its_block() -> None:
    client = _Client()
    with ListeningScope(client, WATCH_AFTER, held=True):
        with Deadline() as read:
            read.arm(2 * WATCH_AFTER)
            assert read._handle is None  # no loop timer of its own
            await asyncio.sleep(5)
        assert client.calls == 0  # held: the mark passed without a listener
    assert read.expired and client.told == ["done"]


async def test_other_messages_are_skipped_until_the_disconnect() -> None:
    client = _Client(before_leaving=[{"type": "http.request", "body": b"", "more_body": False}], cancel_on_leave=False)
    with _watch(client, 0):
        await asyncio.sleep(2 * SLACK)
        assert client.calls == 2 and client.told == []
        client.left.set()
        await _settle()
        assert client.told == ["left"]


async def test_leaving_the_block_cancels_a_started_listener_and_reports_nothing() -> None:
    client = _Client()
    watching = _watch(client, 0)
    with watching:
        await asyncio.sleep(2 * SLACK)
        assert watching.listening
    await _settle()
    assert client.cancelled == 1 and client.told == ["done"] and not watching.listening


async def test_a_failing_receive_is_logged_and_taken_as_the_client_gone(caplog: pytest.LogCaptureFixture) -> None:
    client = _BrokenClient(cancel_on_leave=False)
    with caplog.at_level(logging.ERROR, logger="asgi_router"):
        with _watch(client, 0):
            await asyncio.sleep(2 * SLACK)
            await _settle()
    assert client.told == ["left", "done"]
    assert any("receive() failed" in record.getMessage() for record in caplog.records)


async def test_a_finished_watch_leaves_nothing_for_the_cyclic_collector() -> None:
    gc.collect()
    gc.disable()
    try:
        for after in (WATCH_AFTER, 0):
            client = _Client()
            with _watch(client, after):
                await asyncio.sleep(2 * SLACK)
            await _settle()
        del client
        assert gc.collect() == 0
    finally:
        gc.enable()


async def test_a_held_scope_left_before_any_deadline_was_armed_inside_made_no_timer() -> None:
    client = _Client()
    watching = ListeningScope(client, WATCH_AFTER, held=True)
    with watching:
        assert watching._handle is None  # a request refused before its body: no loop timer
    await asyncio.sleep(WATCH_AFTER + SLACK)
    assert client.calls == 0 and client.told == ["done"]
