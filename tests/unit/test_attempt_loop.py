"""The attempt loop (``attempts/loop.py``) on its own, over the memory transport: the plan phase's
plan walked until a candidate commits, retried in place, failed over, or waited for capacity.

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

    def __init__(self, **scripts: list[int | object]) -> None:
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


async def _run(parts: RouterParts, model: str) -> tuple[RequestState, Committed | Any]:
    """One request for ``model`` through the plan phase and the attempt loop: its state and outcome."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()
    headers = [(b"content-type", b"application/json")]
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers}
    state = RequestState(scope, None, None, "req-1", "/v1/chat/completions")  # type: ignore[arg-type]
    request = parse_request(body)
    assert isinstance(request, InboundRequest)
    facts = RequestFacts(request.payload, headers)
    plan = await parts.plan_phase(state, request, facts)
    assert not isinstance(plan, RouterError)
    _, outcome = await parts.loop.run(plan, request, state, facts)
    return state, outcome


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
