"""Capacity-aware routing at the client's boundary: sticky sessions, waiting for capacity, and
providers' rate-limit headers (real fake upstreams on loopback, real routers on sockets, the
official ``openai`` client)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import openai
import pytest

from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import FakeUpstream, reply

from .conftest import host_app
from .doubles import FakeClock
from .metrics_helpers import Scrape
from .resilient import tag
from .servers import ServerThread
from .waiting import eventually

pytestmark = pytest.mark.anyio

_FAST = {"connect": 1, "first_byte": 5, "idle": 5, "total": 10}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as upstream:
        yield upstream


def _settings(fake: FakeUpstream, groups: dict[str, Any], **overrides: Any) -> RouterSettings:
    providers: dict[str, Any] = {
        name: fake.provider(timeouts=_FAST, **overrides.pop(name, {})) for name in ("p1", "p2", "p3")
    }
    return RouterSettings(
        providers=providers, groups=groups, allow_unauthenticated=True, metrics_route="/metrics", **overrides
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
    client: openai.AsyncOpenAI, model: str, *, session: str | None = None, system: str | None = None, turn: str = "hi"
) -> tuple[str, str | None]:
    """The member that served (``x-router-model``) and the ``x-router-sticky`` header."""
    messages: list[Any] = [{"role": "system", "content": system}] if system is not None else []
    messages += [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"}]
    messages.append({"role": "user", "content": turn})
    headers = {"x-session-id": session} if session is not None else {}
    raw = await client.chat.completions.with_raw_response.create(model=model, messages=messages, extra_headers=headers)
    return raw.headers["x-router-model"], raw.headers.get("x-router-sticky")


def _scrape(server: ServerThread) -> Scrape:
    return Scrape(httpx2.get(f"{server.url}/metrics").text)


async def _until(condition: Callable[[], bool]) -> None:
    await eventually(condition)


async def _depth_is(server: ServerThread, depth: int) -> None:
    """Wait until group ``q``'s queue holds ``depth`` requests (scraped without blocking the loop)."""
    async with httpx2.AsyncClient(base_url=server.url) as scraper:

        async def reached() -> bool:
            return Scrape((await scraper.get("/metrics")).text).value("asgi_router_queue_depth", group="q") == depth

        await eventually(reached)


def _members(t: str) -> list[str]:
    return [f"p1/a{t}", f"p2/b{t}", f"p3/c{t}"]


# --- sticky sessions ----------------------------------------------------------------------------


async def test_a_rotate_group_keeps_each_session_on_one_member_and_spreads_sessions(fake: FakeUpstream) -> None:
    t = tag()
    groups = {"chat": {"strategy": "rotate", "members": _members(t), "sticky": {"key": "session"}}}
    async with _served(_settings(fake, groups)) as (client, server):
        served: dict[str, set[str]] = {}
        outcomes: list[str | None] = []
        for turn in range(3):
            for session in ("s1", "s2", "s3", "s4"):
                member, sticky = await _ask(client, "group/chat", session=session, turn=str(turn))
                served.setdefault(session, set()).add(member)
                outcomes.append(sticky)
        unkeyed = {(await _ask(client, "group/chat"))[0] for _ in range(3)}
        scrape = _scrape(server)
    assert all(len(members) == 1 for members in served.values()), served
    assert len(set().union(*served.values())) >= 2  # sessions spread over the members
    assert outcomes == ["miss"] * 4 + ["hit"] * 8
    assert len(unkeyed) == 3  # requests without a key rotate as before
    assert scrape.value("asgi_router_sticky_total", group="chat", outcome="hit") == 8
    assert scrape.value("asgi_router_sticky_total", group="chat", outcome="miss") == 4


async def test_an_open_breaker_moves_a_session_which_then_sticks_to_its_new_member(fake: FakeUpstream) -> None:
    t = tag()
    groups = {"chat": {"strategy": "rotate", "members": _members(t), "sticky": {"key": "session"}}}
    settings = _settings(fake, groups, breaker={"consecutive_failures": 1})
    async with _served(settings) as (client, server):
        first, sticky = await _ask(client, "group/chat", session="conv")
        assert sticky == "miss"
        fake.script(first.split("/", 1)[1], reply.status(503))  # its member starts failing
        moved, sticky = await _ask(client, "group/chat", session="conv")
        assert (moved != first, sticky) == (True, "moved")
        later = [await _ask(client, "group/chat", session="conv", turn=str(n)) for n in range(3)]
        scrape = _scrape(server)
    assert later == [(moved, "hit")] * 3  # the open breaker skips the old member; the new one sticks
    assert scrape.value("asgi_router_sticky_total", group="chat", outcome="moved") == 1


async def test_the_same_system_prompt_sticks_to_one_member_with_the_prefix_key(fake: FakeUpstream) -> None:
    t = tag()
    groups = {"chat": {"strategy": "rotate", "members": _members(t), "sticky": {"key": "prefix"}}}
    async with _served(_settings(fake, groups)) as (client, _):
        same = [await _ask(client, "group/chat", system="You are terse.", turn=str(n)) for n in range(4)]
        other = {(await _ask(client, "group/chat", system=f"prompt {n}"))[0] for n in range(3)}
    assert {member for member, _ in same} == {same[0][0]}
    assert [sticky for _, sticky in same] == ["miss", "hit", "hit", "hit"]
    assert len(other) >= 2  # other prompts are spread as rotate spreads them


# --- waiting for capacity -----------------------------------------------------------------------


async def _three_at_once(client: openai.AsyncOpenAI, model: str) -> list[int]:
    async def one() -> int:
        try:
            await client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
        except openai.APIStatusError as error:
            assert error.code == "upstream_saturated"
            return error.status_code
        return 200

    return list(await asyncio.gather(one(), one(), one()))


async def test_a_queue_serves_simultaneous_requests_in_turn_behind_a_concurrency_cap(fake: FakeUpstream) -> None:
    t = tag()
    fake.script(f"a{t}", reply.slow(0.5))
    fake.script(f"b{t}", reply.slow(0.5))
    capped = {"max_concurrent": 1}
    queued = {"q": {"members": [f"p1/a{t}"], "queue": {}}}
    async with _served(_settings(fake, queued, p1=capped)) as (client, server):
        statuses = await _three_at_once(client, "group/q")
        scrape = _scrape(server)
    assert statuses == [200, 200, 200]
    assert scrape.value("asgi_router_queue_wait_seconds_count", group="q", outcome="served") == 2
    assert scrape.value("asgi_router_queue_depth", group="q") == 0
    assert len([hit for hit in fake.hits if hit.model == f"a{t}"]) == 3
    unqueued = {"q": {"members": [f"p2/b{t}"]}}
    async with _served(_settings(fake, unqueued, p2=capped)) as (client, _):
        statuses = await _three_at_once(client, "group/q")
    assert sorted(statuses) == [200, 503, 503]


async def test_a_wait_that_runs_out_answers_429_with_retry_after_as_without_a_queue(fake: FakeUpstream) -> None:
    t = tag()
    groups = {"q": {"members": [{"ref": f"p1/a{t}", "rpm": 1}], "queue": {"max_wait": 0.3}}}
    async with _served(_settings(fake, groups)) as (client, server):
        await _ask(client, "group/q")
        with pytest.raises(openai.RateLimitError) as refused:
            await _ask(client, "group/q")
        scrape = _scrape(server)
    assert float(refused.value.response.headers["retry-after"]) > 0
    assert scrape.value("asgi_router_queue_wait_seconds_count", group="q", outcome="timed_out") == 1


@pytest.mark.load
async def test_a_wait_counts_toward_the_request_deadline(fake: FakeUpstream) -> None:
    t = tag()
    groups = {"q": {"members": [{"ref": f"p1/a{t}", "rpm": 1}], "queue": {"max_wait": 30.0}}}
    async with _served(_settings(fake, groups, deadline=0.5)) as (client, server):
        await _ask(client, "group/q")
        with pytest.raises(openai.RateLimitError):
            await _ask(client, "group/q")
        scrape = _scrape(server)
    # the 30 s wait was cut to what was left of the 0.5 s deadline
    assert scrape.value("asgi_router_queue_wait_seconds_bucket", group="q", outcome="timed_out", le="2.5") == 1


async def test_a_full_queue_answers_at_once_with_retry_after(fake: FakeUpstream) -> None:
    t = tag()
    groups = {"q": {"members": [{"ref": f"p1/a{t}", "rpm": 1}], "queue": {"max_wait": 1.0, "max_size": 1}}}
    async with _served(_settings(fake, groups)) as (client, server):
        await _ask(client, "group/q")
        waiting = asyncio.ensure_future(_ask(client, "group/q"))
        await _depth_is(server, 1)  # the first waiter holds the one place
        with pytest.raises(openai.RateLimitError) as full:
            await _ask(client, "group/q")
        scrape = _scrape(server)
        with pytest.raises(openai.RateLimitError):
            await waiting
    assert float(full.value.response.headers["retry-after"]) > 0
    assert scrape.value("asgi_router_queue_wait_seconds_count", group="q", outcome="full") == 1
    assert scrape.value("asgi_router_queue_depth", group="q") == 1


async def test_a_client_that_leaves_the_queue_is_not_served_later(fake: FakeUpstream) -> None:
    t = tag()
    # the first call holds the one slot until its client leaves; any later one is answered at once
    fake.script(f"a{t}", reply.slow(30.0), reply.ok())
    groups = {"q": {"members": [f"p1/a{t}"], "queue": {}}}
    async with _served(_settings(fake, groups, p1={"max_concurrent": 1})) as (client, server):
        busy = asyncio.ensure_future(_ask(client, "group/q"))
        await _until(lambda: fake.in_flight == 1)  # it holds the one slot
        async with httpx2.AsyncClient(base_url=server.url, timeout=10) as leaver:
            body = {"model": "group/q", "messages": [{"role": "user", "content": "hi"}]}
            leaving = asyncio.ensure_future(leaver.post("/v1/chat/completions", json=body))
            await _depth_is(server, 1)
            leaving.cancel()  # the client gives up while it waits: its connection closes
        await _depth_is(server, 0)
        busy.cancel()  # the slot's holder leaves too: the slot frees up
        await _until(lambda: fake.in_flight == 0)
        # A request after the slot freed up: a leaver still held in the queue would have been
        # woken by the freed slot, ahead of it, and called the upstream too.
        await _ask(client, "group/q")
        scrape = _scrape(server)
    assert [hit.model for hit in fake.hits if hit.model == f"a{t}"] == [f"a{t}"] * 2
    assert scrape.value("asgi_router_queue_wait_seconds_count", group="q", outcome="left") == 1


# --- provider rate-limit headers ----------------------------------------------------------------


async def test_a_provider_out_of_requests_is_not_called_until_its_reset(fake: FakeUpstream) -> None:
    t = tag()
    limits = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s"}
    fake.script(f"a{t}", reply.ok(headers=limits), reply.ok())
    groups = {"g": {"members": [f"p1/a{t}", f"p2/b{t}"]}}
    clock = FakeClock(time.monotonic())
    async with _served(_settings(fake, groups), clock) as (client, _):
        first = (await _ask(client, "group/g"))[0]
        meanwhile = [(await _ask(client, "group/g"))[0] for _ in range(3)]
        clock.advance(2.1)
        after = (await _ask(client, "group/g"))[0]
    assert first == f"p1/a{t}"
    assert meanwhile == [f"p2/b{t}"] * 3
    assert after == f"p1/a{t}"
    assert len([hit for hit in fake.hits if hit.model == f"a{t}"]) == 2


async def test_a_provider_that_does_not_honour_rate_limit_headers_is_called_regardless(fake: FakeUpstream) -> None:
    t = tag()
    limits = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "60s"}
    fake.script(f"a{t}", reply.ok(headers=limits))
    groups = {"g": {"members": [f"p1/a{t}", f"p2/b{t}"]}}
    async with _served(_settings(fake, groups, p1={"honour_rate_limit_headers": False})) as (client, _):
        served = [(await _ask(client, "group/g"))[0] for _ in range(2)]
    assert served == [f"p1/a{t}"] * 2


async def test_a_429_retry_after_marks_the_member_over_budget_without_counting_on_its_breaker(
    fake: FakeUpstream,
) -> None:
    t = tag()
    fake.script(f"a{t}", reply.status(429, retry_after=30), reply.ok())
    groups = {"g": {"members": [f"p1/a{t}", f"p2/b{t}"]}}
    settings = _settings(fake, groups, breaker={"consecutive_failures": 1, "failure_reasons": ["rate_limited"]})
    async with _served(settings) as (client, server):
        served = [(await _ask(client, "group/g"))[0] for _ in range(3)]
        scrape = _scrape(server)
    assert served == [f"p2/b{t}"] * 3
    assert len([hit for hit in fake.hits if hit.model == f"a{t}"]) == 1  # skipped, not called again
    assert (
        scrape.value("asgi_router_attempts_total", candidate=f"p1/a{t}", outcome="skipped", reason="over_budget") == 2
    )
