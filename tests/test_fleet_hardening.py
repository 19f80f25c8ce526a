"""The shared state's URL and its Redis under hostile input: an unparsable ``state_url``, every
form of password redis-py accepts, a burst of failures and a foreign writer filling the index.

The unparsable URL and the masking are settings, logs and command output (no Redis needed); the
burst and the foreign writer run against the session's real ``redis-server`` (tests/fleet.py).
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import pytest
import redis.asyncio as aioredis
from asgi_lifespan import LifespanManager

from asgi_router import ModelRouter, RouterSettings
from asgi_router.config.config_error import ConfigError
from asgi_router.core.store_url import mask_store_url, store_url_secrets
from asgi_router.observability.events import logger
from asgi_router.resilience.breaker import Phase
from asgi_router.resilience.router_state import InMemoryState

from .commands import COMMAND
from .conftest import host_app, make_settings
from .fleet import REDIS_PASSWORD, Fleet, RedisServer, RouterProcess
from .test_fleet_state import POLICY, fail, phase, states
from .waiting import eventually

pytestmark = pytest.mark.anyio

PW = REDIS_PASSWORD

#: URLs redis-py cannot parse as meant: a password with an unencoded ``#``, ``/`` or ``?``, and
#: malformed Sentinel forms.
UNPARSABLE = [
    f"redis://:{PW[:8]}#{PW[8:]}@127.0.0.1:6379/0",
    f"redis://fleet:{PW[:8]}/{PW[8:]}@127.0.0.1:6379/0",
    f"redis://fleet:{PW[:8]}?{PW[8:]}@127.0.0.1:6379/0",
    f"redis+sentinel://fleet:{PW}@127.0.0.1:x/primary/0",
    f"redis+sentinel://fleet:{PW}@127.0.0.1:26379",
    f"rediss://:{PW}@127.0.0.1:6379/0?socket_timeout=soon",
]

#: Every credential form redis-py accepts, and what each must show as.
MASKED = {
    f"redis://fleet:{PW}@127.0.0.1:6379/0": "redis://fleet:***@127.0.0.1:6379/0",
    f"rediss://:{PW}@host/1": "rediss://:***@host/1",
    f"redis://{PW}@host/1": "redis://***@host/1",
    f"unix:///run/redis.sock?db=2&password={PW}": "unix:///run/redis.sock?db=2&password=***",
    f"redis://127.0.0.1:6379/0?password={PW}&db=1": "redis://127.0.0.1:6379/0?password=***&db=1",
    f"redis://127.0.0.1:6379/0?db=1#{PW}": "redis://127.0.0.1:6379/0?db=1#***",
    f"redis://:{PW[:8]}#{PW[8:]}@127.0.0.1:6379/0": "redis://:***@127.0.0.1:6379/0",
    f"redis://u:{PW[:8]}/{PW[8:]}@h:1/0": "redis://u:***@h:1/0",
    # A token before an unencoded '@' and a ':' after it: no part of it is a plain user name.
    f"redis://{PW}@:@h:1/0": "redis://***@h:1/0",
    f"redis://{PW}@u:x@h:1/0": "redis://***@h:1/0",
    f"redis+sentinel://u:{PW}@a:26379,b:26379/primary/0": "redis+sentinel://u:***@a:26379,b:26379/primary/0",
    f"redis+sentinel://a:26379/primary/0?sentinel_password={PW}": "redis+sentinel://a:26379/primary/0?sentinel_password=***",
    "redis://host:6379/0": "redis://host:6379/0",
}


def _toml(tmp_path: Path, url: str) -> Path:
    config = tmp_path / "router.toml"
    config.write_text(f"allow_unauthenticated = true\nstate_url = '{url}'\n", encoding="utf-8")
    return config


# --- 1. an unparsable URL -------------------------------------------------------------------------


@pytest.mark.parametrize("url", UNPARSABLE)
def test_a_state_url_redis_py_cannot_parse_is_refused_when_the_settings_load_naming_the_problem_not_the_secret(
    tmp_path: Path, url: str
) -> None:
    with pytest.raises(ConfigError, match="state_url") as refused:
        RouterSettings.from_toml(_toml(tmp_path, url))
    message = str(refused.value)
    assert "percent-encode" in message
    assert PW[:5] not in message and PW[-5:] not in message


def test_asgi_router_check_refuses_an_unparsable_state_url_without_echoing_the_password(tmp_path: Path) -> None:
    finished = subprocess.run(
        [COMMAND, "check", str(_toml(tmp_path, UNPARSABLE[0]))], capture_output=True, text=True, timeout=60
    )
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0, output
    assert "state_url" in output and "'#'" in output and "percent-encode" in output
    assert PW[:5] not in output


async def test_a_router_whose_state_url_cannot_be_parsed_still_serves_from_its_own_state(
    upstream: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Settings built without validation (model_copy) carry the URL past the settings' check:
    # the router must still start, serve, and say why it does not share.
    settings = make_settings(upstream.url).model_copy(update={"state_url": _secret(UNPARSABLE[0])})
    caplog.set_level(logging.WARNING, logger.name)
    router = ModelRouter(host_app(), settings=settings)
    assert type(router.state) is InMemoryState
    async with LifespanManager(router) as manager:
        transport = httpx2.ASGITransport(app=manager.app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://router") as client:
            response = await client.post(
                "/v1/chat/completions",
                json={"model": "mock/gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            )
    assert response.status_code == 200, response.text
    said = [record.getMessage() for record in caplog.records if "state_url" in record.getMessage()]
    assert len(said) == 1 and "in this process" in said[0]
    assert PW[:5] not in caplog.text


def _secret(url: str) -> Any:
    from pydantic import SecretStr

    return SecretStr(url)


# --- 2. every credential form masked, everywhere ----------------------------------------------------


@pytest.mark.parametrize(("url", "shown"), list(MASKED.items()))
def test_every_credential_form_redis_py_accepts_is_masked(url: str, shown: str) -> None:
    assert mask_store_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:{port}/0?password=" + PW,
        "redis://127.0.0.1:{port}/0?db=0#" + PW,
        "unix:///nonexistent/asgi-router-test.sock?password=" + PW,
    ],
)
async def test_the_unreachable_warning_never_carries_the_password_in_any_form(
    url: str, refused_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    port = refused_url.split(":")[2].split("/")[0]
    url = url.format(port=port)
    caplog.set_level(logging.WARNING, logger.name)
    async with states(url, 1, connect=False) as (state,):
        await eventually(lambda: "unreachable" in caplog.text, within=5.0)
        assert not state.link.up
    said = [record.getMessage() for record in caplog.records if "unreachable" in record.getMessage()]
    assert len(said) == 1
    assert PW[:5] not in said[0]
    assert mask_store_url(url) in said[0]


def test_asgi_router_check_shows_the_store_masked(tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:6379/0?password={PW}"
    finished = subprocess.run([COMMAND, "check", str(_toml(tmp_path, url))], capture_output=True, text=True, timeout=60)
    assert finished.returncode == 0, finished.stderr
    assert "state: shared through redis://127.0.0.1:6379/0?password=***" in finished.stdout
    assert PW[:5] not in finished.stdout + finished.stderr


@pytest.mark.parametrize(
    "url",
    [
        f"unix:///run/redis.sock?password={PW}",
        f"redis+sentinel://a:26379/primary/0?sentinel_password={PW}",
        f"redis://:{PW}@h:1/0",
    ],
)
def test_the_log_scrubber_removes_the_password_in_every_form(url: str, caplog: pytest.LogCaptureFixture) -> None:
    router = ModelRouter(host_app(), settings=make_settings("http://127.0.0.1:1", state_url=url))
    caplog.set_level(logging.ERROR, logger.name)
    logger.error("a dependency said: could not connect with %s", PW)
    assert PW not in caplog.text and "[redacted]" in caplog.text
    assert PW in store_url_secrets(url)
    del router


# --- 6. a burst of failures keeps sharing on --------------------------------------------------------


@pytest.mark.load
@pytest.mark.fleet
async def test_a_thousand_concurrent_failing_requests_keep_fleet_sharing_on(
    redis_server: RedisServer, refused_url: str, tmp_path: Path
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    config = tmp_path / "router.toml"
    config.write_text(
        f"allow_unauthenticated = true\nstate_url = '{redis_server.url}'\nstate_key_prefix = '{prefix}'\n"
        f"[providers.down]\nbase_url = '{refused_url}'\napi_key = 'sk-down-0123456789'\n",
        encoding="utf-8",
    )
    store = aioredis.Redis.from_url(redis_server.url)
    with Fleet([RouterProcess("burst", config, tmp_path)]) as fleet:
        router = fleet.routers[0]
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=90)) as session:

            async def ask(index: int) -> int:
                # Distinct model ids of a provider that is down: one breaker each, as any caller can.
                body = {"model": f"down/m-{index}", "messages": [{"role": "user", "content": "hi"}]}
                async with session.post(f"{router.url}/v1/chat/completions", json=body) as response:
                    await response.read()
                    return response.status

            statuses = await asyncio.gather(*(ask(index) for index in range(1000)))
        assert all(status >= 500 for status in statuses)
        try:
            # The breakers reached the store: coalesced and queued, not refused by a drained pool
            # (a write that timed out on the router's busy loop may be missing).
            async def stored() -> bool:
                return await store.zcard(f"{prefix}:breakers") >= 950

            await eventually(stored, within=30, every=0.1)
        finally:
            await store.aclose()
        log = router.log()
    assert "unreachable" not in log, log[-2000:]


async def test_a_burst_of_one_breakers_failures_opens_it_across_the_fleet(redis_server: RedisServer) -> None:
    async with states(redis_server.url, 2) as (one, other):
        for _ in range(POLICY.consecutive_failures * 50):  # coalesced: a few writes, counted in full
            fail(one, "mock/burst")
        await eventually(lambda: phase(other, "mock/burst") is Phase.OPEN)


# --- 7. a foreign writer filling the index ------------------------------------------------------------


@pytest.mark.fleet
async def test_an_index_a_foreign_writer_filled_neither_blocks_redis_nor_unshares_the_fleet(
    redis_server: RedisServer,
) -> None:
    prefix = f"t{uuid.uuid4().hex[:8]}"
    index = f"{prefix}:breakers"
    store = aioredis.Redis.from_url(redis_server.url)
    try:
        for start in range(0, 300_000, 20_000):
            await store.zadd(index, {f"foreign/{n}": n for n in range(start, start + 20_000)})
        await store.config_set("slowlog-log-slower-than", 50_000)  # microseconds
        await store.slowlog_reset()
        async with states(redis_server.url, 2, prefix=prefix, connect=False) as (one, other):
            await eventually(lambda: one.link.up and other.link.up, within=10.0)
            for _ in range(POLICY.consecutive_failures):
                fail(one)
            await eventually(lambda: phase(other) is Phase.OPEN, within=5.0)
            assert one.link.up and other.link.up
        slow = await store.slowlog_get()
    finally:
        await store.config_set("slowlog-log-slower-than", 10_000)
        await store.delete(index)
        await store.aclose()
    assert slow == [], [entry.get("command") for entry in slow]
