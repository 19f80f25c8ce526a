"""read_body: the whole body under the body's deadline, whether the server holds it already or not.

These pin that every ``receive()`` is awaited as ``await`` would (its result, its exceptions, a
cancellation), that a body which does not arrive in time is a 408, and the size cap a 413.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from asgi_router.core.router_errors import RouterError
from asgi_router.inbound.body import ClientGone, read_body

pytestmark = pytest.mark.anyio

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
