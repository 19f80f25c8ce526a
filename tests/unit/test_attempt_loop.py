"""The attempt loop (``attempts/loop.py``) on its own, over the memory transport: the plan phase's
plan walked until a candidate commits, retried in place, failed over, or waited for capacity; and
a committed stream's continuations (``attempts/continuing.py``), made by the loop's continuer
when the answer's relay reports a break.

The router's parts are built by ``assemble`` as a router builds them, with the test kit's memory
transport as every upstream; the loop's clock is the event loop's, and the loop runs on a fake
clock: a backoff, a stalled upstream's timeout and a queue's wait are exact and take no real time.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from asgi_router.assembly import RouterParts, assemble
from asgi_router.attempts.outcomes import Committed
from asgi_router.config.settings import RouterSettings
from asgi_router.core.router_errors import RouterError
from asgi_router.core.upstream_errors import UpstreamBroken
from asgi_router.inbound.body import InboundRequest, parse_request
from asgi_router.request.request_state import RequestState
from asgi_router.routing.facts import RequestFacts
from asgi_router.testing.memory_transport import STALL, MemoryResponse, MemoryTransport

from ..doubles import FAKE_CLOCK_BACKEND

pytestmark = pytest.mark.anyio

_ANSWER = json.dumps({"id": "c1", "object": "chat.completion", "choices": []}).encode()


@pytest.fixture
def anyio_backend() -> object:
    """The loop's timers run on a fake clock: backoffs, timeouts and waits take no real time."""
    return FAKE_CLOCK_BACKEND


class _Upstreams:
    """Each model's scripted answers, in turn (the last one repeated): a status, or ``STALL``
    for an upstream that never answers; every call is written down by model."""

    def __init__(self, **scripts: list[Any]) -> None:
        self._scripts = scripts
        self.calls: list[str] = []
        #: Set at the first call.
        self.called = asyncio.Event()

    def __call__(self, url: str, body: bytes) -> MemoryResponse:
        model = json.loads(body)["model"]
        script = self._scripts[model]
        answer = script[min(self.calls.count(model), len(script) - 1)]
        self.calls.append(model)
        self.called.set()
        if answer is STALL:
            return MemoryResponse([], b"application/json", ending=STALL)
        if isinstance(answer, tuple):  # a stream: its chunks, then how it ends
            chunks, ending = answer
            return MemoryResponse(chunks, ending=ending)
        assert isinstance(answer, int)
        return MemoryResponse([_ANSWER], b"application/json", status=answer)


class _Transport(MemoryTransport):
    """The memory transport answering by the model each call names."""

    def __init__(self, upstreams: _Upstreams) -> None:
        super().__init__(lambda url: MemoryResponse([]))
        self._upstreams = upstreams

    async def send(self, provider: Any, url: str, headers: dict[str, str], body: bytes) -> MemoryResponse:
        return self._upstreams(url, body)


def _parts(upstreams: _Upstreams, groups: dict[str, Any], **provider: Any) -> RouterParts:
    settings = RouterSettings.model_validate(
        {
            "providers": {"p": {"base_url": "http://p.invalid/v1", "api_key": "sk-test", **provider}},
            "groups": groups,
            "allow_unauthenticated": True,
        }
    )

    async def host(scope: Any, receive: Any, send: Any) -> None:  # never reached
        raise AssertionError("the loop is driven directly")

    transport = _Transport(upstreams)
    return assemble(
        transport,  # the owner the configured keys are scrubbed from the logs for: alive as long as the parts
        host,
        settings=settings,
        transport=transport,
        clock=lambda: asyncio.get_running_loop().time(),
    )


async def _run(parts: RouterParts, model: str, client: Any = None) -> tuple[RequestState, Committed | Any]:
    """One request for ``model`` through the plan phase and the attempt loop: its state and
    outcome; with a ``client`` (an ASGI ``send``), a streamed request answered to it as well."""
    stream = client is not None
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}).encode()
    headers = [(b"content-type", b"application/json")]
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers}
    state = RequestState(scope, None, client, "req-1", "/v1/chat/completions")  # type: ignore[arg-type]
    request = parse_request(body)
    assert isinstance(request, InboundRequest)
    facts = RequestFacts(request.payload, headers)
    plan = await parts.plan_phase(state, request, facts)
    assert not isinstance(plan, RouterError)
    plan, outcome = await parts.loop.run(plan, request, state, facts)
    if stream:
        await parts.answer(state, plan, request, facts, outcome)
    return state, outcome


def _chunk(text: str) -> bytes:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": text}}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


_FINISH = b'data: {"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
_DONE = b"data: [DONE]\n\n"


class _Client:
    """The ASGI ``send`` of a streamed answer: the bytes the client received."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            self.bodies.append(message["body"])

    @property
    def text(self) -> str:
        said = []
        for line in b"".join(self.bodies).splitlines():
            if line.startswith(b"data: {") and b"content" in line:
                said.append(json.loads(line[6:])["choices"][0]["delta"]["content"])
        return "".join(said)


def _events(state: RequestState) -> list[tuple[str, str, str]]:
    return [(event.candidate, event.outcome, event.reason) for event in state.events]


async def test_a_failing_member_is_failed_over_to_the_next_which_commits() -> None:
    upstreams = _Upstreams(a=[503], b=[200])
    parts = _parts(upstreams, {"g": {"members": ["p/a", "p/b"]}})
    state, outcome = await _run(parts, "group/g")
    assert isinstance(outcome, Committed) and outcome.candidate.key == "p/b"
    assert upstreams.calls == ["a", "b"]
    assert _events(state) == [("p/a", "failed", "upstream_5xx")]  # the winner is evented by the answer


async def test_a_single_candidate_is_retried_in_place_after_its_backoff_then_commits() -> None:
    upstreams = _Upstreams(a=[503, 503, 200])
    parts = _parts(upstreams, {"g": {"members": ["p/a"], "retries": 2}})
    loop = asyncio.get_running_loop()
    began = loop.time()
    state, outcome = await _run(parts, "group/g")
    assert isinstance(outcome, Committed) and upstreams.calls == ["a", "a", "a"]
    assert _events(state) == [("p/a", "failed", "upstream_5xx")] * 2
    assert loop.time() > began  # each retry waited its backoff (on the fake clock)


async def test_when_every_candidate_fails_the_loop_answers_the_plans_error() -> None:
    upstreams = _Upstreams(a=[503], b=[502])
    parts = _parts(upstreams, {"g": {"members": ["p/a", "p/b"]}})
    state, outcome = await _run(parts, "group/g")
    assert isinstance(outcome, RouterError) and outcome.status in (502, 503)
    assert [candidate for candidate, _, _ in _events(state)] == ["p/a", "p/b"]


async def test_a_queued_request_waits_for_capacity_and_is_served_once_the_member_frees_up() -> None:
    # One slot (max_concurrent = 1): the first request holds it on an upstream that stalls until
    # its first-byte timeout (half a second); the second finds no capacity, waits in the group's queue, and is
    # planned again and served once the first has given the slot back.
    upstreams = _Upstreams(a=[STALL, 200])
    groups = {"q": {"members": ["p/a"], "retries": 0, "queue": {"max_wait": 30.0}}}
    parts = _parts(upstreams, groups, max_concurrent=1, timeouts={"first_byte": 0.5})
    loop = asyncio.get_running_loop()
    began = loop.time()
    first = asyncio.create_task(_run(parts, "group/q"))
    await upstreams.called.wait()  # the first request is in its call, holding the slot
    second_state, second = await _run(parts, "group/q")
    first_state, first_outcome = await first
    assert isinstance(first_outcome, RouterError) and _events(first_state) == [("p/a", "failed", "timeout")]
    assert isinstance(second, Committed) and upstreams.calls == ["a", "a"]
    assert second_state.queued is not None
    group, outcome, waited = second_state.queued
    assert (group, outcome) == ("q", "served") and waited == pytest.approx(0.5, abs=0.1)
    assert loop.time() - began == pytest.approx(0.5, abs=0.1)


async def test_a_queued_request_that_finds_no_capacity_within_max_wait_gets_todays_answer() -> None:
    upstreams = _Upstreams(a=[200])
    groups = {"q": {"members": [{"ref": "p/a", "rpm": 1}], "queue": {"max_wait": 2.0}}}
    parts = _parts(upstreams, groups)
    _, served = await _run(parts, "group/q")  # spends the member's one request a minute
    assert isinstance(served, Committed)
    state, outcome = await _run(parts, "group/q")
    assert isinstance(outcome, RouterError) and outcome.status == 429
    assert state.queued is not None and state.queued[:2] == ("q", "timed_out")
    assert state.queued[2] == pytest.approx(2.0, abs=0.01)
    assert upstreams.calls == ["a"]  # the waiting request never reached the upstream


async def test_a_stream_that_breaks_is_continued_by_the_loops_continuer_and_the_client_gets_one_whole_answer() -> None:
    broken = ([_chunk("Hel"), _chunk("lo")], UpstreamBroken("reset by peer"))
    upstreams = _Upstreams(a=[broken, 503], b=[([_chunk(", world"), _FINISH, _DONE], None)])
    groups = {"g": {"members": [{"ref": "p/a", "resume": "prefill"}, {"ref": "p/b", "resume": "prefill"}]}}
    parts = _parts(upstreams, groups)
    client = _Client()
    state, outcome = await _run(parts, "group/g", client)
    assert isinstance(outcome, Committed) and outcome.candidate.key == "p/a"
    assert client.text == "Hello, world" and _DONE in client.bodies
    assert upstreams.calls == ["a", "a", "b"]  # the cut candidate asked first (it refused), then the next
    assert state.resumes == (("p/a", "served"),)
    assert state.status == 200 and _events(state) == [
        ("p/a", "resumed", "stream_interrupted"),
        ("p/a", "failed", "upstream_5xx"),
        ("p/b", "served", "served"),
    ]


async def test_a_stream_whose_continuations_all_fail_ends_with_the_in_band_error() -> None:
    broken = ([_chunk("Hel")], UpstreamBroken("reset by peer"))
    upstreams = _Upstreams(a=[broken, 503], b=[503])
    groups = {"g": {"members": [{"ref": "p/a", "resume": "prefill"}, {"ref": "p/b", "resume": "prefill"}]}}
    parts = _parts(upstreams, groups)
    client = _Client()
    state, _ = await _run(parts, "group/g", client)
    assert client.text == "Hel" and _DONE not in client.bodies
    assert b'"error"' in client.bodies[-1]
    assert state.resumes == (("p/a", "failed"),)
