"""An attempt's reads and the relay's, bounded in the request's own scope: no scope of their own.

The request's listening scope (``inbound/disconnect.py``) is a lender whose one timer times every
limit of the request. In the request's own task, a call (``attempts/call.py``) and the relay
(``responses/relay.py``) bound their reads on it (a ``reading`` block) instead of entering a
``Deadline`` each; in a task of its own (a hedge's racer) a call still enters one, since a bound
on the request's scope would cancel the request's task. These pin that every limit still holds
(first byte, ``idle`` before and after commit, ``total``), that a limit that overruns ends the
call or the relay and never the request, that a slow client is not upstream idleness, and that a
client that leaves still cancels the read and is not taken for a timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from asgi_router.attempts.call import call
from asgi_router.attempts.outcomes import Committed, Failed
from asgi_router.core.candidate import Candidate
from asgi_router.core.deadlines import Deadline
from asgi_router.inbound.disconnect import WATCH_AFTER, ListeningScope
from asgi_router.responses.relay import relay_stream

from ..doubles import FAKE_CLOCK_BACKEND, RelayProgress, counting_deadlines

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> object:
    """The loop's timers run on a fake clock: the limits these tests cross take no real time."""
    return FAKE_CLOCK_BACKEND


def _loop_time() -> float:
    """The running loop's clock (a fake one here): the clock the router's timers run on."""
    return asyncio.get_running_loop().time()


_NEVER = 30.0  # a pause no test waits out: a read that never delivers


class _Request:
    """The listening scope's party (held throughout: it never listens)."""

    async def receive(self) -> dict[str, Any]:
        raise AssertionError("a held scope does not listen")

    def client_left(self, scope: Deadline) -> None:
        raise AssertionError("the client never leaves by the listener in these tests")

    def complete(self) -> None:
        pass


class _Response:
    """An upstream response whose chunks come after the pauses given: ``(pause, chunk)`` pairs."""

    status = 200
    raw_headers: tuple[tuple[bytes, bytes], ...] = ()
    drained = False

    def __init__(self, *script: tuple[float, bytes]) -> None:
        self.closed = False
        self.chunks = self._chunks(script)

    async def _chunks(self, script: tuple[tuple[float, bytes], ...]) -> AsyncIterator[bytes]:
        for pause, chunk in script:
            await asyncio.sleep(pause)
            yield chunk

    def close_now(self) -> None:
        self.closed = True

    async def aclose(self) -> None:  # pragma: no cover - close_now is what closes it
        self.closed = True


def _provider(first_byte: float = 5.0, idle: float = 5.0, total: float = 20.0) -> Any:
    return SimpleNamespace(name="up", timeouts=SimpleNamespace(first_byte=first_byte, idle=idle, total=total))


class _Transport:
    def __init__(self, response: _Response) -> None:
        self.response = response

    async def send(self, provider: Any, url: str, headers: dict[str, str], body: bytes) -> _Response:
        return self.response


def _call(response: _Response, stream: bool, **timeouts: float) -> Any:
    """The call of one attempt whose upstream answers ``response`` at once."""
    context = SimpleNamespace(clock=_loop_time, transport=_Transport(response), max_response_bytes=1 << 20)
    ready = SimpleNamespace(
        candidate=Candidate("up", "m"),
        provider=_provider(**timeouts),
        lease=SimpleNamespace(responded=lambda: None),
        started=_loop_time(),
        body=b"{}",
        target=SimpleNamespace(translated=False),
    )
    return call(
        context,
        ready,
        "http://up/v1/chat/completions",
        {},
        stream,
        frozenset(),
        1,
        _loop_time() + 60,
    )  # type: ignore[arg-type]


def _not_cancelled() -> bool:
    task = asyncio.current_task()
    assert task is not None
    return task.cancelling() == 0


async def _client_leaves_during(read: Callable[[], Awaitable[object]]) -> None:
    """Await ``read()`` in a request's scope whose client leaves 50 ms in (past every read's
    limit's start, before any limit): its cancellation goes through the read to the scope."""

    async def leave(request: Deadline) -> None:
        await asyncio.sleep(0.05)
        request.cancel()  # what the listener does when the client leaves

    propagated = False
    with ListeningScope(_Request(), WATCH_AFTER, held=True) as request:
        leaving = asyncio.ensure_future(leave(request))
        try:
            await read()
        except asyncio.CancelledError:
            propagated = True  # on to the request's scope, which swallows its own
            raise
        raise AssertionError("the request's cancellation was swallowed")  # pragma: no cover
    await leaving
    assert propagated and request.expired
    assert _not_cancelled()  # the scope took its own back


# --- an attempt -----------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_in_the_requests_task_a_first_byte_that_never_comes_is_a_timeout_and_the_request_goes_on(
    monkeypatch: pytest.MonkeyPatch, stream: bool
) -> None:
    made = counting_deadlines(monkeypatch)
    response = _Response((_NEVER, b"late"))
    started = _loop_time()
    with ListeningScope(_Request(), WATCH_AFTER, held=True) as request:
        result = await _call(response, stream, first_byte=0.1)
        await asyncio.sleep(0)  # the request goes on: its task is not cancelled
        assert _not_cancelled()
    assert isinstance(result, Failed) and (result.reason, result.status) == ("timeout", 200)
    assert 0.1 <= _loop_time() - started < 3
    assert response.closed
    assert made == []  # bounded in the request's scope: no scope of the call's own
    assert not request.expired


async def test_in_the_requests_task_a_whole_body_stalling_past_idle_is_a_timeout() -> None:
    response = _Response((0, b'{"a":'), (_NEVER, b"1}"))
    with ListeningScope(_Request(), WATCH_AFTER, held=True) as request:
        result = await _call(response, False, idle=0.1)
        await asyncio.sleep(0)
        assert _not_cancelled()
    assert isinstance(result, Failed) and result.reason == "timeout"
    assert response.closed and not request.expired


async def test_in_the_requests_task_a_call_done_in_time_leaves_no_bound_behind() -> None:
    response = _Response((0.01, b"data: x\n\n"))
    with ListeningScope(_Request(), WATCH_AFTER, held=True) as request:
        result = await _call(response, True, first_byte=0.1)
        assert isinstance(result, Committed) and result.body == b"data: x\n\n"
        await asyncio.sleep(0.25)  # well past the first-byte limit: nothing cancels the request
        assert _not_cancelled()
    assert not response.closed  # a committed stream is the relay's to close
    assert not request.expired


async def test_a_client_leaving_during_a_call_in_the_requests_task_cancels_it_and_is_no_timeout() -> None:
    response = _Response((_NEVER, b"late"))
    await _client_leaves_during(lambda: _call(response, True, first_byte=0.1))
    assert response.closed


async def test_a_call_in_a_task_of_its_own_times_out_in_its_own_scope_not_the_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A hedge's racer: a bound on the request's scope would cancel the request's task.
    made = counting_deadlines(monkeypatch)
    response = _Response((_NEVER, b"late"))
    with ListeningScope(_Request(), WATCH_AFTER, held=True) as request:
        racer = asyncio.ensure_future(_call(response, True, first_byte=0.1))
        result = await racer  # a cancellation of the request's task would end the test here
        await asyncio.sleep(0)
        assert _not_cancelled()
    assert isinstance(result, Failed) and result.reason == "timeout"
    assert len(made) == 1 and made[0].expired is False  # its own scope, its bound taken back
    assert response.closed and not request.expired


# --- the relay ------------------------------------------------------------------------------


class _Client:
    """The ASGI ``send``: what the client received, each message taking ``pause`` seconds."""

    def __init__(self, pause: float = 0.0) -> None:
        self.pause = pause
        self.bodies: list[bytes] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            if self.pause:
                await asyncio.sleep(self.pause)
            self.bodies.append(message["body"])


def _committed(response: _Response, idle: float = 5.0, total: float = 20.0) -> Committed:
    started = _loop_time()
    return Committed(
        Candidate("up", "m"),
        response,
        b"data: 1\n\n",
        _provider(idle=idle, total=total),
        started,
        started + total,
        0.0,
        1,
    )


async def _relay(response: _Response, client: _Client, **timeouts: float) -> Any:
    return await relay_stream(client, _committed(response, **timeouts), [], _loop_time, None, RelayProgress())  # type: ignore[arg-type]


async def test_in_the_requests_task_a_stream_stalling_past_idle_ends_with_the_timeout_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = counting_deadlines(monkeypatch)
    response = _Response((0, b"data: 2\n\n"), (_NEVER, b"data: 3\n\n"))
    client = _Client()
    started = _loop_time()
    with ListeningScope(_Request(), WATCH_AFTER, held=True) as request:
        result = await _relay(response, client, idle=0.1)
        await asyncio.sleep(0)
        assert _not_cancelled()
    assert 0.1 <= _loop_time() - started < 3
    assert (result.reason, result.chunks) == ("timeout", 2)
    assert client.bodies[:2] == [b"data: 1\n\n", b"data: 2\n\n"]
    assert b"no data within the idle timeout" in client.bodies[-1]
    assert response.closed and made == [] and not request.expired


async def test_in_the_requests_task_a_stream_outrunning_total_ends_with_the_total_event() -> None:
    response = _Response(*[(0.03, b"data: x\n\n")] * 100)  # steady, but 3 s in all
    client = _Client()
    with ListeningScope(_Request(), WATCH_AFTER, held=True) as request:
        result = await _relay(response, client, idle=1.0, total=0.2)
        assert _not_cancelled()
    assert result.reason == "timeout"
    assert b"the attempt's total timeout ran out" in client.bodies[-1]
    assert response.closed and not request.expired


async def test_in_the_requests_task_a_slow_client_is_not_upstream_idleness() -> None:
    # Each chunk is ready at once, each send takes twice the idle limit: only reads are timed.
    response = _Response(*[(0, b"data: x\n\n")] * 3, (0, b"data: [DONE]\n\n"))
    client = _Client(pause=0.1)
    with ListeningScope(_Request(), WATCH_AFTER, held=True) as request:
        result = await _relay(response, client, idle=0.05)
        assert _not_cancelled()
    assert (result.reason, result.chunks) == ("served", 5)
    assert client.bodies[-2:] == [b"data: [DONE]\n\n", b""]
    assert not request.expired


async def test_a_client_leaving_during_a_relay_read_cancels_it_and_is_no_timeout() -> None:
    response = _Response((_NEVER, b"data: 2\n\n"))
    client = _Client()
    await _client_leaves_during(lambda: _relay(response, client, idle=0.1))
    assert response.closed and client.bodies == [b"data: 1\n\n"]  # no timeout event: the client is gone


async def test_a_relay_outside_a_requests_scope_bounds_its_reads_in_a_scope_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = counting_deadlines(monkeypatch)
    response = _Response((_NEVER, b"data: 2\n\n"))
    client = _Client()
    result = await _relay(response, client, idle=0.1)
    assert result.reason == "timeout" and len(made) == 1 and not made[0].expired
    assert _not_cancelled()
