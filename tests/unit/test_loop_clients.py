"""loop_clients.py: one client per running event loop, closed by ``aclose`` or by its loop's end."""

from __future__ import annotations

import asyncio

import anyio

from asgi_router.transports.loop_clients import LoopClients


class _Client:
    def __init__(self, number: int) -> None:
        self.number = number
        self.closed = False

    async def close(self) -> None:
        await asyncio.sleep(0)  # closing takes a turn of the loop, as a real client's does
        self.closed = True


class _Maker:
    def __init__(self) -> None:
        self.made: list[_Client] = []

    def __call__(self) -> _Client:
        self.made.append(_Client(len(self.made)))
        return self.made[-1]


def _clients() -> tuple[LoopClients[_Client], _Maker]:
    maker = _Maker()
    return LoopClients(maker, _Client.close, lambda client: client.closed), maker


def test_each_loop_gets_its_own_client_which_that_loops_end_closes() -> None:
    clients, maker = _clients()

    async def use() -> tuple[int, int]:
        first = clients.current()
        assert clients.current() is first  # the same loop: the same client
        return first.number, len(clients.clients())

    assert [asyncio.run(use()), anyio.run(use)] == [(0, 1), (1, 1)]
    assert [client.closed for client in maker.made] == [True, True]
    assert clients.clients() == []


def test_aclose_closes_the_running_loops_client_and_the_next_call_opens_another() -> None:
    clients, maker = _clients()

    async def use() -> list[int]:
        numbers = [clients.current().number]
        await clients.aclose()
        numbers.append(clients.current().number)
        maker.made[-1].closed = True  # closed by someone else: replaced, not reused
        numbers.append(clients.current().number)
        return numbers

    assert asyncio.run(use()) == [0, 1, 2]
    assert all(client.closed for client in maker.made)
