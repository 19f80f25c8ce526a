"""OpenTelemetry traces: a span per chat request and a child span per attempt.

Needs ``opentelemetry-api`` (the ``otel`` extra) and a tracer provider: the host app's global
one (``opentelemetry.trace.set_tracer_provider``) or one given as
``ModelRouter(tracer_provider=...)``. Without a provider the API's own is a no-op proxy, and
:meth:`Tracing.begin` returns ``None`` after a clock read (the global provider is looked up once
a second): no span object, no header and no attribute is made for any request.

Attributes follow OpenTelemetry's GenAI semantic conventions (``gen_ai.*``), which tracing
backends already understand:

* the request span (``chat <ref>``, kind ``INTERNAL``, a child of the host app's server span
  when there is one, else of the client's own ``traceparent``): ``gen_ai.operation.name`` =
  ``chat``, ``gen_ai.request.model`` = the client's ``model`` (``group/coder``),
  ``gen_ai.provider.name`` and ``gen_ai.response.model`` of the winner, its
  ``gen_ai.usage.input_tokens`` / ``output_tokens`` when the upstream reported usage,
  ``http.response.status_code``, and ``error.type`` (the status) when the answer is an error;
* an attempt span (``chat <model-id>``, kind ``CLIENT``) per call to an upstream, skips
  excluded: ``gen_ai.provider.name`` (the configured provider's name), ``gen_ai.request.model``
  (the model id sent upstream), ``server.address`` / ``server.port``, the upstream's status,
  and ``error.type`` = the attempt's reason when it did not serve.

Each attempt's W3C ``traceparent`` (and ``tracestate``) goes upstream with it, replacing one
the client sent that ``forward_headers`` would pass on: the upstream's own spans then hang
below the attempt that called them.

Attempt spans are started when the attempt is sent (the ``traceparent`` must name them) and
ended when the request ends, from its :class:`~asgi_router.observability.events.AttemptEvent`:
the end time is the start plus the event's latency, so the spans show when each attempt really
ended, and the attempt code keeps a single hook. The start given is the wall clock read just
before the attempt's latency began to count (not when the span object is made, a few
microseconds later): the end is then never later than the attempt really ended, and a failover's
span never starts before the failed attempt's span has ended.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.propagate import extract
from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from asgi_router.observability.events import AttemptEvent, RequestRecord

__all__ = ["LOOK_EVERY", "RequestTrace", "Tracing"]

_W3C: Final = TraceContextTextMapPropagator()
#: Seconds between two looks for a global tracer provider while none is set.
LOOK_EVERY: Final = 1.0
_OPERATION: Final = "chat"


def _server(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


class Tracing:
    """One router's tracer, found within :data:`LOOK_EVERY` seconds of a tracer provider being set."""

    __slots__ = ("_look_at", "_provider", "_servers", "_tracer", "_version")

    def __init__(self, provider: trace.TracerProvider | None, version: str) -> None:
        self._provider = provider
        self._version = version
        self._tracer: Tracer | None = None
        self._servers: dict[str, tuple[str, int]] = {}
        self._look_at = 0.0

    def begin(self, headers: Sequence[tuple[bytes, bytes]]) -> RequestTrace | None:
        """The request's trace, or ``None`` when no tracer provider is set (the cheap check)."""
        tracer = self._tracer
        if tracer is None:
            provider = self._provider
            if provider is None:
                # The API's lookup reads the environment: done once a second, not per request.
                # A provider, once set globally, stays.
                now = time.monotonic()
                if now < self._look_at:
                    return None
                self._look_at = now + LOOK_EVERY
                provider = trace.get_tracer_provider()
            if isinstance(provider, (ProxyTracerProvider, NoOpTracerProvider)):
                return None
            tracer = self._tracer = provider.get_tracer("asgi_router", self._version)
        parent = None
        if not trace.get_current_span().get_span_context().is_valid:  # no host server span
            parent = extract({name.decode("latin-1"): value.decode("latin-1") for name, value in headers})
        start = time.time_ns()
        span = tracer.start_span(_OPERATION, context=parent, kind=SpanKind.INTERNAL, start_time=start)
        return RequestTrace(tracer, span, self._servers)


class RequestTrace:
    """One chat request's span and its attempts' spans."""

    __slots__ = ("_attempts", "_context", "_servers", "_tracer", "response_model", "span")

    def __init__(self, tracer: Tracer, span: Span, servers: dict[str, tuple[str, int]]) -> None:
        self._tracer = tracer
        self.span = span
        self._context = trace.set_span_in_context(span)
        self._servers = servers
        #: (candidate, span, start in ns) per attempt sent, in order.
        self._attempts: list[tuple[str, Span, int]] = []
        #: What the winner's answer says its model is (set by the router once it has committed).
        self.response_model: str | None = None

    def attempt(
        self, candidate: str, provider: str, model_id: str, url: str, headers: dict[str, str], start: int
    ) -> None:
        """Start ``candidate``'s attempt span at ``start`` (``time.time_ns()`` read when the attempt's
        latency began to count) and put its ``traceparent`` into ``headers``."""
        server = self._servers.get(url)
        if server is None:
            server = self._servers[url] = _server(url)
        span = self._tracer.start_span(
            f"{_OPERATION} {model_id}",
            context=self._context,
            kind=SpanKind.CLIENT,
            start_time=start,
            attributes={
                "gen_ai.operation.name": _OPERATION,
                "gen_ai.provider.name": provider,
                "gen_ai.request.model": model_id,
                "server.address": server[0],
                "server.port": server[1],
                "asgi_router.candidate": candidate,
            },
        )
        # A forwarded client tracestate goes: the span's own (inherited along its trace) is set.
        headers.pop("tracestate", None)
        _W3C.inject(headers, context=trace.set_span_in_context(span))
        self._attempts.append((candidate, span, start))

    def finish(self, record: RequestRecord) -> None:
        """End every span from what ``record`` says happened."""
        open_spans = list(self._attempts)
        for event in record.events:
            if event.outcome == "skipped":
                continue
            for index, (candidate, span, start) in enumerate(open_spans):
                if candidate == event.candidate:
                    del open_spans[index]
                    self._end_attempt(span, start, event, record)
                    break
        for _, span, _ in open_spans:  # an attempt with no event: ended now
            span.end()
        self._end_request(record)

    def _end_attempt(self, span: Span, start: int, event: AttemptEvent, record: RequestRecord) -> None:
        if event.status is not None:
            span.set_attribute("http.response.status_code", event.status)
        span.set_attribute("asgi_router.outcome", event.outcome)
        if event.ttfb is not None:
            span.set_attribute("asgi_router.time_to_first_byte", event.ttfb)
        if event.outcome == "served":
            if self.response_model is not None:
                span.set_attribute("gen_ai.response.model", self.response_model)
            self._usage(span, record)
        else:
            span.set_attribute("error.type", event.reason)
            span.set_status(Status(StatusCode.ERROR, event.reason))
        span.end(end_time=start + int(event.latency * 1e9))

    def _end_request(self, record: RequestRecord) -> None:
        span = self.span
        span.update_name(f"{_OPERATION} {record.ref}")
        span.set_attribute("gen_ai.operation.name", _OPERATION)
        span.set_attribute("gen_ai.request.model", record.ref)
        span.set_attribute("http.response.status_code", record.status)
        span.set_attribute("asgi_router.request_id", record.request_id)
        span.set_attribute("asgi_router.route", record.route)
        span.set_attribute("asgi_router.attempts", sum(1 for e in record.events if e.outcome != "skipped"))
        if record.winner is not None:
            span.set_attribute("gen_ai.provider.name", record.winner.split("/", 1)[0])
            span.set_attribute("asgi_router.winner", record.winner)
            if self.response_model is not None:
                span.set_attribute("gen_ai.response.model", self.response_model)
            self._usage(span, record)
        if record.status >= 400 or record.status == 0:
            span.set_attribute("error.type", str(record.status))
            if record.status >= 500:
                span.set_status(Status(StatusCode.ERROR))
        span.end()

    @staticmethod
    def _usage(span: Span, record: RequestRecord) -> None:
        if record.tokens_measured and record.prompt_tokens is not None and record.completion_tokens is not None:
            span.set_attribute("gen_ai.usage.input_tokens", record.prompt_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", record.completion_tokens)
