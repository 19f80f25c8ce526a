"""The transport seam: the setting picks the implementation; an injected transport or httpx client wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import pytest
from asgi_lifespan import LifespanManager

from asgi_router import ConfigError, ModelRouter, RouterSettings
from asgi_router.transports.aiohttp_transport import AiohttpTransport
from asgi_router.transports.httpx_transport import HttpxTransport
from asgi_router.transports.provider import ProviderRuntime

from .conftest import host_app, make_settings
from .fakes import FakeTransport
from .mock_upstream import MockUpstream

pytestmark = pytest.mark.anyio


@pytest.mark.both_transports
async def test_the_setting_picks_the_transport(settings: RouterSettings, transport_kind: str) -> None:
    router = ModelRouter(host_app(), settings=settings)
    expected = {"aiohttp": AiohttpTransport, "httpx": HttpxTransport}[transport_kind]
    assert type(router.transport) is expected
    assert not router.transport.is_open and router.transport.is_quiet()
    async with LifespanManager(router):
        assert router.transport.is_open and router.transport.is_quiet()
    assert not router.transport.is_open


@pytest.mark.both_transports
async def test_an_injected_httpx_client_is_used_whatever_the_setting(settings: RouterSettings) -> None:
    seen: list[dict[str, object]] = []

    def answer(request: httpx2.Request) -> httpx2.Response:
        seen.append(json.loads(request.content))
        return httpx2.Response(200, json={"id": "from-mock-transport"})

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(answer)) as injected:
        router = ModelRouter(host_app(), settings=settings, http_client=injected)
        assert isinstance(router.transport, HttpxTransport)
        async with (
            LifespanManager(router),
            httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router), base_url="http://r") as client,
        ):
            response = await client.post("/v1/chat/completions", json={"model": "mock/any", "messages": []})
        assert not injected.is_closed  # the caller's client: never closed by the router
    assert response.json() == {"id": "from-mock-transport"}
    assert seen == [{"model": "any", "messages": []}]


class _Recording(FakeTransport):
    """Answers every request with one JSON body; counts its starts and closes."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def start(self) -> None:
        self.calls.append("start")

    async def aclose(self) -> None:
        self.calls.append("aclose")

    async def send(self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes) -> Any:
        self.calls.append(f"send {urlsplit(url).path} {json.loads(body)['model']}")
        return _Whole(b'{"id": "from-injected-transport"}')


class _Whole:
    """A whole JSON body, in one chunk."""

    status = 200
    drained = False

    def __init__(self, body: bytes) -> None:
        self.raw_headers = [(b"content-type", b"application/json")]
        self.chunks = self._chunks(body)

    @staticmethod
    async def _chunks(body: bytes) -> AsyncIterator[bytes]:
        yield body

    async def aclose(self) -> None:
        pass


async def test_an_injected_transport_carries_every_attempt_and_lives_with_the_lifespan(
    settings: RouterSettings,
) -> None:
    injected = _Recording()
    router = ModelRouter(host_app(), settings=settings, transport=injected)
    assert router.transport is injected
    async with (
        LifespanManager(router),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router), base_url="http://r") as client,
    ):
        response = await client.post("/v1/chat/completions", json={"model": "mock/any", "messages": []})
    assert response.json() == {"id": "from-injected-transport"}
    assert injected.calls == ["start", "send /v1/chat/completions any", "aclose"]


async def test_a_transport_and_an_httpx_client_together_are_refused(settings: RouterSettings) -> None:
    async with httpx2.AsyncClient() as injected:
        with pytest.raises(ConfigError, match="either transport= or http_client="):
            ModelRouter(host_app(), settings=settings, transport=_Recording(), http_client=injected)


async def test_gc_freeze_freezes_the_startup_heap_only_when_asked(settings: RouterSettings) -> None:
    import gc

    gc.unfreeze()
    async with LifespanManager(ModelRouter(host_app(), settings=settings)):
        assert gc.get_freeze_count() == 0  # off by default: the host app's process is its own
    frozen = settings.model_copy(update={"gc_freeze": True})
    try:
        async with LifespanManager(ModelRouter(host_app(), settings=frozen)):
            assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@pytest.mark.both_transports
async def test_pool_settings_bound_connections_on_both_transports(
    upstream: MockUpstream, refused_url: str, transport_kind: str
) -> None:
    # Six requests held 100 ms each by the upstream, through a pool of 3: the upstream never
    # answers more than 3 at once. Then three more at once: httpx kept 1 connection idle (it
    # opens 2), aiohttp keeps every released connection (its settings refuse an idle cap).
    # Connections are told apart by the router's port as the upstream saw it.
    pool: dict[str, int] = {"max_connections": 3}
    if transport_kind == "httpx":
        pool["max_keepalive_connections"] = 1
    settings = make_settings(upstream.url, refused_url, pool=pool)  # type: ignore[attr-defined]
    router = ModelRouter(host_app(), settings=settings)
    statuses: list[int] = []
    ports: list[set[int]] = []

    async with (
        LifespanManager(router),
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router), base_url="http://r", timeout=10) as client,
    ):

        async def one(request_id: str) -> None:
            response = await client.post(
                "/v1/chat/completions",
                json={"model": "mock/slow-100", "messages": []},
                headers={"x-request-id": request_id},
            )
            statuses.append(response.status_code)

        for burst, size in enumerate((6, 3)):
            upstream.peak_in_flight = 0
            ids = [f"pool-{transport_kind}-{burst}-{index}-{uuid.uuid4().hex[:8]}" for index in range(size)]
            async with anyio.create_task_group() as tasks:
                for request_id in ids:
                    tasks.start_soon(one, request_id)
            assert upstream.peak_in_flight == 3  # all three in use at once, never a fourth
            ports.append({upstream.record(request_id).client_port for request_id in ids})
        assert statuses == [200] * 9
        assert router.transport.is_quiet()
    assert len(ports[0]) == 3
    assert len(ports[0] & ports[1]) == (1 if transport_kind == "httpx" else 3)


# Run in a fresh interpreter, as a server would be: the frames inspected are the only
# requests in flight.
_WAITING = """
import asyncio, gc
import httpx2
from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import FakeUpstream, reply

async def host(scope, receive, send):
    pass

def upstream_headers_in_frames():
    # The upstream headers the router built (a plain dict: aiohttp's own copy is a CIMultiDict)
    # that a suspended coroutine's frame still refers to.
    return sum(
        1
        for o in gc.get_objects()
        if type(o).__name__ == "coroutine" and o.cr_frame is not None
        for value in o.cr_frame.f_locals.values()
        if type(value) is dict and "x-request-id" in value
    )

async def main():
    fake = FakeUpstream().start()
    fake.script("m", reply.slow(1.0, then=reply.stall_after_headers(30)))
    settings = RouterSettings.model_validate({"providers": {"fake": fake.provider()}, "allow_unauthenticated": True})
    router = ModelRouter(host, settings=settings)
    body = {"model": "fake/m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router), base_url="http://r") as client:
        waiting = [asyncio.ensure_future(client.post("/v1/chat/completions", json=body)) for _ in range(10)]
        while len(fake.hits) < 10:
            await asyncio.sleep(0.02)
        held, answered = upstream_headers_in_frames(), router.transport.open_responses
        for request in waiting:
            request.cancel()
        await asyncio.gather(*waiting, return_exceptions=True)
    fake.stop()
    print(len(fake.hits), answered, held)

asyncio.run(main())
"""


def test_requests_waiting_for_their_upstream_hold_no_upstream_headers() -> None:
    # Ten requests sent upstream, none answered yet: the headers each one's attempt built went
    # into aiohttp's own copy as it was sent, and no frame of the attempt phase (the attempt,
    # the call, the transport's send) keeps the original while the upstream is awaited (a
    # burst of requests waiting is most of what the RSS per open stream measures).
    done = subprocess.run(
        [sys.executable, "-c", _WAITING], capture_output=True, text=True, timeout=120, env=os.environ.copy()
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["10", "0", "0"]
