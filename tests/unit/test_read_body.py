"""read_body: the whole body under the body's deadline, whether the server holds it already or not.

These pin that every ``receive()`` is awaited as ``await`` would (its result, its exceptions, a
cancellation), that a body which does not arrive in time is a 408, and the size cap a 413; alone
(a deadline of its own) and inside the request's scope as the middleware reads it (a held
listening scope, whose one timer bounds the read).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asgi_router.core.deadlines import Deadline
from asgi_router.core.router_errors import RouterError
from asgi_router.inbound.body import ClientGone, read_body
from asgi_router.inbound.disconnect import WATCH_AFTER, ListeningScope

from ..doubles import FAKE_CLOCK_BACKEND

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> object:
    """The loop's timers run on a fake clock: the limits these tests cross take no real time."""
    return FAKE_CLOCK_BACKEND


_SCOPE: dict[str, Any] = {"type": "http", "headers": []}


def _request(body: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.request", "body": body, "more_body": more}


async def test_a_body_the_server_already_holds_is_read_in_one_receive() -> None:
    calls = 0

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return _request(b'{"model":"m"}')

    assert await read_body(_SCOPE, receive, 1024, 30.0) == b'{"model":"m"}'
    assert calls == 1
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_body_still_arriving_is_awaited_to_the_end_and_joined() -> None:
    parts = asyncio.Queue[dict[str, Any]]()

    async def receive() -> dict[str, Any]:
        return await parts.get()  # suspends on its first step: nothing has arrived yet

    async def client() -> None:
        await asyncio.sleep(0.01)
        await parts.put(_request(b'{"model":', more=True))
        await asyncio.sleep(0.01)
        await parts.put(_request(b'"m"}'))

    sending = asyncio.ensure_future(client())
    assert await read_body(_SCOPE, receive, 1024, 5.0) == b'{"model":"m"}'
    await sending


class _NeverDelivers:
    """A ``receive`` whose first call waits for ever; records being cancelled."""

    def __init__(self) -> None:
        self.ended: list[str] = []

    async def __call__(self) -> dict[str, Any]:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise
        return _request(b"")


async def test_a_first_receive_that_never_delivers_is_a_408_and_is_cancelled() -> None:
    receive = _NeverDelivers()
    refused = await read_body(_SCOPE, receive, 1024, 0.05)
    assert isinstance(refused, RouterError) and refused.status == 408
    assert receive.ended == ["cancelled"]
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_a_cancelled_request_cancels_a_waiting_first_receive_and_propagates() -> None:
    receive = _NeverDelivers()
    reading = asyncio.ensure_future(read_body(_SCOPE, receive, 1024, 30.0))
    await asyncio.sleep(0.01)
    reading.cancel()  # e.g. the server shutting down
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert receive.ended == ["cancelled"]


@pytest.mark.parametrize("waits_first", [False, True], ids=["at-once", "after-waiting"])
async def test_a_failing_receive_raises_as_awaiting_it_would(waits_first: bool) -> None:
    async def receive() -> dict[str, Any]:
        if waits_first:
            await asyncio.sleep(0)
        raise RuntimeError("server bug")

    with pytest.raises(RuntimeError, match="server bug"):
        await read_body(_SCOPE, receive, 1024, 30.0)


@pytest.mark.parametrize("waits_first", [False, True], ids=["at-once", "after-waiting"])
async def test_a_client_gone_before_its_body_is_reported_either_way(waits_first: bool) -> None:
    async def receive() -> dict[str, Any]:
        if waits_first:
            await asyncio.sleep(0)
        return {"type": "http.disconnect"}

    with pytest.raises(ClientGone):
        await read_body(_SCOPE, receive, 1024, 30.0)


async def test_an_oversized_body_held_at_once_is_a_413() -> None:
    async def receive() -> dict[str, Any]:
        return _request(b"x" * 2048)

    refused = await read_body(_SCOPE, receive, 1024, 30.0)
    assert isinstance(refused, RouterError) and refused.status == 413


async def test_a_receive_returning_a_plain_future_works_too() -> None:
    loop = asyncio.get_running_loop()

    def receive() -> asyncio.Future[dict[str, Any]]:
        future: asyncio.Future[dict[str, Any]] = loop.create_future()
        loop.call_later(0.01, future.set_result, _request(b"{}"))
        return future

    assert await read_body(_SCOPE, receive, 1024, 5.0) == b"{}"  # type: ignore[arg-type]


# --- inside the request's scope: the read is bounded by the scope's timer ---------------------


class _Request:
    """The listening scope's party: the request whose client never leaves in these tests."""

    def __init__(self) -> None:
        self.told: list[str] = []

    async def receive(self) -> dict[str, Any]:  # never called: the scope is held throughout
        raise AssertionError("a held scope does not listen")

    def client_left(self, scope: Deadline) -> None:
        self.told.append("left")

    def complete(self) -> None:
        self.told.append("done")


def _counting_timers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, object]]:
    """The loop timers that deadlines set from now on, with the deadline (the test loop is
    asyncio's own; a ``receive`` that sleeps sets timers of its own, not counted)."""
    loop = asyncio.get_running_loop()
    set_at: list[tuple[float, object]] = []
    call_at = loop.call_at

    def counted(when: float, callback: Any, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, Deadline):
            set_at.append((when, owner))
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counted)
    return set_at


async def test_in_the_requests_scope_a_first_receive_that_never_delivers_is_a_408_on_its_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    receive = _NeverDelivers()
    party = _Request()
    started = asyncio.get_running_loop().time()
    async with asyncio.timeout(5):  # a read nothing ends would fail here, not hang
        with ListeningScope(party, WATCH_AFTER, held=True) as request:
            set_at = _counting_timers(monkeypatch)
            refused = await read_body(_SCOPE, receive, 1024, 0.1)
            assert isinstance(refused, RouterError) and refused.status == 408
            assert receive.ended == ["cancelled"]
            await asyncio.sleep(0)  # the request goes on to answer: its task is not cancelled
            # The scope's one timer, set for its mark and again for the read's bound: the read
            # made no timer of its own.
            assert [owner for _, owner in set_at] == [request, request] and set_at[0][0] < set_at[1][0]
    assert 0.1 <= asyncio.get_running_loop().time() - started < 3
    assert not request.expired and party.told == ["done"]
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_in_the_requests_scope_a_body_trickling_past_the_mark_and_the_limit_is_a_408() -> None:
    parts = asyncio.Queue[dict[str, Any]]()

    async def receive() -> dict[str, Any]:
        return await parts.get()

    async def client() -> None:
        for _ in range(100):  # a piece every 20 ms: 2 s for the whole body
            await asyncio.sleep(0.02)
            await parts.put(_request(b" ", more=True))

    sending = asyncio.ensure_future(client())
    started = asyncio.get_running_loop().time()
    async with asyncio.timeout(5):
        with ListeningScope(_Request(), WATCH_AFTER, held=True) as request:
            refused = await read_body(_SCOPE, receive, 1024, 0.15)
    sending.cancel()
    assert isinstance(refused, RouterError) and refused.status == 408
    assert 0.15 <= asyncio.get_running_loop().time() - started < 1.5  # the limit, not the 2 s the body would take
    assert not request.expired
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_in_the_requests_scope_a_read_done_in_time_is_never_cut_afterwards() -> None:
    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.01)
        return _request(b"{}")

    with ListeningScope(_Request(), WATCH_AFTER, held=True) as request:
        assert await read_body(_SCOPE, receive, 1024, 0.05) == b"{}"
        await asyncio.sleep(0.15)  # well past the read's limit: nothing cancels the request
    assert not request.expired
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_in_the_requests_scope_a_client_gone_mid_body_is_reported() -> None:
    messages = [_request(b"{", more=True), {"type": "http.disconnect"}]

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(0.01)
        return messages.pop(0)

    with ListeningScope(_Request(), WATCH_AFTER, held=True) as request:
        with pytest.raises(ClientGone):
            await read_body(_SCOPE, receive, 1024, 0.1)
        await asyncio.sleep(0.15)  # the bound ended with the read
    assert not request.expired
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


async def test_in_the_requests_scope_a_cancelled_request_propagates_through_the_read() -> None:
    receive = _NeverDelivers()

    async def request() -> bytes | RouterError:
        with ListeningScope(_Request(), WATCH_AFTER, held=True):
            return await read_body(_SCOPE, receive, 1024, 30.0)
        raise AssertionError("the scope swallowed a cancellation that was not its own")

    reading = asyncio.ensure_future(request())
    await asyncio.sleep(0.03)  # past the scope's mark
    reading.cancel()  # e.g. the server shutting down
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert receive.ended == ["cancelled"]
