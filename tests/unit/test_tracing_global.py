"""The host app's global tracer provider is found without telling the router (in a process of its
own: a global provider, once set, stays for the whole process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]

_SCRIPT = textwrap.dedent(
    """
    import asyncio
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from asgi_router import ModelRouter, RouterSettings

    async def host(scope, receive, send):
        raise AssertionError("not asked")

    settings = RouterSettings(
        allow_unauthenticated=True,
        providers={"down": {"base_url": "http://127.0.0.1:9/v1", "timeouts": {"connect": 1}}},
    )
    router = ModelRouter(host, settings=settings)
    body = b'{"model": "down/m", "messages": []}'

    async def ask():
        sent = []
        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}
        async def send(message):
            sent.append(message)
        scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "query_string": b""}
        scope["headers"] = [(b"content-type", b"application/json")]
        await router(scope, receive, send)
        return sent[0]["status"]

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # what the host app does, before it serves
    print(asyncio.run(ask()))
    print(sorted(span.name for span in exporter.get_finished_spans()))
    """
)


def test_the_global_tracer_provider_the_host_app_sets_is_used() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=60, cwd=_ROOT, check=False
    )
    assert result.returncode == 0, result.stderr
    # the request, and its three attempts (a direct model is retried twice in place)
    assert result.stdout.splitlines() == ["502", "['chat down/m', 'chat m', 'chat m', 'chat m']"]
