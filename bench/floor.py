"""The floor: the least a Python reverse proxy can do, so that the router is measured against it.

Raw ASGI, one shared ``aiohttp.ClientSession``, no routing, no parsing, no failover: read the
request body, POST it to the one upstream, relay the status, the headers that describe the
body, and every chunk as it arrives (``iter_any``), awaiting each ``send`` before the next
read as the router does. Whatever the router costs above this is the price of its features
(parsing, resolution, header hygiene, the commit point, timeouts, disconnect handling), which
is what ``router/floor`` ratios show.

The upstream is ``BENCH_UPSTREAM`` (e.g. ``http://127.0.0.1:8001``); the inbound path is
appended to it as is.
"""

from __future__ import annotations

import os
from typing import Final

import aiohttp
from starlette.types import Message, Receive, Scope, Send

__all__ = ["Floor", "app"]

# What the floor relays back: what describes the body. Everything else the server sets itself.
_RELAYED: Final = frozenset({b"content-type", b"content-length", b"cache-control"})


class Floor:
    """A minimal passthrough proxy to ``upstream`` (an ``http://host:port`` origin)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=4096, keepalive_timeout=30),
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None),
            )
        return self._session

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        parts: list[bytes] = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        url = self.upstream + scope["path"]
        headers = {"content-type": "application/json", "accept-encoding": "identity"}
        async with self._open().request(scope["method"], url, data=b"".join(parts), headers=headers) as response:
            relayed = [(name.lower(), value) for name, value in response.raw_headers if name.lower() in _RELAYED]
            await send({"type": "http.response.start", "status": response.status, "headers": relayed})
            async for chunk in response.content.iter_any():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message: Message = await receive()
            if message["type"] == "lifespan.startup":
                self._open()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._session is not None:
                    await self._session.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


app = Floor(os.environ.get("BENCH_UPSTREAM", "http://127.0.0.1:8001"))
