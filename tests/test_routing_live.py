"""Strategies, budgets, rules and the context-window checks against the real loopback upstream."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import anyio
import httpx2
import pytest

from asgi_router.core.router_errors import OVERFLOW_SENTENCE
from asgi_router.resilience.stats import InMemoryStats

from .doubles import RecordSink
from .mock_upstream import MockUpstream
from .routing_helpers import chat_body, router_client
from .waiting import eventually

pytestmark = pytest.mark.anyio


async def _post(client: httpx2.AsyncClient, model: str, **body: Any) -> httpx2.Response:
    return await client.post("/v1/chat/completions", json=chat_body(model, **body))


# --- least_busy ---------------------------------------------------------------------------------


async def test_least_busy_spreads_concurrent_requests_and_returns_to_idle(upstream: MockUpstream) -> None:
    stats = InMemoryStats()
    groups = {"lb": {"strategy": "least_busy", "members": ["mock/slow-500", "mock2/slow-500"]}}
    async with router_client(upstream, groups=groups, router={"stats": stats}) as (client, _):
        winners: list[str] = []

        async def one() -> None:
            response = await _post(client, "group/lb")
            winners.append(response.headers["x-router-model"])

        def busy() -> tuple[int, int]:
            return stats.in_flight("mock/slow-500"), stats.in_flight("mock2/slow-500")

        async with anyio.create_task_group() as tasks:
            for launched in range(1, 5):
                tasks.start_soon(one)
                # each request is in flight before the next resolves
                await eventually(lambda n=launched: sum(busy()) >= n, within=2, every=0.002)
            assert busy() == (2, 2)
    assert Counter(winners) == {"mock/slow-500": 2, "mock2/slow-500": 2}
    assert (stats.in_flight("mock/slow-500"), stats.in_flight("mock2/slow-500")) == (0, 0)


async def test_least_busy_sends_sequential_requests_to_the_first_member(upstream: MockUpstream) -> None:
    groups = {"lb": {"strategy": "least_busy", "members": ["mock/ok", "mock2/ok"]}}
    async with router_client(upstream, groups=groups) as (client, _):
        winners = [(await _post(client, "group/lb")).headers["x-router-model"] for _ in range(3)]
    assert winners == ["mock/ok"] * 3


# --- latency ------------------------------------------------------------------------------------


async def test_latency_measures_each_member_once_then_prefers_the_faster(upstream: MockUpstream) -> None:
    stats = InMemoryStats()
    groups = {"lat": {"strategy": "latency", "explore": 0, "members": ["mock/slow-300", "mock2/ok"]}}
    async with router_client(upstream, groups=groups, router={"stats": stats}) as (client, _):
        winners = [(await _post(client, "group/lat")).headers["x-router-model"] for _ in range(4)]
    # both unmeasured: configured order; then the unmeasured one; then the faster
    assert winners == ["mock/slow-300", "mock2/ok", "mock2/ok", "mock2/ok"]
    slow, fast = stats.latency("mock/slow-300"), stats.latency("mock2/ok")
    assert slow is not None and fast is not None
    assert slow >= 0.3 > fast


async def test_latency_sinks_a_member_that_fails(upstream: MockUpstream, refused_url: str) -> None:
    groups = {"lat": {"strategy": "latency", "explore": 0, "members": ["down/x", "mock/ok"]}}
    async with router_client(upstream, refused_url, groups=groups) as (client, _):
        first = await _post(client, "group/lat")
        second = await _post(client, "group/lat")
    assert first.headers["x-router-attempts"] == "2"  # down/x tried first (no data), failed over
    assert second.headers["x-router-attempts"] == "1"  # the failure counted as a slow answer
    assert second.headers["x-router-model"] == "mock/ok"


# --- weighted and cost --------------------------------------------------------------------------


async def test_weighted_group_serves_in_proportion_with_a_seeded_rng(upstream: MockUpstream) -> None:
    groups = {"w": {"strategy": "weighted", "members": [{"ref": "mock/ok", "weight": 4}, "mock2/ok"]}}
    async with router_client(upstream, groups=groups, router={"rng": random.Random(11)}) as (client, _):
        winners = Counter([(await _post(client, "group/w")).headers["x-router-model"] for _ in range(60)])
    assert 38 <= winners["mock/ok"] <= 56  # expected 48 of 60 (p of leaving this band < 1e-3)


async def test_cost_serves_the_cheapest_and_records_the_requests_cost(upstream: MockUpstream) -> None:
    catalog = {
        "mock/ok": {"input_price": 5.0, "output_price": 15.0},
        "mock2/ok": {"input_price": 1.0, "output_price": 2.0},
    }
    groups = {"c": {"strategy": "cost", "members": ["mock/ok", "mock2/ok"]}}
    with RecordSink.logged() as records:
        async with router_client(upstream, groups=groups, catalog=catalog) as (client, _):
            response = await _post(client, "group/c")
    assert response.headers["x-router-model"] == "mock2/ok"
    record = records.of(response.headers["x-request-id"])
    assert record.plan == ("mock2/ok", "mock/ok")
    assert (record.prompt_tokens, record.completion_tokens) == (3, 3)  # the upstream's own usage
    assert record.cost_usd == pytest.approx((3 * 1.0 + 3 * 2.0) / 1e6)
    assert record.events[-1].cost_usd == record.cost_usd


# --- usage budgets ------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.both_transports
async def test_usage_budget_counts_the_upstreams_reported_tokens(upstream: MockUpstream, stream: bool) -> None:
    # The first answer reports 900 prompt tokens (its body or final SSE chunk); the request's
    # own estimate is ~5. Only the reported count pushes the member over its 500 tpm.
    member = {"ref": "mock/usage-900", "tpm": 500}
    groups = {"u": {"strategy": "usage", "members": [member, "mock2/ok"]}, "solo": {"members": [member]}}
    with RecordSink.logged() as records:
        async with router_client(upstream, groups=groups) as (client, _):
            # Streamed, OpenAI reports usage (in a last chunk) only when asked to.
            asked = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
            first = await _post(client, "group/u", **asked)
            second = await _post(client, "group/u", **asked)
            solo = await _post(client, "group/solo", **asked)
    assert first.headers["x-router-model"] == "mock/usage-900"
    assert records.of(first.headers["x-request-id"]).prompt_tokens == 900
    assert second.headers["x-router-model"] == "mock2/ok"
    assert records.of(second.headers["x-request-id"]).plan == ("mock2/ok", "mock/usage-900")
    assert solo.status_code == 429  # every member over its budget: the router's own rate limit
    assert 0 < int(solo.headers["retry-after"]) <= 60
    assert solo.json()["error"]["attempts"] == [
        {"candidate": "mock/usage-900", "reason": "over_budget", "status": None}
    ]
    assert solo.headers["x-router-attempts"] == "0"


async def test_rpm_budget_moves_traffic_after_that_many_requests(upstream: MockUpstream) -> None:
    groups = {"r": {"members": [{"ref": "mock/ok", "rpm": 2}, "mock2/ok"]}}  # budgets hold under any strategy
    with RecordSink.logged() as records:
        async with router_client(upstream, groups=groups) as (client, _):
            responses = [await _post(client, "group/r") for _ in range(3)]
    assert [r.headers["x-router-model"] for r in responses] == ["mock/ok", "mock/ok", "mock2/ok"]
    third = records.of(responses[2].headers["x-request-id"])
    assert [(e.candidate, e.outcome, e.reason) for e in third.events] == [
        ("mock/ok", "skipped", "over_budget"),
        ("mock2/ok", "served", "served"),
    ]


# --- rules --------------------------------------------------------------------------------------

_RULES: dict[str, Any] = {
    "groups": {
        "auto": {"rules": True, "members": ["mock/ok"]},
        "premium": {"members": ["mock2/ok"]},
        "tools": {"members": ["mock/echo"]},
    },
    "rules": [
        {"name": "gold", "headers": {"x-router-tier": "gold"}, "route": "group/premium"},
        {"name": "agent", "tools": True, "route": "group/tools"},
        {"name": "broken", "metadata": {"tag": "broken"}, "route": "mock/status-503"},
    ],
}
_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.mark.parametrize(
    ("headers", "body", "route", "winner"),
    [
        ({"x-router-tier": "gold"}, {}, "gold", "mock2/ok"),
        ({"x-router-tier": "silver"}, {}, "default", "mock/ok"),
        ({}, {"tools": _TOOLS}, "agent", "mock/echo"),
        ({}, {"stream": True}, "default", "mock/ok"),
    ],
)
async def test_rules_pick_the_group_and_every_response_names_the_route(
    upstream: MockUpstream, headers: dict[str, str], body: dict[str, Any], route: str, winner: str
) -> None:
    with RecordSink.logged() as records:
        async with router_client(upstream, **_RULES) as (client, _):
            response = await client.post("/v1/chat/completions", json=chat_body("group/auto", **body), headers=headers)
    assert response.status_code == 200
    assert response.headers["x-router-route"] == route
    assert response.headers["x-router-model"] == winner
    record = records.of(response.headers["x-request-id"])
    assert (record.route, record.plan) == (route, (winner,))


async def test_route_header_is_also_on_errors_and_plain_groups_say_default(upstream: MockUpstream) -> None:
    async with router_client(upstream, **_RULES) as (client, _):
        failed = await _post(client, "group/auto", metadata={"tag": "broken"})
        plain = await _post(client, "group/premium")
        direct = await _post(client, "mock/ok")
    assert (failed.status_code, failed.headers["x-router-route"]) == (502, "broken")
    assert plain.headers["x-router-route"] == "default"
    assert direct.headers["x-router-route"] == "default"


# --- context window -----------------------------------------------------------------------------

_LONG = "x" * 2000  # ~504 estimated tokens


async def test_candidate_whose_window_cannot_hold_the_prompt_is_skipped_not_called(upstream: MockUpstream) -> None:
    catalog = {"mock/ok": {"context_window": 300}, "mock2/ok": {"context_window": 100_000}}
    groups = {"g": {"members": ["mock/ok", "mock2/ok"]}}
    with RecordSink.logged() as records:
        async with router_client(upstream, groups=groups, catalog=catalog) as (client, _):
            short = await _post(client, "group/g")
            long = await _post(client, "group/g", text=_LONG)
            capped = await _post(client, "group/g", max_tokens=299)  # prompt + max_tokens over 300
    assert short.headers["x-router-model"] == "mock/ok"
    for response in (long, capped):
        assert response.headers["x-router-model"] == "mock2/ok"
        assert response.headers["x-router-attempts"] == "1"
        assert upstream.attempts(response.headers["x-request-id"]) == ["ok"]  # one call, not two
        assert [(e.candidate, e.outcome, e.reason) for e in records.of(response.headers["x-request-id"]).events] == [
            ("mock/ok", "skipped", "context_window"),
            ("mock2/ok", "served", "served"),
        ]


async def test_request_that_fits_no_window_is_a_400_without_upstream_calls(upstream: MockUpstream) -> None:
    catalog = {"mock/ok": {"context_window": 100}, "mock2/ok": {"context_window": 200}}
    async with router_client(upstream, groups={"g": {"members": ["mock/ok", "mock2/ok"]}}, catalog=catalog) as (
        client,
        _,
    ):
        response = await _post(client, "group/g", text=_LONG)
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["type"]) == ("context_length_exceeded", "invalid_request_error")
    # No provider was asked, so none said it in its own words: the router's sentence leads.
    assert error["message"].splitlines() == [OVERFLOW_SENTENCE, "mock/ok: context_window", "mock2/ok: context_window"]
    assert upstream.attempts(response.headers["x-request-id"]) == []


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_upstream_context_exceeded_400_fails_over_unlike_other_400s(upstream: MockUpstream, stream: bool) -> None:
    groups = {"g": {"members": ["mock/ctx-exceeded", "mock2/ok"]}, "h": {"members": ["mock/status-400", "mock2/ok"]}}
    async with router_client(upstream, groups=groups) as (client, _):
        over = await _post(client, "group/g", stream=stream)
        wrong = await _post(client, "group/h", stream=stream)
        alone = await _post(client, "mock/ctx-exceeded", stream=stream)
    assert (over.status_code, over.headers["x-router-model"], over.headers["x-router-attempts"]) == (
        200,
        "mock2/ok",
        "2",
    )
    assert upstream.attempts(over.headers["x-request-id"]) == ["ctx-exceeded", "ok"]
    assert (wrong.status_code, wrong.headers["x-router-model"]) == (400, "mock/status-400")  # still stops
    assert alone.status_code == 400
    assert alone.json()["error"]["attempts"] == [
        {"candidate": "mock/ctx-exceeded", "reason": "context_window", "status": 400}
    ]
