"""What sticky sessions cost a request: ``python -m bench.sticky``.

Two figures, both in process:

* **In memory**: one sticky look-up (the request's key hashed from its session header, the
  key's member found, the plan reordered) and one remember, per request.
* **With ``state_url``**: the one Redis round trip a request of a sticky group waits for (the
  ``GET`` of its key's member through the router's link), on a throwaway local ``redis-server``
  (skipped without one).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

from asgi_router import RouterSettings
from asgi_router.attempts.capacity import Capacity
from asgi_router.config.resilience_settings import BreakerSettings
from asgi_router.routing.plan import Plan, Resolver
from bench.fleet import redis_server

__all__ = ["main"]


def _in_memory(count: int) -> float:
    """Microseconds per request for a sticky look-up and remember."""
    providers: dict[str, Any] = {name: {"base_url": "http://127.0.0.1:9/v1"} for name in ("a", "b", "c")}
    groups: dict[str, Any] = {
        "g": {"strategy": "rotate", "members": ["a/m", "b/m", "c/m"], "sticky": {"key": "session"}}
    }
    settings = RouterSettings(providers=providers, groups=groups, allow_unauthenticated=True)
    capacity = Capacity(settings, time.monotonic)
    plan = Resolver(settings).resolve_string("group/g")
    assert isinstance(plan, Plan)
    payload = {"model": "group/g", "messages": [{"role": "user", "content": "hi"}]}
    sessions = [[(b"x-session-id", f"session-{n % 1000}".encode())] for n in range(count)]
    started = time.perf_counter()
    for inbound in sessions:
        stuck_plan, stuck = capacity.stick(plan, payload, inbound, None)
        if stuck is not None:
            capacity.served(stuck, stuck_plan.candidates[0].key)
    return (time.perf_counter() - started) / count * 1e6


async def _round_trips(url: str, count: int) -> list[float]:
    """Milliseconds per ``GET`` of a key's member, sequential."""
    from asgi_router.fleet.shared_affinity import FleetAffinities
    from asgi_router.fleet.shared_state import SharedState

    state = SharedState(url, "bench-sticky", BreakerSettings())
    state.start()
    try:
        for _ in range(500):
            if state.link.up:
                break
            await asyncio.sleep(0.01)
        fleet = FleetAffinities(state.link, "bench-sticky")
        fleet.remember("g", "k", "a/m", 300)
        await asyncio.sleep(0.05)
        samples = []
        for _ in range(count):
            started = time.perf_counter()
            await fleet.member("g", "k")
            samples.append((time.perf_counter() - started) * 1e3)
        return sorted(samples)
    finally:
        await state.aclose()


def main() -> None:
    print(f"sticky look-up and remember, in memory: {min(_in_memory(20_000) for _ in range(3)):.1f} µs per request")
    with redis_server() as url:
        if url is None:
            print("redis-server not installed: the shared round trip is not measured")
            return
        samples = asyncio.run(_round_trips(url, 2000))
        p99 = samples[int(len(samples) * 0.99)]
        print(f"sticky GET through the link: median {statistics.median(samples):.2f} ms, p99 {p99:.2f} ms")


if __name__ == "__main__":
    main()
