"""One upstream client per running event loop, for the transports.

An HTTP client belongs to the event loop it was made on: aiohttp's session and connector, and
httpcore's pool and locks, hold that loop, and used from another one they fail ("attached to a
different loop", "Event loop is closed"). One router may well be called on several loops: the
server's, but also a fresh one per call of a ``TestClient(app)`` used without ``with``, one per
``asyncio.run`` in a test, a thread with a loop of its own. So every loop gets a client of its
own, made on that loop's first request (or on lifespan startup), and closed either

* by :meth:`LoopClients.aclose` on that loop (the router's lifespan shutdown), or
* when that loop ends: a small *keeper* task per client waits for nothing, and ``asyncio.run``,
  ``asyncio.Runner``, ``anyio.run`` (so Starlette's ``TestClient`` and anyio's blocking
  portals) and uvicorn all cancel the tasks that are left before they close the loop. The
  keeper closes the client on that cancellation, while the loop still runs, so no "Unclosed
  client session" is left for the garbage collector to warn about.

The table belongs to the transport, so to one router: nothing process-wide outlives it, and a
loop is referenced only while its client is open.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from asgi_router.observability.events import logger

__all__ = ["LoopClients"]

C = TypeVar("C")


class _Held(Generic[C]):
    """A client, the loop it belongs to, and the task that closes it at loop end."""

    __slots__ = ("client", "keeper", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, client: C) -> None:
        self.loop = loop
        self.client = client
        self.keeper: asyncio.Task[None] | None = None


class LoopClients(Generic[C]):
    """The clients of one transport, one per running event loop (see the module docstring).

    ``open`` makes a client on the running loop, ``close`` closes one, ``is_closed`` says
    whether one was closed (by anyone): a closed client is replaced on the next request.
    """

    __slots__ = ("_clients", "_close", "_is_closed", "_last", "_open")

    def __init__(
        self, open: Callable[[], C], close: Callable[[C], Awaitable[None]], is_closed: Callable[[C], bool]
    ) -> None:
        self._open = open
        self._close = close
        self._is_closed = is_closed
        self._clients: dict[asyncio.AbstractEventLoop, _Held[C]] = {}
        #: The client used last: nearly every request runs on the same loop as the one before.
        self._last: _Held[C] | None = None

    def current(self) -> C:
        """The running loop's client, made (with its keeper) if it has none or it was closed."""
        loop = asyncio.get_running_loop()
        held = self._last
        if held is None or held.loop is not loop or self._is_closed(held.client):
            held = self._clients.get(loop)
            if held is None or self._is_closed(held.client):
                held = self._add(loop)
            self._last = held
        return held.client

    def clients(self) -> list[C]:
        """Every open client, whichever loop it belongs to (introspection: pools, leak checks)."""
        return [held.client for held in list(self._clients.values()) if not self._is_closed(held.client)]

    async def aclose(self) -> None:
        """Close the running loop's client, if it has one (lifespan shutdown)."""
        held = self._clients.get(asyncio.get_running_loop())
        if held is not None:
            if held.keeper is not None:
                held.keeper.cancel()  # it finds its client gone and does nothing
            await self._forget_and_close(held)

    def _add(self, loop: asyncio.AbstractEventLoop) -> _Held[C]:
        # Forget clients of loops that were closed without ending their tasks (nothing to await
        # on them any more): a loop is not kept alive by a router it once called.
        for stale_key, stale in list(self._clients.items()):
            if stale_key.is_closed():
                del self._clients[stale_key]
                if self._last is stale:
                    self._last = None
        replaced = self._clients.get(loop)
        if replaced is not None and replaced.keeper is not None:
            replaced.keeper.cancel()  # its client was closed by someone else: nothing left to do
        held = _Held(loop, self._open())
        self._clients[loop] = held
        held.keeper = loop.create_task(self._keep(held), name="asgi_router upstream client keeper")
        return held

    async def _keep(self, held: _Held[C]) -> None:
        """Close ``held``'s client when its loop ends (the loop's runner cancels this task)."""
        try:
            await asyncio.get_running_loop().create_future()  # never done: only cancelled
        finally:
            if self._clients.get(held.loop) is held:  # not closed by aclose() meanwhile
                await self._forget_and_close(held)

    async def _forget_and_close(self, held: _Held[C]) -> None:
        if self._clients.get(held.loop) is held:
            del self._clients[held.loop]
        if self._last is held:
            self._last = None
        try:
            await self._close(held.client)
        except Exception:
            logger.exception("closing an upstream client failed")
