"""What a fleet's channel may say, at the boundary: a router on uvicorn sharing a real
``redis-server`` (tests/fleet.py starts it), messages published on the fleet's channel as any
client of the store could, the router's answers and its status page's JSON read over HTTP.

A message whose figures are not finite, are negative, or (a reset) exceed ``max_rate_limit_reset``
is ignored whole.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import redis.asyncio as aioredis

from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import FakeUpstream

from .conftest import host_app
from .fleet import RedisServer
from .resilient import tag
from .servers import ServerThread
from .waiting import eventually

pytestmark = [pytest.mark.fleet, pytest.mark.anyio]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as upstream:
        yield upstream


def _strict(text: str) -> Any:
    """JSON as every parser reads it: ``Infinity`` and ``NaN`` are not JSON."""

    def refuse(word: str) -> Any:
        raise ValueError(f"{word} in the status page's JSON")

    return json.loads(text, parse_constant=refuse)


async def test_a_fleet_message_with_a_figure_out_of_bounds_is_ignored_whole(
    fake: FakeUpstream, redis_server: RedisServer
) -> None:
    t, prefix = tag(), f"t{uuid.uuid4().hex[:8]}"
    settings = RouterSettings(
        providers={"p1": fake.provider()},
        allow_unauthenticated=True,
        state_url=redis_server.url,
        state_key_prefix=prefix,
        status_route="/router/status",
    )
    store = aioredis.Redis.from_url(redis_server.url)
    channel = f"{prefix}:breakers"
    try:
        with ServerThread(ModelRouter(host_app(), settings=settings)) as server:

            def marked() -> list[str]:
                page = _strict(httpx2.get(f"{server.url}/router/status.json", timeout=10).text)
                return [row["member"] for row in (page.get("capacity") or {}).get("over_stated_limit", [])]

            async def heard(member: str) -> bool:  # a sound mark, published until the router hears it
                await store.publish(channel, json.dumps(["rate_limit", member, 60, 0, 0]))
                return member in marked()

            await eventually(lambda: heard(f"p1/first{t}"), within=10)
            for message in (
                f'["rate_limit","p1/a{t}",Infinity,0,0]',
                f'["rate_limit","p1/a{t}",NaN,0,0]',
                f'["rate_limit","p1/a{t}",1e999,0,0]',
                f'["rate_limit","p1/a{t}",-5,0,0]',
                f'["rate_limit","p1/a{t}",0,-1,30]',
                f'["rate_limit","p1/a{t}",301,0,0]',
                f'["p1/a{t}","open",Infinity,Infinity,5,999]',
            ):
                await store.publish(channel, message)
            await eventually(lambda: heard(f"p1/last{t}"), within=10)  # heard after the ones above
            assert f"p1/a{t}" not in marked()
            body = {"model": f"p1/a{t}", "messages": [{"role": "user", "content": "hi"}]}
            answer = httpx2.post(f"{server.url}/v1/chat/completions", json=body, timeout=10)
            assert answer.status_code == 200, answer.text
            page = httpx2.get(f"{server.url}/router/status.json", timeout=10)
            assert page.status_code == 200 and f"p1/a{t}" in page.text
            _strict(page.text)
    finally:
        await store.aclose()
