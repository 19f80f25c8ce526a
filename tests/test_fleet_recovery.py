"""A fleet recovers as one: the ramp step and the slow mark are shared like the breaker's phase.

Two routers in separate uvicorn processes share one real redis-server (``state_url``); times are
compressed by settings (``open_for = 1``, ``probe_interval = 0.2``), and ``ramp_step`` is long so
that only successes move a ramp here. The rules one by one run on ``SharedState`` objects in this
process (each its own connection, view and listener), as tests/test_fleet_state.py does.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from asgi_router.config.resilience_settings import BreakerSettings
from asgi_router.fleet.shared_state import SharedState
from asgi_router.resilience.breaker import Phase

from .conftest import API_KEY
from .fleet import Fleet, RedisServer, RouterProcess
from .mock_upstream import MockUpstream
from .test_fleet_state import eventually
from .waiting import polled

pytestmark = pytest.mark.fleet


def _config(redis: RedisServer, upstream: MockUpstream, prefix: str) -> str:
    base = f"{upstream.url}/v1"  # type: ignore[attr-defined]
    return f"""
allow_unauthenticated = true
status_route = "/router/status"
state_url = "{redis.url}"
state_key_prefix = "{prefix}"

[breaker]
consecutive_failures = 2
open_for = 1
probe_interval = 0.2
ramp = [0.1, 0.5]
ramp_successes = 2
ramp_step = 600

[providers.mock]
base_url = "{base}"
api_key = "{API_KEY}"
timeouts = {{ connect = 1, first_byte = 2, idle = 2, total = 10 }}

[providers.mock2]
base_url = "{base}"
api_key = "{API_KEY}"

[groups.ramp]
members = ["mock/fail-2-ramp{prefix}-503", "mock2/ok"]
"""


@pytest.fixture
def pair(
    redis_server: RedisServer, upstream: MockUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RouterProcess, RouterProcess, str]]:
    workdir = tmp_path_factory.mktemp("fleet-recovery")
    prefix = f"rec{time.monotonic_ns()}"
    config = workdir / "router.toml"
    config.write_text(_config(redis_server, upstream, prefix))
    routers = [RouterProcess(name, config, workdir) for name in ("a", "b")]
    with Fleet(routers):
        yield routers[0], routers[1], f"mock/fail-2-ramp{prefix}-503"


def served_by(router: RouterProcess) -> str:
    body = {"model": "group/ramp", "messages": [{"role": "user", "content": "hi"}]}
    response = httpx2.post(f"{router.url}/v1/chat/completions", json=body, timeout=10)
    assert response.status_code == 200, response.text
    return response.headers["x-router-model"]


def breaker_of(router: RouterProcess, key: str) -> dict[str, Any]:
    page = httpx2.get(f"{router.url}/router/status.json", timeout=5)
    assert page.status_code == 200, page.text
    candidates = {c["key"]: c for p in page.json()["providers"] for c in p["candidates"]}
    return dict(candidates[key]["breaker"])


def wait_for(router: RouterProcess, key: str, notes: list[str], within: float = 5.0) -> float:
    """Seconds until ``router``'s status page shows ``notes`` for ``key``'s breaker."""
    started = time.monotonic()
    polled(lambda: breaker_of(router, key)["notes"] == notes, within=within, every=0.02, what=f"{notes} for {key}")
    return time.monotonic() - started


def test_a_ramp_step_advanced_in_one_process_holds_in_the_other(pair: tuple[RouterProcess, RouterProcess, str]) -> None:
    a, b, primary = pair
    assert [served_by(a), served_by(a)] == ["mock2/ok", "mock2/ok"]  # two failures: open, fleet-wide
    wait_for(b, primary, ["opened: failures"])
    time.sleep(1.0)  # open_for
    for _ in range(50):  # a probe slot is claimed in the background, then the probe succeeds
        if served_by(a) == primary:
            break
    else:
        raise AssertionError("the recovered primary was never probed")
    wait_for(b, primary, ["recovering 10% → 50%"])  # the ramp begun in a holds in b

    winners = [served_by(b) for _ in range(20)]  # b counts its own successes: two in a row ...
    assert winners.count(primary) == 2
    elapsed = wait_for(a, primary, ["recovering 50% → 100%"])  # ... advance the fleet's step
    assert elapsed < 1.0
    half = [served_by(a) for _ in range(4)]
    assert half.count(primary) == 2  # a takes half of its share now: the step b advanced


# --- the rules one by one, on SharedState objects standing for processes -------------------------

POLICY = BreakerSettings(consecutive_failures=1, open_for=0.3, probe_interval=0.2, window=5, ramp_step=60)
KEY = "mock/sick"


async def _pair(url: str) -> tuple[SharedState, SharedState]:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    made = SharedState(url, prefix, POLICY), SharedState(url, prefix, POLICY)
    for state in made:
        state.start()
    await eventually(lambda: all(state.link.up for state in made))
    return made


@pytest.mark.anyio
async def test_a_slow_mark_set_in_one_process_demotes_in_the_other_and_so_does_its_lifting(
    redis_server: RedisServer,
) -> None:
    a, b = await _pair(redis_server.url)
    try:
        a.mark_slow(KEY, time.monotonic() + 5)
        await eventually(lambda: b.slow(KEY, time.monotonic()))
        a.mark_slow(KEY, None)
        await eventually(lambda: not b.slow(KEY, time.monotonic()))
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.anyio
async def test_a_slow_opening_reaches_the_other_process_with_its_cause_and_p90(redis_server: RedisServer) -> None:
    a, b = await _pair(redis_server.url)
    try:
        a.trip(KEY, POLICY, time.monotonic(), "slow", 4.1)
        await eventually(lambda: b.breaker(KEY) is not None and b.breaker(KEY).phase is Phase.OPEN)  # type: ignore[union-attr]
        view = b.breaker(KEY)
        assert view is not None and (view.cause, view.p90) == ("slow", 4.1)
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.anyio
async def test_a_failed_probe_reopens_the_fleets_breaker_for_probe_interval_not_doubled(
    redis_server: RedisServer,
) -> None:
    a, b = await _pair(redis_server.url)
    try:
        a.record(KEY, POLICY, time.monotonic(), "failure", probe=False)
        await eventually(lambda: b.breaker(KEY) is not None and b.breaker(KEY).phase is Phase.OPEN)  # type: ignore[union-attr]
        await asyncio.sleep(POLICY.open_for + 0.05)
        await eventually(lambda: a.admit(KEY, POLICY, time.monotonic()).allowed)
        a.record(KEY, POLICY, time.monotonic(), "failure", probe=True)

        def reopened() -> bool:
            view = b.breaker(KEY)
            return view is not None and view.phase is Phase.OPEN and view.open_for == POLICY.probe_interval

        await eventually(reopened)
    finally:
        await a.aclose()
        await b.aclose()
