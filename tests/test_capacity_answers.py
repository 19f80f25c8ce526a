"""Capacity-aware routing, what every answer says: a queued request planned again after its wait,
``x-router-sticky`` on every answer of a keyed sticky request (errors and pass-throughs too), and
the status page's capacity facts (real fake upstreams on loopback, real routers on sockets, the
official ``openai`` client).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import openai
import pytest

from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import FakeUpstream, reply

from .conftest import host_app
from .doubles import FakeClock
from .resilient import tag
from .servers import ServerThread
from .waiting import eventually

pytestmark = pytest.mark.anyio

_FAST = {"connect": 1, "first_byte": 5, "idle": 5, "total": 10}
_OUT_OF_REQUESTS = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1s"}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as upstream:
        yield upstream


def _settings(fake: FakeUpstream, groups: dict[str, Any], **overrides: Any) -> RouterSettings:
    providers: dict[str, Any] = {name: fake.provider(timeouts=_FAST) for name in ("p1", "p2")}
    return RouterSettings(
        providers=providers, groups=groups, allow_unauthenticated=True, status_route="/status", **overrides
    )


@asynccontextmanager
async def _served(
    settings: RouterSettings, clock: FakeClock | None = None
) -> AsyncIterator[tuple[openai.AsyncOpenAI, ServerThread]]:
    router = ModelRouter(host_app(), settings=settings, **({"clock": clock} if clock is not None else {}))
    with ServerThread(router) as server:
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0) as client:
            yield client, server


async def _ask(
    client: openai.AsyncOpenAI, model: str, session: str | None = None, priority: str | None = None
) -> httpx2.Response:
    """The raw answer, whatever its status."""
    headers = {"x-session-id": session} if session is not None else {}
    if priority is not None:
        headers["x-priority"] = priority
    try:
        raw = await client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": "hi"}], extra_headers=headers
        )
    except openai.APIStatusError as error:
        return error.response  # type: ignore[return-value]
    return raw.http_response  # type: ignore[return-value]


async def _status(server: ServerThread) -> dict[str, Any]:
    async with httpx2.AsyncClient(base_url=server.url) as client:
        data: dict[str, Any] = (await client.get("/status.json")).json()
    return data


# --- a queued request is planned again --------------------------------------------------------------


async def test_a_queued_rotate_request_is_planned_again_and_served_by_the_strategys_next_member(
    fake: FakeUpstream,
) -> None:
    t = tag()
    fake.script(f"a{t}", reply.ok(headers=_OUT_OF_REQUESTS), reply.ok())
    fake.script(f"b{t}", reply.ok(headers=_OUT_OF_REQUESTS), reply.ok())
    groups = {"r": {"strategy": "rotate", "members": [f"p1/a{t}", f"p2/b{t}"], "queue": {"max_wait": 10.0}}}
    clock = FakeClock(time.monotonic())
    async with _served(_settings(fake, groups), clock) as (client, server):
        first = (await _ask(client, "group/r")).headers["x-router-model"]  # out of requests for 1 s now
        second = (await _ask(client, "group/r")).headers["x-router-model"]  # the other one too
        # The third request's plan puts the first member first (rotate, three requests in), and
        # both are over budget: it waits until their stated reset.
        waiting = asyncio.ensure_future(_ask(client, "group/r"))
        async with httpx2.AsyncClient(base_url=server.url) as scraper:

            async def queued() -> bool:
                return bool((await scraper.get("/status.json")).json()["capacity"]["queues"][0]["waiting"])

            await eventually(queued)
        clock.now += 1.0  # both members come back at the same instant
        third = await waiting
    assert first != second
    assert third.status_code == 200
    # Planned again after its wait, it follows the rotation: the member after its first plan's.
    assert third.headers["x-router-model"] == second
    assert [hit.model for hit in fake.hits if t in hit.model].count(second.split("/")[1]) == 2


# --- the queue's wait, and its answer when it runs out ----------------------------------------------


def _one_slot(fake: FakeUpstream, t: str, max_wait: float, **queue: Any) -> RouterSettings:
    """Group ``q``: one member whose provider takes one call at a time, and a queue."""
    return RouterSettings(
        providers={"p1": fake.provider(timeouts={**_FAST, "first_byte": 20, "total": 30}, max_concurrent=1)},
        groups={"q": {"members": [f"p1/a{t}"], "queue": {"max_wait": max_wait, **queue}}},
        allow_unauthenticated=True,
        status_route="/status",
    )


async def _waiting(server: ServerThread, count: int) -> None:
    """Until group ``q``'s queue holds ``count`` requests."""

    async def reached() -> bool:
        return bool((await _status(server))["capacity"]["queues"][0]["waiting"] == count)

    await eventually(reached)


async def test_a_queued_requests_wait_excludes_its_upstream_call_and_its_answer_says_how_long_it_waited(
    fake: FakeUpstream,
) -> None:
    t = tag()
    fake.script(f"a{t}", reply.slow(0.3))
    async with _served(_one_slot(fake, t, max_wait=5.0)) as (client, server):
        busy = asyncio.ensure_future(_ask(client, "group/q"))
        await eventually(lambda: fake.in_flight == 1)  # it holds the one slot
        began = time.monotonic()
        queued = await _ask(client, "group/q")
        elapsed = time.monotonic() - began
        first = await busy
        status = await _status(server)
    assert (queued.status_code, first.status_code) == (200, 200)
    assert "x-router-queue-wait" not in first.headers  # it never joined the queue
    header = queued.headers["x-router-queue-wait"]
    assert header.count(".") == 1 and len(header.split(".")[1]) == 3
    waited = float(header)
    # its own call took at least the upstream's 0.3 s after its wait: the wait is the wait alone
    assert 0 < waited <= elapsed - 0.3
    assert status["capacity"]["queues"][0]["longest_wait_s"] == pytest.approx(waited, abs=0.002)


async def test_a_wait_that_runs_out_before_its_first_turn_answers_503_upstream_saturated_with_its_wait(
    fake: FakeUpstream,
) -> None:
    t = tag()
    fake.script(f"a{t}", reply.slow(12.0))  # the slot stays taken past every wait below
    # Each waiter must join within the first one's wait: the three join in a few hundred
    # milliseconds, 2 s leaves room for several times that on a busy machine.
    async with _served(_one_slot(fake, t, max_wait=2.0, priority_callers=["anonymous"])) as (client, server):
        busy = asyncio.ensure_future(_ask(client, "group/q"))
        await eventually(lambda: fake.in_flight == 1)  # it holds the one slot
        waiters = []
        for count, priority in enumerate(("normal", "normal", "high"), start=1):
            # the first finds the slot taken and joins; the second joins behind it without a
            # look at the slot; the third jumps ahead of both and keeps the head past their waits
            waiters.append(asyncio.ensure_future(_ask(client, "group/q", priority=priority)))
            await _waiting(server, count)
        answers = [await waiter for waiter in waiters]
        busy.cancel()  # its client leaves: the slot's call is cut short, not waited out
    for answer in answers:
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"]["code"] == "upstream_saturated"
        assert {a["reason"] for a in answer.json()["error"]["attempts"]} == {"saturated"}
        assert float(answer.headers["x-router-queue-wait"]) > 0


# --- x-router-sticky on every answer -------------------------------------------------------------


async def test_every_answer_of_a_keyed_sticky_request_says_how_it_stuck_and_unkeyed_ones_say_nothing(
    fake: FakeUpstream,
) -> None:
    t = tag()
    fake.script(f"a{t}", reply.ok(), reply.status(400), reply.status(503))
    groups = {"s": {"members": [{"ref": f"p1/a{t}", "rpm": 3}], "sticky": {"key": "session"}}}
    async with _served(_settings(fake, groups)) as (client, _):
        served = await _ask(client, "group/s", session="conv")
        passed = await _ask(client, "group/s", session="conv")  # the member's own 400, passed through
        failed = await _ask(client, "group/s", session="conv")  # its 503: the router's error
        over = await _ask(client, "group/s", session="conv")  # over its rpm: the router's 429
        unkeyed = await _ask(client, "group/s")
        fresh = await _ask(client, "group/s", session="new")  # a key without a member, refused
    assert [served.status_code, passed.status_code, failed.status_code, over.status_code] == [200, 400, 502, 429]
    assert served.headers["x-router-sticky"] == "miss"
    assert passed.headers["x-router-sticky"] == "hit"  # its member answered
    assert failed.headers["x-router-sticky"] == "moved"  # its member could not
    assert over.headers["x-router-sticky"] == "moved"
    assert unkeyed.status_code == 429 and "x-router-sticky" not in unkeyed.headers
    assert fresh.status_code == 429 and fresh.headers["x-router-sticky"] == "miss"


# --- the status page's capacity facts ------------------------------------------------------------


async def test_the_status_json_shows_queues_sticky_groups_and_members_over_their_stated_limit(
    fake: FakeUpstream,
) -> None:
    t = tag()
    fake.script(f"b{t}", reply.ok(headers={**_OUT_OF_REQUESTS, "x-ratelimit-reset-requests": "60s"}))
    groups = {
        "s": {"strategy": "rotate", "members": [f"p1/a{t}", f"p1/c{t}"], "sticky": {"key": "session"}},
        "q": {"members": [{"ref": f"p2/b{t}", "rpm": 1}], "queue": {"max_wait": 0.2, "max_size": 5}},
    }
    async with _served(_settings(fake, groups)) as (client, server):
        for session in ("one", "two", "one", "one"):
            assert (await _ask(client, "group/s", session=session)).status_code == 200
        assert (await _ask(client, "group/q")).status_code == 200  # b says it has no requests left
        assert (await _ask(client, "group/q")).status_code == 429  # waited 0.2 s, then today's answer
        data = await _status(server)
    capacity = data["capacity"]
    assert capacity["sticky"] == [{"group": "s", "affinities": 2, "shared": False, "hit": 2, "miss": 2, "moved": 0}]
    (queue,) = capacity["queues"]
    assert (queue["group"], queue["waiting"], queue["max_size"]) == ("q", 0, 5)
    assert queue["recent"] == {"served": 0, "timed_out": 1, "full": 0, "left": 0}
    assert queue["longest_wait_s"] >= 0.2
    (mark,) = capacity["over_stated_limit"]
    assert (mark["member"], mark["limit"], mark["tokens_left"]) == (f"p2/b{t}", "requests", None)
    assert 50 < mark["resets_in"] <= 60


async def test_the_status_json_has_no_capacity_facts_without_queues_sticky_groups_or_marks(fake: FakeUpstream) -> None:
    t = tag()
    async with _served(_settings(fake, {"g": {"members": [f"p1/a{t}"]}})) as (client, server):
        assert (await _ask(client, "group/g")).status_code == 200
        data = await _status(server)
    assert data["capacity"] is None
