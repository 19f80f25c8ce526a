"""The commit point and the byte relay, through real sockets (uvicorn on 127.0.0.1)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx2
import pytest

from asgi_router import ModelRouter, RouterSettings
from asgi_router.transports.provider import ProviderRuntime
from bench.asgi_calls import receive_once

from .conftest import SentMessages, chat_scope, host_app, make_settings, pool_is_quiet, shared_routers
from .fakes import FakeTransport
from .mock_upstream import UTF8_FRAMES, MockUpstream
from .servers import ServersByTransport, ServerThread
from .waiting import eventually

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def routers(upstream: MockUpstream, refused_url: str) -> Iterator[ServersByTransport[ModelRouter]]:
    with shared_routers(
        upstream,
        refused_url,
        timeouts={"connect": 1, "first_byte": 1, "idle": 0.4, "total": 10},
        groups={
            "g": {"members": ["down/x", "mock/ok"]},
            "brk": {"members": ["mock/break-2", "mock2/ok"]},
            "stall": {"members": ["mock/stall-2", "mock2/ok"]},
        },
    ) as served:
        yield served


@pytest.fixture
def router_server(routers: ServersByTransport[ModelRouter], transport_kind: str) -> tuple[ModelRouter, ServerThread]:
    """The module's router on the test's transport, and its server."""
    return routers(transport_kind)


def body(model: str, stream: bool = True) -> dict[str, Any]:
    return {"model": model, "stream": stream, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.both_transports
async def test_stream_after_failover_is_relayed_byte_exact(
    router_server: tuple[ModelRouter, ServerThread], upstream: MockUpstream
) -> None:
    _, server = router_server
    async with httpx2.AsyncClient(base_url=server.url) as client:
        async with client.stream("POST", "/v1/chat/completions", json=body("group/g")) as response:
            raw = b"".join([part async for part in response.aiter_raw()])
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["x-router-model"] == "mock/ok"
    assert response.headers["x-router-attempts"] == "2"
    assert "content-length" not in response.headers
    assert raw == upstream.answer(body("ok"))  # what the upstream sends, asked directly


@pytest.mark.both_transports
async def test_chunks_reach_the_client_as_they_arrive_not_at_the_end(
    router_server: tuple[ModelRouter, ServerThread],
) -> None:
    _, server = router_server
    arrivals: list[float] = []
    async with httpx2.AsyncClient(base_url=server.url) as client:
        started = time.monotonic()
        async with client.stream("POST", "/v1/chat/completions", json=body("mock/trickle-25")) as response:
            async for part in response.aiter_raw():
                arrivals.append(time.monotonic() - started)
                assert part
    # 25 events 20 ms apart take ~0.5 s upstream; the first must arrive long before the last.
    assert len(arrivals) >= 5
    assert arrivals[-1] - arrivals[0] > 0.25


@pytest.mark.both_transports
async def test_mid_stream_break_writes_one_error_event_and_no_done(
    router_server: tuple[ModelRouter, ServerThread],
) -> None:
    _, server = router_server
    async with httpx2.AsyncClient(base_url=server.url) as client:
        async with client.stream("POST", "/v1/chat/completions", json=body("group/brk")) as response:
            raw = b"".join([part async for part in response.aiter_raw()])
    # committed to the first member (2 events arrived), so no failover after the break
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "mock/break-2"
    events = [e for e in raw.split(b"\n\n") if e]
    assert len(events) == 3
    assert b"[DONE]" not in raw
    error = json.loads(events[-1].removeprefix(b"data: "))["error"]
    assert error["code"] == "stream_interrupted"
    assert error["message"].startswith("mock/break-2: stream_interrupted")


@pytest.mark.both_transports
async def test_idle_timeout_after_commit_ends_with_timeout_error_event(
    router_server: tuple[ModelRouter, ServerThread], upstream: MockUpstream
) -> None:
    _, server = router_server
    async with httpx2.AsyncClient(base_url=server.url) as client:
        async with client.stream("POST", "/v1/chat/completions", json=body("group/stall")) as response:
            raw = b"".join([part async for part in response.aiter_raw()])
    assert response.headers["x-router-model"] == "mock/stall-2"
    last = json.loads(raw.rstrip(b"\n").rsplit(b"\n\n", 1)[-1].removeprefix(b"data: "))
    assert last["error"]["code"] == "timeout"
    assert "idle timeout" in last["error"]["message"]  # idle is 0.4 s: it cut the stall, not the total
    assert b"[DONE]" not in raw
    assert upstream.record(response.headers["x-request-id"]).disconnected  # the upstream was let go


@pytest.mark.parametrize("model", ["group/brk", "group/stall"])
@pytest.mark.both_transports
async def test_non_streaming_body_that_breaks_or_stalls_fails_over_before_commit(
    router_server: tuple[ModelRouter, ServerThread], model: str
) -> None:
    _, server = router_server
    async with httpx2.AsyncClient(base_url=server.url) as client:
        response = await client.post("/v1/chat/completions", json=body(model, stream=False))
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "mock2/ok"
    assert response.headers["x-router-attempts"] == "2"
    assert response.json()["choices"][0]["message"]["content"] == "hello from ok"


@pytest.mark.both_transports
async def test_utf8_character_split_across_chunks_arrives_byte_exact(
    router_server: tuple[ModelRouter, ServerThread],
) -> None:
    _, server = router_server
    async with httpx2.AsyncClient(base_url=server.url) as client:
        async with client.stream("POST", "/v1/chat/completions", json=body("mock/utf8")) as response:
            raw = b"".join([part async for part in response.aiter_raw()])
    assert raw == b"".join(UTF8_FRAMES)
    assert "你好" in raw.decode()


@pytest.mark.both_transports
async def test_utf8_split_stays_split_in_the_asgi_messages(upstream: MockUpstream, refused_url: str) -> None:
    """Driven with hand-written receive/send: the relay never re-chunks or decodes."""
    router = ModelRouter(host_app(), settings=make_settings(upstream.url, refused_url))  # type: ignore[attr-defined]
    request = json.dumps(body("mock/utf8")).encode()
    sent = SentMessages()
    receive = receive_once(request, then=anyio.sleep_forever)

    scope = chat_scope()
    with anyio.fail_after(5):
        await router(scope, receive, sent)  # type: ignore[arg-type]
    await router.transport.aclose()
    bodies = [m["body"] for m in sent if m["type"] == "http.response.body"]
    assert bodies[:3] == UTF8_FRAMES
    assert bodies[0].endswith(b"\xe4\xbd")
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


@pytest.mark.both_transports
async def test_client_disconnect_mid_stream_cancels_upstream_and_frees_the_pool(
    router_server: tuple[ModelRouter, ServerThread], upstream: MockUpstream
) -> None:
    router, server = router_server
    async with httpx2.AsyncClient(base_url=server.url) as client:
        async with client.stream("POST", "/v1/chat/completions", json=body("mock/trickle-500")) as response:
            request_id = response.headers["x-request-id"]
            async for _ in response.aiter_raw():
                break  # read one chunk, then walk away
    seen = upstream.record(request_id, timeout=3)  # heard at once, not after 10 s of trickle
    assert seen.disconnected and not seen.completed
    await eventually(lambda: pool_is_quiet(router), within=3)
    await eventually(lambda: [r for r in router.recent.snapshot() if r.request_id == request_id], within=3)
    (record,) = [r for r in router.recent.snapshot() if r.request_id == request_id]
    assert record.status == 499
    assert record.bytes_relayed > 0  # what the client did receive before it left
    assert [e.outcome for e in record.events] == ["aborted"]


@pytest.mark.both_transports
async def test_client_disconnect_before_first_byte_cancels_the_upstream_wait(
    upstream: MockUpstream, refused_url: str
) -> None:
    settings = make_settings(
        upstream.url,  # type: ignore[attr-defined]
        refused_url,
        timeouts={"connect": 1, "first_byte": 8, "idle": 8, "total": 20},
    )
    router = ModelRouter(host_app(), settings=settings)
    request_id = "disconnect-before-first-byte"
    with ServerThread(router) as server:
        async with httpx2.AsyncClient(base_url=server.url, timeout=httpx2.Timeout(0.3)) as client:
            with pytest.raises(httpx2.ReadTimeout):
                await client.post(
                    "/v1/chat/completions", json=body("mock/hang", stream=False), headers={"x-request-id": request_id}
                )
        # heard at once: within the wait, not when the 8 s first-byte timeout fires
        assert upstream.record(request_id, timeout=3).disconnected
        await eventually(lambda: pool_is_quiet(router), within=3)


class _EndlessResponse:
    """An upstream response that can always give another chunk; counts how many were pulled."""

    def __init__(self) -> None:
        self.status = 200
        self.raw_headers = [(b"content-type", b"text/event-stream")]
        self.drained = False
        self.pulled = 0
        self.closed = False
        self.chunks = self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while True:
            self.pulled += 1
            yield b"data: {}\n\n"

    async def aclose(self) -> None:
        self.closed = True


class _EndlessTransport(FakeTransport):
    def __init__(self) -> None:
        self.response = _EndlessResponse()

    async def send(self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes) -> _EndlessResponse:
        return self.response


async def test_slow_client_slows_the_upstream_read_no_unbounded_buffer(settings: RouterSettings) -> None:
    transport = _EndlessTransport()
    router = ModelRouter(host_app(), settings=settings, transport=transport)
    gate = anyio.Event()
    sent: list[dict[str, Any]] = []
    request = json.dumps(body("mock/ok")).encode()
    gone = anyio.Event()

    receive = receive_once(request, then=gone.wait)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if len(sent) == 5:
            await gate.wait()  # the client stops reading

    scope = chat_scope()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(router, scope, receive, send)
        await eventually(lambda: len(sent) >= 5)
        pulled_while_blocked = transport.response.pulled
        await anyio.sleep(0.3)
        assert transport.response.pulled == pulled_while_blocked  # nothing read while send blocks
        assert pulled_while_blocked == 4  # start + 4 bodies sent; the 4th waits in send
        gone.set()  # the client disconnects
    assert transport.response.closed


@pytest.mark.both_transports
async def test_total_timeout_bounds_a_committed_stream_end_to_end(upstream: MockUpstream, refused_url: str) -> None:
    settings = make_settings(
        upstream.url,  # type: ignore[attr-defined]
        refused_url,
        timeouts={"connect": 1, "first_byte": 1, "idle": 1, "total": 0.6},
    )
    with ServerThread(ModelRouter(host_app(), settings=settings)) as server:
        async with httpx2.AsyncClient(base_url=server.url) as client:
            async with client.stream("POST", "/v1/chat/completions", json=body("mock/trickle-500")) as response:
                raw = b"".join([part async for part in response.aiter_raw()])
    error = json.loads(raw.rstrip(b"\n").rsplit(b"\n\n", 1)[-1].removeprefix(b"data: "))["error"]
    assert error["code"] == "timeout"
    assert "total timeout" in error["message"]
    assert raw.count(b"data: ") > 5  # some of the stream was relayed before the cut
