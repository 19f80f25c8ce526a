"""SharedState against a real redis-server: several states in one event loop stand for several
processes (each has its own connection, view and listener). The multi-process proof through
real uvicorn processes is tests/test_fleet.py; these pin the rules one by one, faster."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from asgi_router.config.resilience_settings import BreakerSettings
from asgi_router.core.store_url import mask_store_url as masked
from asgi_router.fleet import breaker_writes
from asgi_router.fleet import shared_state as fleet_state
from asgi_router.fleet.link import REQUEST_TIMEOUT, SLOW_CALLS
from asgi_router.fleet.shared_state import SharedState
from asgi_router.resilience.breaker import Phase
from asgi_router.resilience.stats import Limits

from .fleet import REDIS_PASSWORD, REDIS_USER, RedisServer, free_port, redis_server_path
from .waiting import eventually, polled

pytestmark = [pytest.mark.anyio, pytest.mark.fleet]

POLICY = BreakerSettings(consecutive_failures=3, open_for=0.3, half_open_probes=1, probe_timeout=5)
KEY = "mock/flaky"


@asynccontextmanager
async def states(
    url: str, count: int, *, prefix: str | None = None, budgets: dict[str, Limits] | None = None, connect: bool = True
) -> AsyncIterator[list[SharedState]]:
    """``count`` states sharing ``url`` under one fresh prefix, connected, closed afterwards."""
    prefix = prefix or f"t{uuid.uuid4().hex[:8]}"
    made = [SharedState(url, prefix, POLICY, budgets) for _ in range(count)]
    for state in made:
        state.start()
    try:
        if connect:
            await eventually(lambda: all(state.link.up for state in made))
        yield made
    finally:
        for state in made:
            await state.aclose()


def fail(state: SharedState, key: str = KEY) -> None:
    state.record(key, POLICY, time.monotonic(), "failure", probe=False)


def phase(state: SharedState, key: str = KEY) -> Phase | None:
    view = state.breaker(key)
    return None if view is None else view.phase


async def test_failures_in_two_processes_count_toward_one_breaker_which_opens_in_both(
    redis_server: RedisServer,
) -> None:
    async with states(redis_server.url, 2) as (a, b):
        fail(a)
        await asyncio.sleep(0.05)
        fail(b)
        await asyncio.sleep(0.05)
        fail(a)  # the third failure of the fleet; neither process saw three of its own
        await eventually(lambda: phase(a) is Phase.OPEN and phase(b) is Phase.OPEN, within=1.0)
        refused = b.admit(KEY, POLICY, time.monotonic())
        assert not refused.allowed


async def test_an_opening_reaches_the_other_process_within_250_ms(redis_server: RedisServer) -> None:
    async with states(redis_server.url, 2) as (a, b):
        for _ in range(3):
            fail(a)
        await eventually(lambda: phase(a) is Phase.OPEN)
        # Measured from the opener's own adoption: the message is published by the same script.
        assert await eventually(lambda: phase(b) is Phase.OPEN, within=0.25, every=0.005) < 0.25


async def test_a_success_anywhere_resets_the_fleets_count(redis_server: RedisServer) -> None:
    async with states(redis_server.url, 2) as (a, b):
        fail(a)
        fail(a)
        # b hears that the count left zero (not every step of it): enough to know a success must reset it.
        await eventually(lambda: (view := b.breaker(KEY)) is not None and view.consecutive_failures > 0)
        b.record(KEY, POLICY, time.monotonic(), "success", probe=False)
        await eventually(lambda: (view := a.breaker(KEY)) is not None and view.consecutive_failures == 0)
        fail(a)  # the fleet's count is one again, not three: b hears it left zero, and nothing opens
        await eventually(lambda: (view := b.breaker(KEY)) is not None and view.consecutive_failures > 0)
        assert phase(a) is Phase.CLOSED and phase(b) is Phase.CLOSED


async def test_half_open_admits_one_probe_across_the_fleet(redis_server: RedisServer) -> None:
    async with states(redis_server.url, 3) as fleet:
        for _ in range(3):
            fail(fleet[0])
        await eventually(lambda: all(phase(state) is Phase.OPEN for state in fleet))
        await asyncio.sleep(POLICY.open_for + 0.05)
        probes = 0
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # every process keeps asking, as requests would
            for state in fleet:
                if state.admit(KEY, POLICY, time.monotonic()).allowed:
                    probes += 1
            await asyncio.sleep(0.01)
        assert probes == POLICY.half_open_probes


async def test_a_probe_that_succeeds_closes_the_breaker_everywhere(redis_server: RedisServer) -> None:
    async with states(redis_server.url, 2) as (a, b):
        for _ in range(3):
            fail(a)
        await eventually(lambda: phase(b) is Phase.OPEN)
        await asyncio.sleep(POLICY.open_for + 0.05)
        admissions = []

        def admitted() -> bool:
            admissions.append(b.admit(KEY, POLICY, time.monotonic()))
            return admissions[-1].allowed

        await eventually(admitted)
        assert admissions[-1].probe
        b.record(KEY, POLICY, time.monotonic(), "success", probe=True)
        await eventually(lambda: phase(a) is Phase.CLOSED and phase(b) is Phase.CLOSED)


async def test_rotation_is_one_sequence_across_processes(redis_server: RedisServer) -> None:
    async with states(redis_server.url, 2) as (a, b):
        next_a, next_b = a.fleet_rotation("g"), b.fleet_rotation("g")
        assert [await nxt() for nxt in (next_a, next_b, next_a, next_b)] == [0, 1, 2, 3]


async def test_budget_across_four_processes_under_load_overshoots_at_most_the_bound(
    redis_server: RedisServer,
) -> None:
    limit = 200
    budgets = {KEY: Limits(rpm=limit)}
    async with states(redis_server.url, 4, budgets=budgets) as fleet:
        served = 0

        async def worker(state: SharedState) -> None:
            nonlocal served
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                if state.within_budget(KEY, budgets[KEY], 0):
                    state.add_usage(KEY, 1, 0)
                    served += 1
                await asyncio.sleep(0)  # the other workers' turn, and the store's replies

        await asyncio.gather(*(worker(state) for state in fleet for _ in range(4)))
        assert limit - 4 * 4 <= served <= limit + max(2, limit * 5 // 100), served


async def test_every_key_has_a_ttl_and_breakers_for_direct_refs_are_bounded(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fleet_state, "MAX_BREAKERS", 5)  # what this process keeps and reads back
    monkeypatch.setattr(breaker_writes, "MAX_BREAKERS", 5)  # what each write tells the store to keep
    prefix = f"t{uuid.uuid4().hex[:8]}"
    async with states(redis_server.url, 1, prefix=prefix, budgets={KEY: Limits(rpm=10, tpm=1000)}) as (state,):
        client = aioredis.Redis.from_url(redis_server.url)
        try:
            keys: list[str] = []
            deadline = time.monotonic() + 10
            while not (any(":rot:" in key for key in keys) and any(":use:" in key for key in keys)):
                assert time.monotonic() < deadline, keys  # retried: a busy machine may time a write out
                await eventually(lambda: state.link.up, within=5.0)
                for index in range(12):  # clients may name any model id of a provider
                    fail(state, f"mock/any-{index}")
                await state.fleet_rotation("g")()
                if state.within_budget(KEY, Limits(rpm=10, tpm=1000), 10):  # as a request is admitted
                    state.add_usage(KEY, 1, 10)
                await asyncio.sleep(0.2)
                keys = [key.decode() async for key in client.scan_iter(match=f"{prefix}:*")]
            ttls = {key: await client.ttl(key) for key in keys}
            breakers = [key for key in keys if key.startswith(f"{prefix}:br:")]
        finally:
            await client.aclose()
    assert all(ttl > 0 for ttl in ttls.values()), ttls
    assert len(breakers) <= 5


async def test_redis_unreachable_the_state_serves_from_its_own_view_and_says_so_once(
    refused_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    port = refused_url.split(":")[2].split("/")[0]
    url = f"redis://fleet:{REDIS_PASSWORD}@127.0.0.1:{port}/0"
    async with states(url, 1, connect=False) as (state,):
        rotate = state.fleet_rotation("g")
        started = time.monotonic()
        values = [await rotate() for _ in range(50)]
        waited = time.monotonic() - started
        for _ in range(3):
            fail(state)
        assert not state.admit(KEY, POLICY, time.monotonic()).allowed  # its own breaker still works
        await asyncio.sleep(0.4)  # a few reconnection attempts, each failing
    assert values == list(range(50))
    assert waited < 0.5  # no request waits on a store that is down
    said = [record.getMessage() for record in caplog.records if "unreachable" in record.getMessage()]
    assert len(said) == 1
    assert REDIS_PASSWORD not in said[0] and masked(url) in said[0]


async def test_redis_that_stops_answering_costs_a_request_at_most_the_request_timeout(
    redis_server: RedisServer,
) -> None:
    async with states(redis_server.url, 1) as (state,):
        rotate = state.fleet_rotation("g")
        await rotate()
        assert redis_server.process is not None
        os.kill(redis_server.process.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            slowest = 0.0
            for _ in range(20):
                before = time.monotonic()
                await rotate()
                slowest = max(slowest, time.monotonic() - before)
            total = time.monotonic() - started
        finally:
            os.kill(redis_server.process.pid, signal.SIGCONT)
        assert slowest < REQUEST_TIMEOUT + 0.1  # generous: two shared cores
        # After SLOW_CALLS late answers in a row nobody asks the store: the rest are immediate.
        assert total < (SLOW_CALLS + 3) * (REQUEST_TIMEOUT + 0.02)
        await eventually(lambda: state.link.up, within=5.0)


@pytest.fixture
def garbage_server() -> Iterator[tuple[int, list[int]]]:
    """A TCP server that answers anything with bytes that are not the Redis protocol: its port,
    and the list it appends to on every connection it answered (the client's attempts)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.1)
    stop = threading.Event()
    answered: list[int] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                continue
            with connection:
                connection.settimeout(0.5)
                try:
                    connection.recv(1024)
                    connection.sendall(b"\x00\xffnot redis at all\r\n")
                    answered.append(1)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], answered
    stop.set()
    thread.join(timeout=2)
    listener.close()


async def test_an_answer_that_is_not_redis_falls_back_to_the_local_view(
    garbage_server: tuple[int, list[int]], caplog: pytest.LogCaptureFixture
) -> None:
    port, answered = garbage_server
    async with states(f"redis://127.0.0.1:{port}/0", 1, connect=False) as (state,):
        await eventually(lambda: len(answered) >= 2, every=0.02)  # two attempts, each answered with garbage
        assert not state.link.up
        assert [await state.fleet_rotation("g")() for _ in range(3)] == [0, 1, 2]
    assert sum("unreachable" in record.getMessage() for record in caplog.records) == 1


def test_a_password_in_the_url_is_masked_and_nothing_else_is() -> None:
    assert masked("redis://user:s3cret@host:6379/0") == "redis://user:***@host:6379/0"
    assert masked("rediss://:s3cret@host/1") == "rediss://:***@host/1"
    assert masked("redis://host:6379/0") == "redis://host:6379/0"
    assert (
        masked("redis+sentinel://u:p@a:26379,b:26379/primary/0") == "redis+sentinel://u:***@a:26379,b:26379/primary/0"
    )


@pytest.fixture
def sentinel(redis_server: RedisServer, tmp_path: Path) -> Iterator[int]:
    """A real Sentinel (``redis-server --sentinel``) watching the session's redis-server as ``primary``."""
    port = free_port()
    config = tmp_path / "sentinel.conf"
    config.write_text(
        f"port {port}\nbind 127.0.0.1\n"
        f"sentinel monitor primary 127.0.0.1 {redis_server.port} 1\n"
        f"sentinel auth-user primary {REDIS_USER}\nsentinel auth-pass primary {REDIS_PASSWORD}\n"
    )
    process = subprocess.Popen([redis_server_path(), str(config), "--sentinel"], stdout=subprocess.DEVNULL)

    def watching() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"SENTINEL get-master-addr-by-name primary\r\n")
                return str(redis_server.port).encode() in sock.recv(256)
        except OSError:
            return False

    try:
        polled(watching, within=10, every=0.05, what="the sentinel's start")
        yield port
    finally:
        process.kill()
        process.wait()


async def test_a_sentinel_url_reaches_the_primary_it_names(sentinel: int) -> None:
    url = f"redis+sentinel://{REDIS_USER}:{REDIS_PASSWORD}@127.0.0.1:{sentinel}/primary/0"
    async with states(url, 2) as (a, b):
        for state in (a, b):  # a first call on a fresh connection asks the sentinel first: warm up
            await state.fleet_rotation("warm")()
        first = await a.fleet_rotation("s")()
        assert [await b.fleet_rotation("s")(), await a.fleet_rotation("s")()] == [first + 1, first + 2]


async def test_a_skip_for_an_open_breaker_names_its_cause_in_a_fleet_as_in_one_process(
    redis_server: RedisServer,
) -> None:
    async with states(redis_server.url, 2) as (a, b):
        for _ in range(3):
            fail(a)
        await eventually(lambda: phase(a) is Phase.OPEN and phase(b) is Phase.OPEN)
        # The log line writes a skip as circuit_open[failures]: the same words from every process.
        assert [state.admit(KEY, POLICY, time.monotonic()).cause for state in (a, b)] == ["failures", "failures"]
