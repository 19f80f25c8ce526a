"""OpenTelemetry: a span per chat request, a child span per attempt, the attempt's traceparent upstream.

Spans are read from opentelemetry-sdk's in-memory exporter, through a tracer provider given to
the router (``ModelRouter(tracer_provider=...)``); the upstream is the loopback mock, whose
``echo`` scenario answers with the headers it received. No test sets the process-wide provider,
so a router given none runs as in an app without tracing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from starlette.types import Receive, Scope, Send

from asgi_router import ModelRouter

from .mock_upstream import MockUpstream
from .routing_helpers import chat_body, router_client

pytestmark = pytest.mark.anyio

_CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
_CLIENT_PARENT = f"00-{_CLIENT_TRACE}-b7ad6b7169203331-01"


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    yield spans
    spans.clear()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _by_name(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        found.setdefault(span.name, []).append(span)
    return found


def _traceparent(span: ReadableSpan) -> str:
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-01"


async def test_a_request_is_a_span_and_each_attempt_a_child_span_with_genai_attributes(
    upstream: MockUpstream, refused_url: str, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    groups = {"g": {"members": ["down/ok", "mock/ok"]}}
    async with router_client(upstream, refused_url, router={"tracer_provider": provider}, groups=groups) as (
        client,
        _,
    ):
        response = await client.post("/v1/chat/completions", json=chat_body("group/g"))
    assert response.status_code == 200
    spans = _by_name(exporter)
    (request,) = spans["chat group/g"]
    (failed, served) = spans["chat ok"]
    assert request.kind is SpanKind.INTERNAL
    assert dict(request.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "group/g",
        "gen_ai.provider.name": "mock",
        "gen_ai.response.model": "ok",
        "gen_ai.usage.input_tokens": 3,
        "gen_ai.usage.output_tokens": 3,
        "http.response.status_code": 200,
        "asgi_router.request_id": response.headers["x-request-id"],
        "asgi_router.route": "default",
        "asgi_router.attempts": 2,
        "asgi_router.winner": "mock/ok",
    }
    for attempt in (failed, served):
        assert attempt.kind is SpanKind.CLIENT
        assert attempt.parent is not None and attempt.parent.span_id == request.context.span_id
        assert attempt.context.trace_id == request.context.trace_id
        assert attempt.attributes is not None
        assert attempt.attributes["gen_ai.operation.name"] == "chat"
        assert attempt.attributes["gen_ai.request.model"] == "ok"
        assert attempt.attributes["server.address"] == "127.0.0.1"
    assert failed.attributes is not None and served.attributes is not None
    assert failed.attributes["gen_ai.provider.name"] == "down"
    assert failed.attributes["error.type"] == "connect_error"
    assert failed.status.status_code is StatusCode.ERROR
    assert served.attributes["gen_ai.provider.name"] == "mock"
    assert served.attributes["gen_ai.response.model"] == "ok"
    assert served.attributes["gen_ai.usage.input_tokens"] == 3
    assert served.attributes["http.response.status_code"] == 200
    assert "error.type" not in served.attributes
    assert served.start_time is not None and failed.end_time is not None
    assert failed.end_time <= served.start_time  # the failover came after the failure


async def test_a_router_error_is_on_the_request_span(
    upstream: MockUpstream, refused_url: str, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with router_client(upstream, refused_url, router={"tracer_provider": provider}) as (client, _):
        response = await client.post("/v1/chat/completions", json=chat_body("down/ok"))
    assert response.status_code == 502
    (request,) = _by_name(exporter)["chat down/ok"]
    assert request.attributes is not None
    assert request.attributes["error.type"] == "502"
    assert request.status.status_code is StatusCode.ERROR


async def test_the_upstream_gets_the_attempts_traceparent_in_place_of_the_clients(
    upstream: MockUpstream, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    providers = {"fwd": {"base_url": f"{upstream.url}/v1", "forward_headers": ["traceparent", "tracestate"]}}  # type: ignore[attr-defined]
    async with router_client(upstream, router={"tracer_provider": provider}, providers=providers) as (client, _):
        response = await client.post(
            "/v1/chat/completions",
            json=chat_body("fwd/echo"),
            headers={"traceparent": _CLIENT_PARENT, "tracestate": "client=1"},
        )
    seen = response.json()["headers"]
    (attempt,) = _by_name(exporter)["chat echo"]
    assert seen["traceparent"] == _traceparent(attempt)
    assert seen["traceparent"] != _CLIENT_PARENT
    assert seen["tracestate"] == "client=1"  # carried along the trace it belongs to, as W3C asks
    (request,) = _by_name(exporter)["chat fwd/echo"]
    assert f"{request.context.trace_id:032x}" == _CLIENT_TRACE  # the client's trace goes on
    assert request.parent is not None and f"{request.parent.span_id:016x}" == "b7ad6b7169203331"


async def test_without_a_tracer_provider_no_traceparent_is_made(upstream: MockUpstream) -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # nothing set in this process
    providers = {"fwd": {"base_url": f"{upstream.url}/v1", "forward_headers": ["traceparent"]}}  # type: ignore[attr-defined]
    async with router_client(upstream, providers=providers) as (client, _):
        plain = await client.post("/v1/chat/completions", json=chat_body("mock/echo"))
        forwarded = await client.post(
            "/v1/chat/completions", json=chat_body("fwd/echo"), headers={"traceparent": _CLIENT_PARENT}
        )
    assert "traceparent" not in plain.json()["headers"]
    assert forwarded.json()["headers"]["traceparent"] == _CLIENT_PARENT  # forward_headers, untouched


async def test_a_streamed_answer_reports_its_usage_and_ends_with_the_relay(
    upstream: MockUpstream, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with router_client(upstream, router={"tracer_provider": provider}) as (client, _):
        response = await client.post("/v1/chat/completions", json=chat_body("mock/trickle-5", stream=True))
    assert response.status_code == 200
    (request,) = _by_name(exporter)["chat mock/trickle-5"]
    (attempt,) = _by_name(exporter)["chat trickle-5"]
    assert attempt.attributes is not None
    assert attempt.attributes["asgi_router.outcome"] == "served"
    assert attempt.end_time is not None and attempt.start_time is not None
    assert attempt.end_time - attempt.start_time >= 80_000_000  # 5 events 20 ms apart: the relay's time
    assert request.end_time is not None and attempt.end_time <= request.end_time


async def test_the_host_apps_server_span_is_the_parent(
    upstream: MockUpstream, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = provider.get_tracer("host")
    holder: dict[str, Any] = {}

    def instrumented(router: ModelRouter) -> Any:
        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await router(scope, receive, send)
                return
            with tracer.start_as_current_span("host server span", kind=SpanKind.SERVER) as span:
                holder["span"] = span
                await router(scope, receive, send)

        return app

    async with router_client(upstream, router={"tracer_provider": provider}) as (_, router):
        import httpx2

        transport = httpx2.ASGITransport(app=instrumented(router))
        async with httpx2.AsyncClient(transport=transport, base_url="http://router") as client:
            await client.post(
                "/v1/chat/completions", json=chat_body("mock/ok"), headers={"traceparent": _CLIENT_PARENT}
            )
    (request,) = _by_name(exporter)["chat mock/ok"]
    host = holder["span"].get_span_context()
    assert request.parent is not None and request.parent.span_id == host.span_id
    assert request.context.trace_id == host.trace_id
