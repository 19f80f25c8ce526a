"""Same-candidate retries, rate-limit hints, deadline, max_attempts and the retry budget.

Fault injection on the real loopback upstream: ``fail-<n>-<tag>-<status>`` fails its first n
requests then answers, and upstream hit counts show exactly how often a candidate was asked.
How long the router waits (backoff, hints, a deadline across backoff, a client leaving mid-wait)
is pinned on a fake clock instead: the router runs on a :class:`~tests.doubles.FakeClockLoop`
with that loop's clock as its ``clock=``, its upstream a :class:`~tests.fakes.ScriptedTransport`,
so a wait is exactly the seconds the router chose and costs no real time.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from asgi_router import ModelRouter
from bench.asgi_calls import receive_once

from .conftest import SentMessages, chat_scope, host_app, make_settings
from .doubles import on_fake_clock
from .fakes import Answer, ScriptedTransport
from .mock_upstream import MockUpstream
from .resilient import chat, events_of, holds_no_retry, loop_now, routed_router, scripted_router, tag

pytestmark = pytest.mark.anyio


async def test_single_candidate_retries_a_5xx_then_succeeds(upstream: MockUpstream) -> None:
    model = f"fail-2-{tag()}-503"
    async with routed_router(upstream) as (client, router):
        response = await chat(client, f"mock/{model}")
        events = await events_of(response, router)
    assert response.status_code == 200
    assert response.headers["x-router-model"] == f"mock/{model}"
    assert response.headers["x-router-attempts"] == "3"  # retries count as attempts
    assert upstream.count(model) == 3
    assert events == [
        (f"mock/{model}", "failed", "upstream_5xx"),
        (f"mock/{model}", "failed", "upstream_5xx"),
        (f"mock/{model}", "served", "served"),
    ]


async def test_retries_stop_at_the_configured_count(upstream: MockUpstream) -> None:
    model = f"fail-5-{tag()}-500"
    async with routed_router(upstream, retries=1) as (client, _):
        response = await chat(client, f"mock/{model}")
    assert response.status_code == 502
    assert response.headers["x-router-attempts"] == "2"
    assert upstream.count(model) == 2
    assert [a["reason"] for a in response.json()["error"]["attempts"]] == ["upstream_5xx", "upstream_5xx"]


async def test_a_streamed_request_is_retried_before_commit(upstream: MockUpstream) -> None:
    model = f"fail-1-{tag()}-502"
    async with routed_router(upstream) as (client, _):
        response = await chat(client, f"mock/{model}", stream=True)
    assert response.status_code == 200
    assert response.headers["x-router-attempts"] == "2"
    assert response.text.endswith("data: [DONE]\n\n")
    assert upstream.count(model) == 2


@pytest.mark.both_transports
async def test_a_stream_that_breaks_after_commit_is_never_retried(upstream: MockUpstream) -> None:
    async with routed_router(upstream, retries=2) as (client, _):
        response = await chat(client, "mock/break-2", stream=True)
    assert response.status_code == 200  # committed: the status line had gone out
    assert '"code":"stream_interrupted"' in response.text
    assert response.headers["x-router-attempts"] == "1"
    assert upstream.attempts(response.headers["x-request-id"]) == ["break-2"]


@pytest.mark.both_transports
async def test_the_same_break_before_commit_is_retried(upstream: MockUpstream) -> None:
    async with routed_router(upstream, retries=2) as (client, _):
        response = await chat(client, "mock/break-2", stream=False)  # the body is read before commit
    assert response.status_code == 502
    assert upstream.attempts(response.headers["x-request-id"]) == ["break-2"] * 3


@pytest.mark.parametrize("status", [401, 402, 404])
async def test_reasons_the_same_candidate_would_repeat_are_not_retried(upstream: MockUpstream, status: int) -> None:
    model = f"status-{status}-{tag()}"
    async with routed_router(upstream) as (client, _):
        response = await chat(client, f"mock/{model}")
    assert response.status_code == 502
    assert upstream.count(model) == 1


async def test_a_multi_candidate_plan_fails_over_instead_of_retrying(upstream: MockUpstream) -> None:
    model = f"fail-1-{tag()}-503"
    async with routed_router(upstream, groups={"g": {"members": [f"mock/{model}", "mock2/ok"]}}) as (client, _):
        response = await chat(client, "group/g")
    assert response.headers["x-router-model"] == "mock2/ok"
    assert upstream.count(model) == 1


async def test_a_group_can_ask_for_same_candidate_retries(upstream: MockUpstream) -> None:
    model = f"fail-1-{tag()}-503"
    groups = {"g": {"members": [f"mock/{model}", "mock2/ok"], "retries": 1}}
    async with routed_router(upstream, groups=groups) as (client, _):
        response = await chat(client, "group/g")
    assert response.headers["x-router-model"] == f"mock/{model}"
    assert response.headers["x-router-attempts"] == "2"


@on_fake_clock
async def test_backoff_uses_the_injected_randomness(upstream: MockUpstream) -> None:
    """Full jitter with random() = 0.99: retry waits 0.99 * 0.1 then 0.99 * 0.2 seconds."""
    transport = ScriptedTransport(Answer.error(503), Answer.error(503), Answer())
    async with scripted_router(upstream, transport, random=lambda: 0.99, backoff={"base": 0.1, "cap": 4}) as client:
        started = loop_now()
        response = await chat(client, "mock/m")
        elapsed = loop_now() - started
    assert response.status_code == 200
    assert len(transport.sent) == 3
    assert elapsed == pytest.approx(0.99 * 0.1 + 0.99 * 0.2, abs=0.005)


@on_fake_clock
async def test_no_jitter_draw_means_no_wait(upstream: MockUpstream) -> None:
    transport = ScriptedTransport(Answer.error(503), Answer.error(503), Answer())
    async with scripted_router(upstream, transport, random=lambda: 0.0, backoff={"base": 3, "cap": 4}) as client:
        started = loop_now()
        response = await chat(client, "mock/m")
        elapsed = loop_now() - started
    assert response.status_code == 200
    assert len(transport.sent) == 3
    assert elapsed == pytest.approx(0.0, abs=0.005)  # a 3 s base backoff with a zero draw waits nothing


# --- rate-limit hints -------------------------------------------------------------------------

HINTED = [
    (Answer.error(429, "Rate limit reached", **{"retry-after": "0.25"}), "Retry-After"),
    (Answer.error(429, "Rate limit reached; please try again in 0.25s."), "try again in"),
    (
        Answer.error(429, **{"x-ratelimit-reset-requests": "0.25s", "x-ratelimit-remaining-requests": "0"}),
        "x-ratelimit-reset",
    ),
]


@on_fake_clock
@pytest.mark.parametrize(("hinted", "source"), HINTED, ids=[source for _, source in HINTED])
async def test_rate_limit_hint_is_waited_out_then_the_retry_succeeds(
    upstream: MockUpstream, hinted: Answer, source: str
) -> None:
    transport = ScriptedTransport(hinted, Answer())
    async with scripted_router(upstream, transport, random=lambda: 0.0) as client:
        started = loop_now()
        response = await chat(client, "mock/m")
        elapsed = loop_now() - started
    assert response.status_code == 200
    assert response.headers["x-router-attempts"] == "2"
    assert elapsed == pytest.approx(0.25, abs=0.005)  # the hint, not the (zero) backoff draw, set the wait


@on_fake_clock
async def test_a_hint_longer_than_max_retry_wait_is_not_waited_and_returned_as_429(upstream: MockUpstream) -> None:
    transport = ScriptedTransport(Answer.error(429, **{"retry-after": "30"}))
    async with scripted_router(upstream, transport, max_retry_wait=10) as client:
        started = loop_now()
        response = await chat(client, "mock/m")
        elapsed = loop_now() - started
    assert response.status_code == 429
    assert response.headers["retry-after"] == "30"
    assert response.headers["x-router-attempts"] == "1"
    assert len(transport.sent) == 1
    assert elapsed == pytest.approx(0.0, abs=0.005)


@on_fake_clock
async def test_a_hint_longer_than_max_retry_wait_fails_over_at_once(upstream: MockUpstream) -> None:
    transport = ScriptedTransport(Answer.error(429, **{"retry-after": "30"}), Answer())
    groups = {"g": {"members": ["mock/m", "mock2/m"], "retries": 2}}
    async with scripted_router(upstream, transport, groups=groups) as client:
        started = loop_now()
        response = await chat(client, "group/g")
        elapsed = loop_now() - started
    assert response.headers["x-router-model"] == "mock2/m"
    assert [url.split("/v1")[0] for url in transport.sent] == [upstream.url] * 2  # type: ignore[attr-defined]
    assert elapsed == pytest.approx(0.0, abs=0.005)


# --- deadline and max_attempts ----------------------------------------------------------------


@pytest.mark.both_transports
async def test_deadline_cuts_a_hanging_attempt_and_answers_504(upstream: MockUpstream) -> None:
    timeouts = {"connect": 1, "first_byte": 5, "idle": 5, "total": 10}
    async with routed_router(upstream, timeouts=timeouts, deadline=0.3) as (client, router):
        response = await chat(client, "mock/hang")
        events = await events_of(response, router)
    assert response.status_code == 504
    assert events == [("mock/hang", "failed", "timeout")]  # no time left for a retry


@on_fake_clock
async def test_deadline_cuts_a_hanging_attempt_at_the_deadline(upstream: MockUpstream) -> None:
    transport = ScriptedTransport(Answer(hang=True))
    timeouts = {"connect": 1, "first_byte": 5, "idle": 5, "total": 10}
    async with scripted_router(upstream, transport, timeouts=timeouts, deadline=0.3) as client:
        started = loop_now()
        response = await chat(client, "mock/hang")
        elapsed = loop_now() - started
    assert response.status_code == 504
    assert len(transport.sent) == 1  # no time left for a retry
    assert elapsed == pytest.approx(0.3, abs=0.01)  # the 0.3 s deadline, not the 5 s first-byte timeout


@on_fake_clock
async def test_deadline_covers_backoff_and_stops_retrying_in_time(upstream: MockUpstream) -> None:
    transport = ScriptedTransport(Answer.error(503))
    backoff = {"base": 0.2, "cap": 0.2}
    overrides: dict[str, Any] = {"retries": 10, "backoff": backoff, "random": lambda: 0.99, "deadline": 0.7}
    async with scripted_router(upstream, transport, **overrides) as client:
        started = loop_now()
        response = await chat(client, "mock/m")
        elapsed = loop_now() - started
    assert response.status_code == 502
    assert elapsed <= 0.7
    # waits of 0.198 s fit three times into 0.7 s: four tries, far fewer than 11
    assert len(transport.sent) == 4
    assert response.headers["x-router-attempts"] == "4"


async def test_max_attempts_caps_the_walk_through_a_long_plan(upstream: MockUpstream, refused_url: str) -> None:
    members = [f"down/m{index}" for index in range(4)] + ["mock/ok"]
    groups = {"g": {"members": members}}
    async with routed_router(upstream, refused_url, groups=groups, max_attempts=2) as (client, router):
        response = await chat(client, "group/g")
        events = await events_of(response, router)
    assert response.status_code == 502
    assert response.headers["x-router-attempts"] == "2"
    assert [reason for _, _, reason in events] == ["connect_error", "connect_error", "budget_exhausted"]


# --- retry budget -----------------------------------------------------------------------------


async def test_retry_budget_holds_under_100_concurrent_failing_requests(upstream: MockUpstream) -> None:
    """Unbudgeted, 100 requests with 2 retries each would hit the upstream 300 times."""
    model = f"status-503-d50-{tag()}"
    statuses: list[int] = []
    # Generous time limits: the 100 requests share one process with the mock upstream, and on a busy
    # machine a 1 s first-byte limit turned some 503s into timeouts (504) that this is not about.
    slow_ok = {"connect": 5, "first_byte": 10, "idle": 10, "total": 30}
    async with routed_router(upstream, retries=2, breaker={"enabled": False}, timeouts=slow_ok) as (client, router):

        async def one() -> None:
            statuses.append((await chat(client, f"mock/{model}")).status_code)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tasks:
                for _ in range(100):
                    tasks.start_soon(one)
        state = router.state
    assert statuses == [502] * 100
    hits = upstream.count(model)
    assert 100 < hits <= 150, hits  # some retries (the budget is not zero), at most half of them
    assert (state.in_flight("mock"), state.in_flight(f"mock/{model}")) == (0, 0)  # every slot given back
    assert holds_no_retry(state, "mock")  # and every retry token


async def test_a_lone_failing_request_gets_all_its_retries_from_min_concurrent(upstream: MockUpstream) -> None:
    model = f"status-503-{tag()}"
    async with routed_router(upstream, retries=2, retry_budget={"ratio": 0.2, "min_concurrent": 3}) as (client, _):
        await chat(client, f"mock/{model}")
    assert upstream.count(model) == 3


async def test_an_empty_retry_budget_skips_the_retry_with_budget_exhausted(upstream: MockUpstream) -> None:
    model = f"status-503-{tag()}"
    budget = {"ratio": 0.01, "min_concurrent": 0}
    async with routed_router(upstream, retries=2, retry_budget=budget) as (client, router):
        response = await chat(client, f"mock/{model}")
        events = await events_of(response, router)
    assert upstream.count(model) == 1
    assert events == [(f"mock/{model}", "failed", "upstream_5xx"), (f"mock/{model}", "skipped", "budget_exhausted")]
    assert response.status_code == 502
    assert response.headers["x-router-attempts"] == "1"


# --- disconnect during backoff ----------------------------------------------------------------


@on_fake_clock
async def test_client_disconnect_cancels_the_backoff_sleep(upstream: MockUpstream) -> None:
    transport = ScriptedTransport(Answer.error(503))
    settings = make_settings(upstream.url, backoff={"base": 5, "cap": 5})  # type: ignore[attr-defined]
    router = ModelRouter(host_app(), settings=settings, random=lambda: 0.99, transport=transport, clock=loop_now)
    request = json.dumps({"model": "mock/m", "messages": []}).encode()
    sent = SentMessages()

    # the client leaves 0.2 s in, while the router backs off for 4.95 s
    receive = receive_once(request, then=lambda: anyio.sleep(0.2))

    started = loop_now()
    await router(chat_scope(), receive, sent)  # type: ignore[arg-type]
    elapsed = loop_now() - started
    state = router.state
    assert 0.2 <= elapsed < 0.3  # when the watch noticed the leave, not the 4.95 s backoff
    # nothing but the 499 a server drops was sent to a client that is gone (responses/client_gone.py)
    assert sent == [
        {"type": "http.response.start", "status": 499, "headers": []},
        {"type": "http.response.body", "body": b"", "more_body": False},
    ]
    assert len(transport.sent) == 1
    assert holds_no_retry(state, "mock")
    assert (state.in_flight("mock"), state.in_flight("mock/m")) == (0, 0)
