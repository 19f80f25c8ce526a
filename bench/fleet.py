"""The fleet part of ``python -m bench``: what sharing state through Redis costs, and how fresh it is.

It starts its own ``redis-server`` (Debian's package; the part is skipped without one) on a free
loopback port, and measures:

* **Throughput**: the bench's host app with ``state_url`` on that Redis (``router-redis``) against
  the same app in memory (``router``), ``group/bench`` (strategy ``order``), non-streaming, c=16,
  in alternating rounds; the ratio of req/s is the median of the rounds' ratios.
* **The router's own cost per request** in process (no sockets, ``bench.micro``'s loop), in
  memory and with ``state_url``: the throughput ratio without the noise of a shared machine.
* **Budget checks, the two designs** (in process, real Redis): an *exact* check is one atomic
  script per request that sums the window and counts the request (the round trip a request
  would wait for, sequential and at 16 at once); a *leased slice* is what a request pays with
  ``SharedState`` (a check and a count in memory) plus how many background round trips the
  slices cost per request.
* **Freshness**: from a breaker's third failure in one state to its opening in another state
  (another connection and listener, as another process has), over several trials.
"""

from __future__ import annotations

import asyncio
import math
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, Final

from .procs import Server, free_port, refused_origin

__all__ = ["fleet", "redis_server"]

#: Budget checks timed per design (a tenth with ``--quick``).
_CALLS: Final = 10_000


def _pong(port: int) -> bool:
    """Whether a Redis on ``port`` answers ``PING``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def redis_server() -> Iterator[str | None]:
    """A throwaway ``redis-server`` on 127.0.0.1 (its URL), or ``None`` if it is not installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        yield None
        return
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="bench-redis-")
    command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 10
        while not _pong(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


def _throughput(run_one: Callable[[str, str], dict[str, Any]], rounds: int) -> dict[str, Any]:
    by_target: dict[str, list[dict[str, Any]]] = {"router": [], "router-redis": []}
    for _ in range(rounds):
        for target in by_target:
            by_target[target].append(run_one(target, "bench"))
    ratios = [r["rps"] / m["rps"] for r, m in zip(by_target["router-redis"], by_target["router"], strict=True)]
    return {
        "rps": {target: statistics.median(row["rps"] for row in rows) for target, rows in by_target.items()},
        "errors": sum(row["errors"] for rows in by_target.values() for row in rows),
        "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)},
    }


def _in_process(url: str, count: int) -> dict[str, float]:
    """The router's own µs per request (no sockets), in memory and with ``state_url``, alternated."""
    from .micro import router_loop

    memory: list[float] = []
    shared: list[float] = []
    for _ in range(3):
        memory.append(asyncio.run(router_loop(False, count)))
        shared.append(asyncio.run(router_loop(False, count, state_url=url)))
    return {"in_memory_us": min(memory), "state_url_us": min(shared)}


async def _until(check: Callable[[], bool], within: float = 10.0) -> None:
    """Return once ``check()`` holds (polled every 10 ms); fail after ``within`` seconds."""
    for _ in range(int(within / 0.01)):
        if check():
            return
        await asyncio.sleep(0.01)
    raise RuntimeError("the shared state did not connect to the bench's redis-server")


async def _budget_costs(url: str, calls: int) -> dict[str, float]:
    import redis.asyncio as aioredis

    from asgi_router.config.resilience_settings import BreakerSettings
    from asgi_router.fleet.budgets import SLICE
    from asgi_router.fleet.scripts import LEASE
    from asgi_router.fleet.shared_state import SharedState
    from asgi_router.resilience.stats import Limits

    client = aioredis.Redis.from_url(url)
    exact = client.register_script(LEASE)
    keys = ["bench:exact:r", "bench:exact:t"]
    args = [10**9, -1, 1, 0, 0, 0, 60]  # one request against a budget that never runs out
    try:
        await exact(keys=keys, args=args)
        started = time.perf_counter()
        for _ in range(calls):
            await exact(keys=keys, args=args)
        sequential_us = (time.perf_counter() - started) / calls * 1e6

        async def sixteenth() -> None:
            for _ in range(calls // 16):
                await exact(keys=keys, args=args)

        started = time.perf_counter()
        await asyncio.gather(*(sixteenth() for _ in range(16)))
        concurrent_per_s = (calls // 16 * 16) / (time.perf_counter() - started)
    finally:
        await client.aclose()

    limits = Limits(rpm=2 * calls)  # a slice is 2 % of it: one background round trip per slice
    state = SharedState(url, "bench-lease", BreakerSettings(), {"up/ok": limits})
    state.start()
    try:
        await _until(lambda: state.link.up)
        await asyncio.sleep(0.05)  # the first slice
        started = time.perf_counter()
        for index in range(calls):
            if state.within_budget("up/ok", limits, 0):
                state.add_usage("up/ok", 1, 0)
            if index % 64 == 0:
                await asyncio.sleep(0)  # let the background refills run, as requests' awaits do
        lease_us = (time.perf_counter() - started) / calls * 1e6
    finally:
        await state.aclose()
    return {
        "exact_round_trip_us": sequential_us,
        "exact_checks_per_s_at_c16": concurrent_per_s,
        "lease_check_us": lease_us,
        "lease_round_trips_per_request": 1 / math.ceil((limits.rpm or 1) * SLICE),
    }


async def _propagation(url: str, trials: int) -> dict[str, float]:
    from asgi_router.config.resilience_settings import BreakerSettings
    from asgi_router.fleet.shared_state import SharedState
    from asgi_router.resilience.breaker import Phase

    policy = BreakerSettings(consecutive_failures=3, open_for=60)
    prefix = f"bench-fresh-{time.monotonic_ns()}"
    opener, watcher = SharedState(url, prefix, policy), SharedState(url, prefix, policy)
    opener.start()
    watcher.start()
    delays: list[float] = []
    try:
        await _until(lambda: opener.link.up and watcher.link.up)
        for trial in range(trials):
            key = f"up/trial-{trial}"
            started = time.perf_counter()
            for _ in range(3):
                opener.record(key, policy, time.monotonic(), "failure", probe=False)
            while (view := watcher.breaker(key)) is None or view.phase is not Phase.OPEN:
                await asyncio.sleep(0.0002)
                if time.perf_counter() - started > 5:
                    break
            delays.append((time.perf_counter() - started) * 1000)
    finally:
        await opener.aclose()
        await watcher.aclose()
    return {"p50_ms": statistics.median(delays), "max_ms": max(delays), "trials": float(trials)}


def fleet(run_one_factory: Callable[[dict[str, Server]], Callable[[str, str], dict[str, Any]]], rounds: int,
          quick: bool) -> dict[str, Any]:  # fmt: skip
    """The whole part (see the module docstring); ``{"skipped": why}`` without redis-server."""
    with redis_server() as url:
        if url is None:
            return {"skipped": "redis-server is not installed (apt-get install redis-server)"}
        with ExitStack() as stack:
            upstream = stack.enter_context(Server("fleet-upstream", "bench.upstream:app"))
            env = {"BENCH_UPSTREAM": upstream.origin, "BENCH_REFUSED": refused_origin(), "BENCH_TRANSPORT": "aiohttp"}
            servers = {
                "router": stack.enter_context(Server("fleet-router", "bench.host:app", env)),
                "router-redis": stack.enter_context(
                    Server("fleet-router-redis", "bench.host:app", {**env, "BENCH_STATE_URL": url})
                ),
            }
            run_one = run_one_factory(servers)
            for target in servers:  # warm up (pools, the Redis connection)
                run_one(target, "bench")
            throughput = _throughput(run_one, rounds)
        calls = _CALLS // 10 if quick else _CALLS
        return {
            "throughput": throughput,
            "in_process": _in_process(url, 1000 if quick else 5000),
            "budget": asyncio.run(_budget_costs(url, calls)),
            "propagation": asyncio.run(_propagation(url, 5 if quick else 20)),
        }
