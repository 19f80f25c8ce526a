"""Prometheus metrics: what a scrape of ``metrics_route`` says after real requests.

The names and labels are a contract (dashboards and alerts are built on them): each test reads
them as a scraper would, from the text format, after requests through the router to the loopback
mock upstream.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import httpx2
import pytest

from asgi_router import AttemptEvent, JsonlSink, ModelRouter, RequestRecord
from asgi_router.observability.metrics import Readings, RouterMetrics

from .conftest import CLIENT_KEY, host_app, make_settings
from .fake_anthropic import USAGE, FakeAnthropic
from .metrics_helpers import Scrape
from .mock_upstream import MockUpstream
from .routing_helpers import chat_body, router_client

pytestmark = pytest.mark.anyio

_AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}


def _metered(**settings: Any) -> dict[str, Any]:
    return {"metrics_route": "/metrics", "api_keys": [CLIENT_KEY], **settings}


async def _scrape(client: httpx2.AsyncClient, **headers: str) -> Scrape:
    response = await client.get("/metrics", headers=headers or _AUTH)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return Scrape(response.text)


async def test_a_scrape_counts_requests_attempts_latencies_tokens_cost_and_breakers(
    upstream: MockUpstream, refused_url: str
) -> None:
    settings = _metered(
        groups={"g": {"members": ["down/ok", "mock/ok"]}},
        catalog={"mock/ok": {"input_price": 1.0, "output_price": 2.0}},
        breaker={"consecutive_failures": 3},
    )
    async with router_client(upstream, refused_url, **settings) as (client, _):
        for _ in range(5):
            response = await client.post("/v1/chat/completions", json=chat_body("group/g"), headers=_AUTH)
            assert response.status_code == 200
        stream = await client.post(
            "/v1/chat/completions",
            json=chat_body("mock/ok", stream=True, stream_options={"include_usage": True}),
            headers=_AUTH,
        )
        assert stream.status_code == 200
        refused = await client.post("/v1/chat/completions", json=chat_body("group/nope"), headers=_AUTH)
        assert refused.status_code == 404
        scrape = await _scrape(client)
    chat = "/v1/chat/completions"
    assert scrape.value("asgi_router_requests_total", path=chat, status="200") == 6
    assert scrape.value("asgi_router_requests_total", path=chat, status="404") == 1
    assert scrape.value("asgi_router_request_duration_seconds_count", path=chat) == 7
    # The first three requests failed over past the refused connection; then its breakers opened.
    assert (
        scrape.value("asgi_router_attempts_total", candidate="down/ok", outcome="failed", reason="connect_error") == 3
    )
    assert (
        scrape.value("asgi_router_attempts_total", candidate="down/ok", outcome="skipped", reason="circuit_open") == 2
    )
    assert scrape.value("asgi_router_attempts_total", candidate="mock/ok", outcome="served", reason="served") == 6
    assert scrape.value("asgi_router_time_to_first_byte_seconds_count", candidate="mock/ok") == 6
    assert scrape.value("asgi_router_time_to_first_byte_seconds_bucket", candidate="mock/ok", le="60.0") == 6
    assert scrape.value("asgi_router_tokens_total", candidate="mock/ok", kind="prompt") == 18  # 3 per answer
    assert scrape.value("asgi_router_tokens_total", candidate="mock/ok", kind="completion") == 18
    assert scrape.value("asgi_router_cost_usd_total", candidate="mock/ok") == pytest.approx(6 * 9 / 1e6)
    assert scrape.value("asgi_router_breaker_state", candidate="down/ok") == 2  # open
    assert scrape.value("asgi_router_provider_breaker_state", provider="down") == 2
    assert scrape.value("asgi_router_breaker_state", candidate="mock/ok") == 0
    assert scrape.value("asgi_router_provider_breaker_state", provider="mock") == 0
    assert scrape.value("asgi_router_in_flight", provider="mock") == 0
    assert scrape.value("asgi_router_events_dropped_total") == 0


async def test_metrics_ask_for_the_same_credentials_as_the_models_list(upstream: MockUpstream) -> None:
    async with router_client(upstream, **_metered()) as (client, _):
        anonymous = await client.get("/metrics")
        wrong = await client.get("/metrics", headers={"authorization": "Bearer rk-not-a-key-0123456789"})
        bearer = await client.get("/metrics", headers=_AUTH)
        basic = base64.b64encode(f"prometheus:{CLIENT_KEY}".encode()).decode()
        as_basic = await client.get("/metrics", headers={"authorization": f"Basic {basic}"})
    assert (anonymous.status_code, wrong.status_code) == (401, 401)
    assert anonymous.json()["error"]["code"] == "unauthenticated"
    assert (bearer.status_code, as_basic.status_code) == (200, 200)
    assert "asgi_router_requests_total" in bearer.text


async def test_metrics_public_serves_a_scraper_without_credentials(upstream: MockUpstream) -> None:
    async with router_client(upstream, **_metered(metrics_public=True)) as (client, _):
        response = await client.get("/metrics")
        chat = await client.post("/v1/chat/completions", json=chat_body("mock/ok"))
    assert response.status_code == 200
    assert chat.status_code == 401  # only the metrics are public


async def test_model_ids_a_client_chooses_are_folded_into_their_provider(upstream: MockUpstream) -> None:
    async with router_client(upstream, **_metered(groups={"g": {"members": ["mock/ok"]}})) as (client, _):
        for _ in range(3):
            tag = uuid.uuid4().hex[:8]  # a model id nobody configured: one per request
            await client.post("/v1/chat/completions", json=chat_body(f"mock/rid-{tag}"), headers=_AUTH)
        await client.post("/v1/chat/completions", json=chat_body("group/g"), headers=_AUTH)
        scrape = await _scrape(client)
    assert scrape.labels("asgi_router_attempts_total", "candidate") == {"mock/*", "mock/ok"}
    assert scrape.value("asgi_router_attempts_total", candidate="mock/*", outcome="served", reason="served") == 3
    assert scrape.labels("asgi_router_tokens_total", "candidate") == {"mock/*", "mock/ok"}
    assert scrape.labels("asgi_router_breaker_state", "candidate") == {"mock/ok"}


async def test_two_routers_in_one_process_count_their_own_requests(upstream: MockUpstream) -> None:
    async with (
        router_client(upstream, **_metered()) as (first, _),
        router_client(upstream, **_metered()) as (second, _),
    ):
        for _ in range(2):
            await first.post("/v1/chat/completions", json=chat_body("mock/ok"), headers=_AUTH)
        await second.post("/v1/chat/completions", json=chat_body("mock/ok"), headers=_AUTH)
        one, two = await _scrape(first), await _scrape(second)
    assert one.value("asgi_router_requests_total", path="/v1/chat/completions", status="200") == 2
    assert two.value("asgi_router_requests_total", path="/v1/chat/completions", status="200") == 1


async def test_hedges_are_counted_by_what_became_of_them(upstream: MockUpstream) -> None:
    timeouts = {"connect": 1, "first_byte": 5, "idle": 5, "total": 20}
    groups = {
        "won": {"members": ["mock/slow-2000", "mock2/ok"], "hedge_after": 0.1},
        "lost": {"members": ["mock/slow-300", "mock2/slow-3000"], "hedge_after": 0.1},
        "denied": {"members": ["mock/slow-300", "mock2/ok"], "hedge_after": 0.1, "hedge_budget": 0},
    }
    async with router_client(upstream, **_metered(groups=groups, timeouts=timeouts)) as (client, _):
        for group in groups:
            response = await client.post("/v1/chat/completions", json=chat_body(f"group/{group}"), headers=_AUTH)
            assert response.status_code == 200
        scrape = await _scrape(client)
    assert scrape.value("asgi_router_hedges_total", outcome="won") == 1
    assert scrape.value("asgi_router_hedges_total", outcome="lost") == 1
    assert scrape.value("asgi_router_hedges_total", outcome="denied") == 1
    assert (
        scrape.value("asgi_router_attempts_total", candidate="mock2/slow-3000", outcome="aborted", reason="hedge_lost")
        == 1
    )


async def test_records_dropped_by_a_full_sink_queue_are_counted(upstream: MockUpstream, tmp_path: Any) -> None:
    settings = make_settings(upstream.url, **_metered(events={"queue_size": 1}))  # type: ignore[attr-defined]
    # No lifespan: the file sink never runs, so its one-record queue turns the rest away.
    router = ModelRouter(host_app(), settings=settings, sinks=[JsonlSink(tmp_path / "records.jsonl")])
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router), base_url="http://router") as client:
        for _ in range(4):
            await client.post("/v1/chat/completions", json=chat_body("mock/ok"), headers=_AUTH)
        scrape = await _scrape(client)
    assert router.events.dropped == 3
    assert scrape.value("asgi_router_events_dropped_total") == 3


def test_metric_names_and_labels_are_the_documented_ones() -> None:
    readings = Readings(breakers=[("p/m", "open")], providers=[("p", "half_open", 2)], dropped=1)
    metrics = RouterMetrics(frozenset({"p/m"}), lambda: readings)
    served = AttemptEvent("r", 0, "p/m", "served", "served", 200, 0.2, 0.1, 0.001)
    record = RequestRecord("r", "group/g", status=200, winner="p/m", latency=0.3, events=[served])
    record.prompt_tokens, record.completion_tokens, record.tokens_measured = 10, 5, True
    record.cost_usd, record.hedge = 0.001, "won"
    metrics.observe(record, "/v1/chat/completions")
    scrape = Scrape(metrics.exposition().decode())
    labels: dict[str, set[str]] = {}
    for name, found in scrape.samples:
        labels.setdefault(name, set()).update(key for key, _ in found if key != "le")
    pinned = {
        "asgi_router_requests_total": {"path", "status"},
        "asgi_router_request_duration_seconds_count": {"path"},
        "asgi_router_attempts_total": {"candidate", "outcome", "reason"},
        "asgi_router_time_to_first_byte_seconds_count": {"candidate"},
        "asgi_router_breaker_state": {"candidate"},
        "asgi_router_provider_breaker_state": {"provider"},
        "asgi_router_tokens_total": {"candidate", "kind"},
        "asgi_router_cost_usd_total": {"candidate"},
        "asgi_router_in_flight": {"provider"},
        "asgi_router_hedges_total": {"outcome"},
        "asgi_router_events_dropped_total": set(),
    }
    assert {name: labels.get(name) for name in pinned} == pinned
    assert scrape.value("asgi_router_breaker_state", candidate="p/m") == 2
    assert scrape.value("asgi_router_provider_breaker_state", provider="p") == 1
    assert scrape.value("asgi_router_time_to_first_byte_seconds_bucket", candidate="p/m", le="0.1") == 1
    assert scrape.value("asgi_router_time_to_first_byte_seconds_bucket", candidate="p/m", le="0.05") == 0
    assert scrape.value("asgi_router_time_to_first_byte_seconds_sum", candidate="p/m") == 0.1
    assert scrape.value("asgi_router_in_flight", provider="p") == 2
    assert scrape.value("asgi_router_events_dropped_total") == 1


async def test_a_translated_anthropic_member_counts_the_tokens_its_upstream_reported(
    upstream: MockUpstream, refused_url: str, anthropic: FakeAnthropic
) -> None:
    """Usage as Anthropic states it (input and output tokens, a stream's in two events) is what
    the counters add, whether the answer was whole or translated chunk by chunk."""
    settings = _metered(providers={"claude": anthropic.provider()}, groups={"c": {"members": ["claude/ok"]}})
    async with router_client(upstream, refused_url, **settings) as (client, _):
        whole = await client.post("/v1/chat/completions", json=chat_body("group/c"), headers=_AUTH)
        assert whole.status_code == 200, whole.text
        streamed = await client.post(
            "/v1/chat/completions",
            json=chat_body("group/c", stream=True, stream_options={"include_usage": True}),
            headers=_AUTH,
        )
        assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
        scrape = await _scrape(client)
    assert scrape.value("asgi_router_tokens_total", candidate="claude/ok", kind="prompt") == 2 * USAGE["input_tokens"]
    assert (
        scrape.value("asgi_router_tokens_total", candidate="claude/ok", kind="completion") == 2 * USAGE["output_tokens"]
    )
    assert scrape.value("asgi_router_attempts_total", candidate="claude/ok", outcome="served", reason="served") == 2
