"""Load and soak, bounded and on 127.0.0.1 only: no cross-talk, no leaked connections, flat memory.

Three real servers in one process: a token-echo upstream and the router (each uvicorn in its own
thread), and the test's aiohttp client. Every request carries a unique token in the OpenAI
``user`` field; the upstream writes it into every event it streams, so a client can check that
it got exactly its own upstream's bytes and nobody else's.

Bounds, chosen to prove the property on a 2-core CI machine in seconds rather than minutes:

* :data:`CONCURRENT` streams are all open at the same time (the upstream holds every stream
  after its first event until all of them have arrived), then finish interleaved.
* :data:`ABANDONED` streams are read for one event and dropped, through a pool of
  :data:`POOL` upstream connections: a single connection not given back on a disconnect would
  starve the pool within a few requests, and show up as a pool timeout (a 504).
* RSS after the soak may exceed RSS before it by at most :data:`RSS_BOUND_MIB` MiB, measured
  after a warm-up round so that one-off allocations (imports, caches, the first connections)
  are in the baseline. A leak of even 20 KB per abandoned stream would exceed it.

The first test is marked ``load`` and the second ``soak``: both run with the whole suite (as
in CI), and ``-m "not load and not soak"`` leaves them out of a quick run. Both run on each
transport: what they pin (the pool, disconnects, memory) is the transport's to get right.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import resource
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any, Final

import aiohttp
import anyio
import pytest
from starlette.types import Receive, Scope, Send

from asgi_router import ModelRouter, RequestRecord
from asgi_router.transports.aiohttp_transport import AiohttpResponse
from asgi_router.transports.httpx_transport import HttpxResponse

from .conftest import host_app, make_settings, pool_is_quiet
from .redaction import LOUD_LOGGERS, quiet
from .servers import ServerThread
from .waiting import eventually

pytestmark = [pytest.mark.anyio, pytest.mark.both_transports]

CONCURRENT: Final = 500
ABANDONED: Final = 1000
POOL: Final = 2
RSS_BOUND_MIB: Final = 16
EVENTS: Final = 6
HTTP: Final = "httptools"
"""The servers' HTTP parser, as in production: C, which leaves more of this one process's CPU
(client, router and upstream share it) to the router."""


def frame(token: str, index: int) -> bytes:
    return f'data: {{"token":"{token}","i":{index}}}\n\n'.encode()


def expected_stream(token: str) -> bytes:
    return b"".join(frame(token, index) for index in range(EVENTS)) + b"data: [DONE]\n\n"


class TokenUpstream:
    """Streams events that carry the request's token.

    ``model`` picks the shape: ``gate`` sends one event, waits until :attr:`gate_size` streams
    are open at once (or 20 s), then the rest; ``long`` sends an event every 20 ms for 8 s or
    until the client goes away.
    """

    def __init__(self) -> None:
        self.tokens: Counter[str] = Counter()
        self.open = 0
        #: The server serving this app (set by the fixture).
        self.server: ServerThread | None = None
        self.peak = 0
        self.disconnected = 0
        self.gate_size = CONCURRENT
        self._gate: asyncio.Event | None = None

    def reset(self) -> None:
        self.tokens.clear()
        self.open = self.peak = self.disconnected = 0
        self._gate = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        payload = json.loads(body)
        token, model = payload["user"], payload["model"]
        self.tokens[token] += 1
        gone = asyncio.ensure_future(receive())  # completes with http.disconnect
        self.open += 1
        self.peak = max(self.peak, self.open)
        try:
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
            )
            if model == "gate":
                await self._gated(token, send)
            else:
                await self._long(token, send, gone)
        finally:
            self.open -= 1
            if gone.done():
                self.disconnected += 1
            gone.cancel()

    async def _gated(self, token: str, send: Send) -> None:
        if self._gate is None:
            self._gate = asyncio.Event()
        await send({"type": "http.response.body", "body": frame(token, 0), "more_body": True})
        if self.open >= self.gate_size:
            self._gate.set()
        try:
            await asyncio.wait_for(self._gate.wait(), 20)
        except TimeoutError:
            pass  # the test's peak assertion reports it
        for index in range(1, EVENTS):
            await asyncio.sleep(0)  # a turn for the other streams: their frames interleave with this one's
            await send({"type": "http.response.body", "body": frame(token, index), "more_body": True})
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})

    async def _long(self, token: str, send: Send, gone: asyncio.Future[Any]) -> None:
        """A stream that is still going when its client walks away: a few frames, then nothing
        until the client has gone (ended after 8 s if it never does)."""
        for index in range(3):
            await send({"type": "http.response.body", "body": frame(token, index), "more_body": True})
        await asyncio.wait([gone], timeout=8)
        if not gone.done():
            await send({"type": "http.response.body", "body": b"", "more_body": False})


@pytest.fixture(scope="module")
def token_upstream() -> Iterator[tuple[TokenUpstream, str]]:
    _raise_fd_limit(4096)
    app = TokenUpstream()
    with ServerThread(app, lifespan="off", http=HTTP) as server:
        app.server = server
        yield app, f"{server.url}/v1"


def _raise_fd_limit(wanted: int) -> None:
    """Four sockets per concurrent stream live in this one process; lift a low soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(wanted, hard), hard))


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def live(*kinds: type) -> dict[str, int]:
    """How many objects of each of ``kinds`` are alive (one walk of the heap for all)."""
    counts = Counter(type(obj) for obj in gc.get_objects())
    return {kind.__name__: sum(n for found, n in counts.items() if issubclass(found, kind)) for kind in kinds}


@contextmanager
def request_outcomes() -> Iterator[Counter[str]]:
    """Counts each request's status and attempt reasons from the router's records.

    The ``asgi_router`` logger is detached from the root for the duration: pytest keeps every
    record that reaches the root in memory, which would be the harness's memory growth, not
    the router's.
    """
    counts: Counter[str] = Counter()

    class Counting(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            summary: RequestRecord = record.asgi_router  # type: ignore[attr-defined]
            counts[f"status:{summary.status}"] += 1
            for event in summary.events:
                counts[f"reason:{event.reason}"] += 1

    router_logger = logging.getLogger("asgi_router")
    handler = Counting(logging.INFO)
    saved = router_logger.level, router_logger.propagate
    router_logger.addHandler(handler)
    router_logger.setLevel(logging.INFO)
    router_logger.propagate = False
    try:
        yield counts
    finally:
        router_logger.removeHandler(handler)
        router_logger.setLevel(saved[0])
        router_logger.propagate = saved[1]


def routed_settings(upstream_url: str, **overrides: Any) -> Any:
    return make_settings(
        "http://127.0.0.1:9",
        providers={"tok": {"base_url": upstream_url, "api_key": "tok-upstream-key-0123456789"}},
        timeouts={"connect": 10, "first_byte": 30, "idle": 30, "total": 120},
        **overrides,
    )


@asynccontextmanager
async def client_session() -> AsyncIterator[aiohttp.ClientSession]:
    """The test's own client: a new connection per request, no limit, body bytes as sent.

    aiohttp rather than httpx: this one process also runs the router and the upstream, and the
    lighter client leaves them more of its CPU (the client is not what these tests measure).
    """
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False) as session:
        yield session


def chat(token: str, model: str) -> dict[str, Any]:
    return {"model": f"tok/{model}", "stream": True, "user": token, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.load
async def test_concurrent_streams_each_get_exactly_their_own_upstreams_bytes(
    token_upstream: tuple[TokenUpstream, str],
) -> None:
    upstream, url = token_upstream
    upstream.reset()
    router = ModelRouter(host_app(), settings=routed_settings(url))
    tokens = [f"t{index:04d}-{uuid.uuid4().hex}" for index in range(CONCURRENT)]
    received: dict[str, bytes] = {}
    statuses: Counter[int] = Counter()

    with ServerThread(router, http=HTTP) as server, quiet(*LOUD_LOGGERS):
        async with client_session() as client:

            async def one(token: str) -> None:
                async with client.post(f"{server.url}/v1/chat/completions", json=chat(token, "gate")) as response:
                    statuses[response.status] += 1
                    received[token] = await response.read()

            started = time.monotonic()
            with anyio.fail_after(90):
                async with anyio.create_task_group() as tasks:
                    for token in tokens:
                        tasks.start_soon(one, token)
            elapsed = time.monotonic() - started

    assert statuses == {200: CONCURRENT}
    assert upstream.peak == CONCURRENT  # every stream was open at the same moment
    assert upstream.tokens == Counter(tokens)  # each upstream request exactly once
    wrong = [token for token in tokens if received[token] != expected_stream(token)]
    assert wrong == [], f"{len(wrong)} streams got bytes that were not exactly their own"
    print(f"\n{CONCURRENT} concurrent streams in {elapsed:.1f} s")


@pytest.mark.soak
async def test_abandoned_streams_through_a_two_connection_pool_leak_nothing(
    token_upstream: tuple[TokenUpstream, str],
) -> None:
    upstream, url = token_upstream
    upstream.reset()
    router = ModelRouter(host_app(), settings=routed_settings(url, pool={"max_connections": POOL}))
    firsts: dict[str, bytes] = {}
    statuses: Counter[int] = Counter()

    async def abandon_many(client: aiohttp.ClientSession, count: int, prefix: str) -> None:
        limiter = anyio.Semaphore(50)

        async def one(token: str) -> None:
            async with limiter, client.post(f"{server.url}/v1/chat/completions", json=chat(token, "long")) as response:
                statuses[response.status] += 1
                async for part in response.content.iter_any():
                    firsts[token] = part
                    break
                response.close()  # walk away mid-stream

        async with anyio.create_task_group() as tasks:
            for index in range(count):
                tasks.start_soon(one, f"{prefix}{index:04d}-{uuid.uuid4().hex[:8]}")

    async def settle(requests: int) -> None:
        # Quiet pool, no upstream stream open, every request finished (its record logged: the
        # router's thread may still be finishing one after its upstream closed) and every record
        # through the sinks (a record still queued for the log sink is alive, and would be
        # counted as a leftover below).
        def logged() -> int:
            return sum(count for key, count in outcomes.items() if key.startswith("status:"))

        await eventually(
            lambda: pool_is_quiet(router) and not upstream.open and logged() >= requests and not router.events.pending,
            within=15,
            every=0.05,
        )

    with ServerThread(router, http=HTTP) as server, quiet(*LOUD_LOGGERS), request_outcomes() as outcomes:
        async with client_session() as client:
            await abandon_many(client, 200, "warm")  # the baseline includes first-time allocations
            await settle(200)
            gc.collect()
            rss_before = rss_bytes()
            firsts.clear()
            statuses.clear()
            outcomes.clear()
            started = time.monotonic()
            with anyio.fail_after(120):
                await abandon_many(client, ABANDONED, "soak")
            elapsed = time.monotonic() - started
            await settle(ABANDONED)
            gc.collect()
            rss_after = rss_bytes()
            # The connections the router's pool holds, as the upstream's server counts them.
            assert upstream.server is not None
            pooled = len(upstream.server.server.server_state.connections)
            leftovers = live(RequestRecord, HttpxResponse, AiohttpResponse)
            kept = len(router.recent.snapshot())  # the ring of recent requests (sinks.py), bounded

    growth_mib = (rss_after - rss_before) / 2**20
    print(
        f"\n{ABANDONED} abandoned streams in {elapsed:.1f} s through a pool of {POOL}; "
        f"RSS {rss_before / 2**20:.1f} -> {rss_after / 2**20:.1f} MiB ({growth_mib:+.1f})"
    )
    assert statuses == {200: ABANDONED}  # a pool timeout would have been a 504
    assert outcomes["reason:timeout"] == 0
    assert outcomes["status:499"] == ABANDONED  # each one recorded as the client going away
    assert all(f'"token":"{token}"'.encode() in first for token, first in firsts.items())
    assert len(firsts) == ABANDONED
    assert pooled <= POOL  # the pool is back to its baseline: quiet, and no more than its size
    assert kept == router.settings.events.recent  # full, and no bigger than configured
    assert leftovers == {"RequestRecord": kept, "HttpxResponse": 0, "AiohttpResponse": 0}  # nothing beyond the ring
    assert upstream.disconnected >= ABANDONED  # every upstream stream was cut, none ran to the end
    assert growth_mib < RSS_BOUND_MIB
