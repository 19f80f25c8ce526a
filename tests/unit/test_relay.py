"""The one relay, driven over the memory transport: what the client receives, chunk by chunk.

``relay_stream`` relays a committed stream byte-exact; ``relay_call`` with ``WholeEvents`` cuts
it into whole events (a plan that may continue it), and ``relay_resumable`` continues it after
a break through the same relay. These pin the bytes the client gets (split characters stay
split, a partial event is held), how a break ends a stream (one in-band error, no ``[DONE]``),
the idle limit, a client that leaves, a translated stream's event bound, and the usage tail.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from types import SimpleNamespace
from typing import Any

import pytest

from asgi_router.attempts.outcomes import Committed
from asgi_router.attempts.usage import LastChunks, Tail, find_usage
from asgi_router.core.candidate import Candidate
from asgi_router.core.upstream_errors import UpstreamBroken
from asgi_router.protocols.continuation import Said, said_so_far
from asgi_router.protocols.from_anthropic import StreamTranslation
from asgi_router.responses.relay import relay_stream
from asgi_router.responses.resume_relay import relay_resumable
from asgi_router.responses.whole_events import WholeEvents, complete_events
from asgi_router.testing.memory_transport import STALL, MemoryResponse, Stall

from ..doubles import RelayProgress

pytestmark = pytest.mark.anyio

_DONE = b"data: [DONE]\n\n"


class _Client:
    """The ASGI ``send``: the body messages received; ``gone_after``: a send after that many
    bodies fails as a server's does when its client left."""

    def __init__(self, gone_after: int | None = None) -> None:
        self.started: list[int] = []
        self.bodies: list[bytes] = []
        self.ended = False
        self._gone_after = gone_after

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.started.append(message["status"])
            return
        if self._gone_after is not None and len(self.bodies) >= self._gone_after:
            raise OSError("the client is gone")
        self.bodies.append(message["body"])
        self.ended = not message["more_body"]

    @property
    def received(self) -> bytes:
        return b"".join(self.bodies)


def _committed(
    first: bytes,
    *rest: bytes,
    ending: Exception | Stall | None = None,
    idle: float = 5.0,
    translation: StreamTranslation | None = None,
) -> Committed:
    started = time.monotonic()
    provider: Any = SimpleNamespace(name="up", timeouts=SimpleNamespace(first_byte=5.0, idle=idle, total=20.0))
    response = MemoryResponse(rest, ending=ending)
    return Committed(
        Candidate("up", "m"), response, first, provider, started, started + 20.0, 0.0, 1, translation=translation
    )


def _chunk(text: str) -> bytes:
    chunk = {"id": "c1", "created": 1, "choices": [{"index": 0, "delta": {"content": text}}]}
    return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"


async def _relay(committed: Committed, client: _Client, tail: Any = None) -> Any:
    return await relay_stream(client, committed, [], time.monotonic, tail, RelayProgress())  # type: ignore[arg-type]


async def test_the_byte_exact_relay_sends_each_chunk_as_it_came_a_split_character_staying_split() -> None:
    whole = _chunk("naïve")
    at = whole.index("ï".encode()) + 1  # inside the two bytes of ï
    parts = [whole[:at], whole[at:], _DONE]
    client = _Client()
    result = await _relay(_committed(*parts), client)
    assert client.bodies == [*parts, b""]  # each chunk alone, none joined, none re-encoded
    assert (result.reason, result.chunks, result.bytes_relayed) == ("served", 3, sum(map(len, parts)))
    assert client.started == [200] and client.ended


async def test_a_stream_that_breaks_mid_way_ends_with_one_in_band_error_and_no_done() -> None:
    client = _Client()
    committed = _committed(_chunk("a"), _chunk("b"), ending=UpstreamBroken("reset by peer"))
    result = await _relay(committed, client)
    assert result.reason == "stream_interrupted"
    assert client.bodies[:2] == [_chunk("a"), _chunk("b")]
    error = json.loads(client.bodies[-1].removeprefix(b"data: "))
    assert "upstream connection broke" in error["error"]["message"]
    assert _DONE not in client.received and client.ended
    assert committed.response.closed  # type: ignore[attr-defined]


async def test_a_break_after_the_last_event_loses_nothing_and_is_served() -> None:
    client = _Client()
    result = await _relay(_committed(_chunk("a"), _DONE, ending=UpstreamBroken("reset")), client)
    assert result.reason == "served" and client.bodies[-2:] == [_DONE, b""]


async def test_an_error_after_a_chunk_cut_mid_event_starts_on_an_event_boundary() -> None:
    client = _Client()
    await _relay(_committed(_chunk("a")[:10], ending=UpstreamBroken("reset")), client)
    assert client.bodies[-1].startswith(b"\n\ndata: ")


_ERROR = b'data: {"error":{"message":"the model fell over","type":"server_error","code":null}}\n\n'
_EVENTS = (_chunk(""), _chunk("Hello"), _chunk(" there"), _ERROR, _DONE)
_STREAM = b"".join(_EVENTS)
_BOUNDS = tuple(itertools.accumulate(len(event) for event in _EVENTS))[:-1]
_AT = _STREAM.index(b'{"error"')
_CUTS = [
    *(cuts for k in range(len(_BOUNDS) + 1) for cuts in itertools.combinations(_BOUNDS, k)),
    (_AT + 3, _BOUNDS[-1]),  # the error event's own start cut, its end apart from [DONE]
    (_AT - 4, _AT + 3, _BOUNDS[-1], len(_STREAM) - 3),  # cut inside its start, and inside [DONE]
    (_BOUNDS[-1] - 10, len(_STREAM) - 10),  # the error's end and [DONE] in pieces
    *((_AT + 7 + k, _AT + 8 + k, _AT + 9 + k) for k in range(0, 60, 3)),  # short pieces of it
]


@pytest.mark.parametrize("cuts", _CUTS, ids=str)
async def test_an_error_event_then_done_is_relayed_as_sent_and_is_a_break_however_the_upstream_cut_it(
    cuts: tuple[int, ...],
) -> None:
    parts = [_STREAM[start:end] for start, end in zip((0, *cuts), (*cuts, len(_STREAM)), strict=True)]
    client = _Client()
    result = await _relay(_committed(*parts), client)
    assert client.received == _STREAM and client.bodies[:-1] == parts  # byte-exact, each chunk as it came
    assert result.reason == "stream_interrupted"


async def test_a_stream_quiet_past_idle_ends_with_the_idle_error() -> None:
    client = _Client()
    started = time.monotonic()
    result = await _relay(_committed(_chunk("a"), ending=STALL, idle=0.05), client)
    assert 0.05 <= time.monotonic() - started < 5
    assert (result.reason, result.chunks) == ("timeout", 1)
    assert b"no data within the idle timeout" in client.bodies[-1] and _DONE not in client.received


async def test_a_client_gone_mid_stream_ends_the_relay_as_client_disconnected_and_closes_the_upstream() -> None:
    client = _Client(gone_after=2)
    committed = _committed(_chunk("a"), _chunk("b"), _chunk("c"), _DONE)
    progress = RelayProgress()
    result = await relay_stream(client, committed, [], time.monotonic, None, progress)  # type: ignore[arg-type]
    assert (result.reason, result.chunks) == ("client_disconnected", 2)
    assert (progress.chunks_relayed, progress.bytes_relayed) == (2, len(_chunk("a") + _chunk("b")))
    assert committed.response.closed  # type: ignore[attr-defined]


async def test_a_client_gone_after_the_last_event_is_served() -> None:
    client = _Client(gone_after=2)
    result = await _relay(_committed(_chunk("a"), _DONE), client)
    assert result.reason == "served"


async def test_the_usage_tail_keeps_the_last_chunks_sent_where_the_usage_is() -> None:
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}\n\n'
    tail = LastChunks(maxlen=4)
    client = _Client()
    result = await _relay(_committed(*[_chunk(str(n)) for n in range(10)], usage, _DONE), client, tail)
    assert list(tail)[-2:] == [usage, _DONE]
    assert (result.before_last, result.last) == (usage, _DONE)
    assert find_usage(b"".join(tail)) == (7, 3, 0, 0)


async def test_a_translated_stream_with_an_event_over_max_event_bytes_ends_with_an_in_band_error() -> None:
    def event(kind: str, **fields: Any) -> bytes:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields})}\n\n".encode()

    start = {"id": "msg_1", "model": "m", "usage": {"input_tokens": 5, "output_tokens": 1}}
    translation = StreamTranslation(include_usage=True, max_event_bytes=1024)
    first = translation.feed(
        event("message_start", message=start)
        + event("content_block_start", index=0, content_block={"type": "text", "text": ""})
        + event("content_block_delta", index=0, delta={"type": "text_delta", "text": "hi"})
    )
    assert translation.ready and first
    huge = event("content_block_delta", index=0, delta={"type": "text_delta", "text": "x" * 4096})
    client = _Client()
    result = await _relay(_committed(first, huge[:2000], huge[2000:], translation=translation), client)
    assert result.reason == "stream_interrupted"
    assert client.bodies[0] == first and b"x" * 100 not in client.received  # nothing of it went out
    assert b'"error"' in client.bodies[-1] and _DONE not in client.received


# --- whole events: the cut for a stream that may be continued -------------------------------


async def _relay_resumable(committed: Committed, client: _Client, resumer: _Resumer, tail: Tail | None = None) -> Any:
    return await relay_resumable(
        client,  # type: ignore[arg-type]
        committed,
        [],
        time.monotonic,
        resumer,  # type: ignore[arg-type]
        _error_event,
        tail,
        RelayProgress(),
    )


async def test_whole_event_cutting_holds_a_partial_event_until_it_completes() -> None:
    a, b = _chunk("a"), _chunk("b")
    client = _Client()
    committed = _committed(a + b[:7], b[7:12], b[12:] + _DONE)
    resumer = _Resumer(then=None, current=committed)
    result, _ = await _relay_resumable(committed, client, resumer)
    assert client.bodies == [a, b + _DONE, b""]  # the partial event never went out on its own
    assert (result.reason, result.chunks, result.last) == ("served", 2, b + _DONE)
    assert resumer.outcome == "served" and resumer.asked == []


async def test_whole_event_cutting_a_break_leaves_the_client_no_half_event() -> None:
    a, b = _chunk("a"), _chunk("b")
    client = _Client()
    committed = _committed(a + b[:7], ending=UpstreamBroken("reset"))
    resumer = _Resumer(then=None, current=committed)
    result, _ = await _relay_resumable(committed, client, resumer)
    assert result.reason == "stream_interrupted" and resumer.outcome == "failed"
    assert client.bodies == [a, b"error: stream_interrupted: upstream connection broke\n\n"]  # no half event


class _Resumer:
    """A StreamResumer's side of the relay: ``then`` continues the first break (``None``: none)."""

    def __init__(self, then: Committed | None, current: Committed) -> None:
        self.then = then
        self.current = current
        self.asked: list[tuple[str, str]] = []
        self.outcome = ""
        self.bounds = (1 << 20, 1 << 20)

    def said(self, sent: bytes) -> Said | str:
        return said_so_far(sent)

    def may_continue(self, reason: str, total: bool) -> bool:
        # The retry state's verdict, as the attempts give it: a cut or a stall, within total, once.
        return reason in ("stream_interrupted", "timeout") and not total and not self.asked

    async def resume(self, broken: Committed, reason: str, text: str, silence: float = 0.0) -> Any:
        self.asked.append((reason, text))
        if self.then is None:
            return None
        self.current = self.then
        return SimpleNamespace(committed=self.then, skip="")

    def splice(self, said: Said, skip: str) -> Any:
        return SimpleNamespace(feed=lambda events: events)

    def served(self) -> None:
        self.outcome = "served"

    def failed(self) -> None:
        self.outcome = "failed"


async def test_a_resumable_stream_that_breaks_is_continued_through_the_same_relay_as_one_stream() -> None:
    a, b, c = _chunk("Hel"), _chunk("lo"), _chunk(" there")
    broken = _committed(a, b[:9], ending=UpstreamBroken("reset"))
    resumer = _Resumer(then=_committed(c, _DONE), current=broken)
    client = _Client()
    tail = Tail()
    result, final = await _relay_resumable(broken, client, resumer, tail)
    assert resumer.asked == [("stream_interrupted", "Hel")] and resumer.outcome == "served"
    assert client.received == a + c + _DONE and client.ended  # the half event of the break never went out
    assert result.reason == "served" and final is resumer.then
    assert tail.bytes().endswith(_DONE) and broken.response.closed  # type: ignore[attr-defined]


async def test_a_resumable_stream_nothing_continues_ends_with_the_breaks_in_band_error() -> None:
    broken = _committed(_chunk("a"), ending=STALL, idle=0.05)
    resumer = _Resumer(then=None, current=broken)
    client = _Client()
    result, final = await _relay_resumable(broken, client, resumer)
    assert resumer.asked == [("timeout", "a")] and resumer.outcome == "failed"
    assert result.reason == "timeout" and final is broken
    assert client.bodies[-1] == b"error: timeout: no data within the idle timeout\n\n"


def _error_event(candidate: str, reason: str, text: str) -> bytes:
    return f"error: {reason}: {text}\n\n".encode()


async def test_a_relay_leaves_the_task_uncancelled_after_an_idle_cut() -> None:
    await _relay(_committed(_chunk("a"), ending=STALL, idle=0.02), _Client())
    task = asyncio.current_task()
    assert task is not None and task.cancelling() == 0


def test_whole_events_cut_after_the_last_blank_line_lf_or_crlf_and_hold_the_rest() -> None:
    assert complete_events(b"data: a\n\ndata: b") == len(b"data: a\n\n")
    assert complete_events(b"data: a\r\n\r\ndata: b\r\n") == len(b"data: a\r\n\r\n")
    assert complete_events(b"data: a") == 0
    whole = WholeEvents()
    assert whole.cut(b"data: a\n\ndata: b") == b"data: a\n\n" and whole.held == b"data: b"
    assert whole.cut(b"\n\n") == b"data: b\n\n" and whole.held == b""
