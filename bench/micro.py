"""In-process micro-benchmarks: the router's own cost, with no sockets and no other process.

Load tests on a shared 2-core machine are noisy; these are not. They time:

* resolution + classification (resolution does no I/O and must take microseconds): ``resolve_string`` of a
  group ref, ``classify_status`` of a 200, and the failover path's ``classify_exception`` (of
  a refused connection as the aiohttp transport translates it);
* the front half of a request: one JSON parse, resolution, the model spliced into the body
  bytes, the upstream header block — for a small and a 100 KB body (and, for comparison,
  what re-serialising the 100 KB payload would cost);
* the input guardrails ``pii`` and ``secrets`` over a 10 kB prompt (``guardrails_us``);
* ``ModelRouter`` end to end over an in-memory transport (a canned JSON answer, or 20 SSE
  chunks, the same 20 chunks for a group with a member whose ``resume`` lets it continue a
  broken stream (whole events only), or the same text as an Anthropic provider's Messages
  stream, translated) and no-op
  ``receive``/``send``: everything the router adds per request, without uvicorn or an HTTP
  client.

Each figure is the best of a few repeats (the least disturbed by other processes).
"""

from __future__ import annotations

import asyncio
import json
import time
import timeit
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from asgi_router import ModelRouter
from asgi_router.attempts.wire_body import SplicedBody, WireBody
from asgi_router.config.guardrail_settings import GuardrailSettings
from asgi_router.core.classify import classify_exception, classify_status
from asgi_router.guardrails.guardrail_run import Guardrails
from asgi_router.inbound.body import InboundRequest, parse_request
from asgi_router.inbound.key_auth import KeyGuard
from asgi_router.keys.key_secrets import key_digest, new_key_id, new_secret, shown_prefix
from asgi_router.keys.virtual_key import VirtualKey
from asgi_router.routing.plan import Resolver
from asgi_router.testing.memory_transport import MemoryResponse, MemoryTransport
from asgi_router.transports.aiohttp_transport import translate
from asgi_router.transports.provider import ProviderRuntime
from asgi_router.transports.request_headers import request_headers_for_upstream

from .asgi_calls import receive_once
from .host import CONFIG_KEY, settings_for
from .upstream import COMPLETION, messages_events, responses_events, sse_events

__all__ = ["bench_router", "chat_body", "micro", "router_in_process", "router_loop"]

_REFUSED = aiohttp.ClientConnectorError(
    aiohttp.client_reqrep.ConnectionKey("127.0.0.1", 9, False, True, None, None, None),
    OSError(111, "Connection refused"),
)


def _best_us(statement: Callable[[], object], number: int, repeat: int = 5) -> float:
    return min(timeit.repeat(statement, number=number, repeat=repeat)) / number * 1e6


def chat_body(stream: bool, pad: int = 0, group: str = "bench") -> bytes:
    """The bench's chat request body for ``group/<group>``, compact as SDKs send it (``stream``
    only when true; ``pad`` characters in one more user message)."""
    payload: dict[str, Any] = {"model": f"group/{group}", "messages": [{"role": "user", "content": "Say hello."}]}
    if stream:
        payload["stream"] = True
    if pad:
        payload["messages"].append({"role": "user", "content": "x" * pad})
    return json.dumps(payload, separators=(",", ":")).encode()


def responses_body(stream: bool, group: str = "bench") -> bytes:
    """The bench's Responses API request body for ``group/<group>`` (the same words as :func:`chat_body`)."""
    payload: dict[str, Any] = {"model": f"group/{group}", "input": "Say hello."}
    if stream:
        payload["stream"] = True
    return json.dumps(payload, separators=(",", ":")).encode()


def micro(scale: float = 1.0) -> dict[str, float]:
    """Microseconds per call of the request path's pure functions; ``scale`` multiplies the loop
    counts (the tests run them at a thousandth, as a smoke test)."""

    def best(statement: Callable[[], object], number: int) -> float:
        return _best_us(statement, max(1, int(number * scale)))

    settings = settings_for("http://127.0.0.1:1", "http://127.0.0.1:2", "aiohttp")
    resolver = Resolver(settings)
    provider = ProviderRuntime.build("up", settings.providers["up"], settings.routes)
    inbound = [(b"host", b"router"), (b"content-type", b"application/json"), (b"user-agent", b"bench")]

    def front_half(body: bytes) -> Callable[[], object]:
        def run() -> object:
            request = parse_request(body)
            assert isinstance(request, InboundRequest) and request.model_span is not None
            resolver.resolve_string(request.payload["model"])
            wire = SplicedBody(request.body, request.model_span).for_model("ok")
            return wire, request_headers_for_upstream(inbound, provider.headers, "req-1")

        return run

    big = json.loads(chat_body(False, 100_000))
    resolve = best(lambda: resolver.resolve_string("group/bench"), 20000)
    status = best(lambda: classify_status(200), 50000)
    return {
        "resolve_group_us": resolve,
        "classify_status_us": status,
        "classify_exception_us": best(lambda: classify_exception(translate(_REFUSED) or _REFUSED), 20000),
        "resolution_plus_classification_us": best(
            lambda: (resolver.resolve_string("group/bench"), classify_status(200)), 20000
        ),
        "front_half_small_us": best(front_half(chat_body(False)), 5000),
        "front_half_100kb_us": best(front_half(chat_body(False, 100_000)), 200),
        "serialise_100kb_fallback_us": best(lambda: WireBody(big).for_model("ok"), 200),
        "guardrails_us": _guardrails(best),
    }


def _guardrails(best: Callable[[Callable[[], object], int], float]) -> float:
    """The input guardrails ``pii`` and ``secrets`` (both masking) over a 10 kB prompt of prose
    with an email and a key in it: what a request with those checks pays before any upstream."""
    settings = settings_for("http://127.0.0.1:1", "http://127.0.0.1:2", "aiohttp").model_copy(
        update={
            "guardrails": {
                "pii": GuardrailSettings(kind="pii", action="mask"),
                "secrets": GuardrailSettings(kind="secrets", action="mask"),
            },
            "guardrails_default": ["pii", "secrets"],
        }
    )
    guards = Guardrails(settings, {}).select("group/bench", "bench", None)
    assert guards is not None
    sentence = "The quarterly plan covers 12 teams, 40 services and a task-based rollout. "
    prompt = sentence * (10_000 // len(sentence)) + "Mail jane@example.com, key sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12."
    loop = asyncio.new_event_loop()

    def run() -> object:
        payload = {"model": "group/bench", "messages": [{"role": "user", "content": prompt}]}
        return loop.run_until_complete(guards.check_input(payload, "/v1/chat/completions", None, "group/bench", int))

    try:
        return best(run, 200)
    finally:
        loop.close()


def _memory_transport(stream: bool) -> MemoryTransport:
    """The bench's upstream in memory: 20 SSE chunks or one JSON answer at once; an Anthropic
    provider's Messages stream where the URL ends in ``/messages``, a Responses API stream where
    it ends in ``/responses``."""
    parts = sse_events() if stream else [COMPLETION]
    messages = messages_events()
    responses = responses_events()
    content_type = b"text/event-stream" if stream else b"application/json"

    def answer(url: str) -> MemoryResponse:
        if url.endswith("/responses"):
            return MemoryResponse(responses, content_type)
        return MemoryResponse(messages if url.endswith("/messages") else parts, content_type)

    return MemoryTransport(answer)


def bench_router(
    stream: bool,
    group: str = "bench",
    state_url: str | None = None,
    metrics: bool = False,
    callers: bool = False,
    session: bool | None = None,
    sticky: bool = False,
    responses: bool = False,
    key: str | None = None,
) -> tuple[ModelRouter, Callable[[Any], Awaitable[None]]]:
    """The bench's ``ModelRouter`` over the in-memory transport, and one request: a coroutine
    function that sends the request to the ASGI app it is given (the router, or a wrapper of it).
    ``responses``: the request is a Responses API request on ``/v1/responses`` (streamed: the
    upstream's native Responses stream), else a chat completion.

    ``callers``: every caller and session capped (``bench/host.py``); ``session``: the requests
    carry a session header (default: when ``callers`` or ``sticky``), so that the loop without
    caps can send the same requests and the two differ by the caps alone; ``sticky``: the group
    sticks sessions to members; ``key``: inbound auth as the ``router-keys`` target has it
    (``bench/host.py``: admin keys, a config key, an in-memory ledger), each request presenting
    the config key (``"config"``) or a virtual key (``"virtual"``), made here and put in the
    router's key ring as its refresh would (no lifespan runs: the ledger keeps the rows in its
    buffer, unwritten, so the writer's work is not counted; ``python -m bench ledger`` counts it).
    """

    async def host(scope: Any, receive: Any, send: Any) -> None:  # never reached
        raise AssertionError("the router answers every chat request itself")

    settings = settings_for(
        "http://127.0.0.1:1",
        "http://127.0.0.1:2",
        "aiohttp",
        state_url=state_url,
        metrics=metrics,
        callers=callers,
        sticky=sticky,
        keys=key is not None,
    )
    router = ModelRouter(host, settings=settings, transport=_memory_transport(stream))
    body = responses_body(stream, group) if responses else chat_body(stream, group=group)
    path = "/v1/responses" if responses else "/v1/chat/completions"
    headers = [(b"host", b"router"), (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if callers or sticky if session is None else session:
        headers.append((b"x-session-id", b"bench-session"))
    if key is not None:
        headers.append((b"authorization", b"Bearer " + _presented(router, key).encode()))
    never = asyncio.Event()

    async def send(message: Any) -> None:
        pass

    async def request(app: Any) -> None:
        scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
        await app(scope, receive_once(body, never.wait), send)

    return router, request


def _presented(router: ModelRouter, key: str) -> str:
    """The key a ``key`` bench request presents: the config key, or a virtual key of caller
    ``bench`` learnt by the router's key ring."""
    if key == "config":
        return CONFIG_KEY
    secret = new_secret()
    virtual = VirtualKey(new_key_id(), "bench", key_digest(secret.encode()), shown_prefix(secret), time.time())
    guard = router._guard  # the bench owns its router: the ring a refresh would fill
    assert isinstance(guard, KeyGuard), "a key bench router has admin keys"
    guard.ring.learn(virtual)
    return secret


async def router_loop(
    stream: bool,
    count: int,
    group: str = "bench",
    state_url: str | None = None,
    metrics: bool = False,
    callers: bool = False,
    session: bool | None = None,
    sticky: bool = False,
) -> float:
    """Best-of-3 microseconds per request of ``ModelRouter`` over the in-memory transport (the
    arguments as :func:`bench_router`'s)."""
    router, request = bench_router(stream, group, state_url, metrics, callers, session, sticky)

    async def one() -> None:
        await request(router)
        await asyncio.sleep(0)  # let the loop run what the request scheduled, as a server would

    for _ in range(500):
        await one()
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(count):
            await one()
        best = min(best, (time.perf_counter() - started) / count * 1e6)
    return best


def router_in_process(count: int = 5000) -> dict[str, float]:
    """Microseconds the router spends per request when the network costs nothing."""
    run: Callable[[Any], Any] = asyncio.run
    try:
        import uvloop

        run = uvloop.run
    except ImportError:  # pragma: no cover - the bench extra installs it
        pass
    return {
        "router_json_us": run(router_loop(False, count)),
        "router_json_metrics_us": run(router_loop(False, count, metrics=True)),
        "router_sse20_us": run(router_loop(True, count // 4)),
        "router_sse20_metrics_us": run(router_loop(True, count // 4, metrics=True)),
        "router_sse20_translated_us": run(router_loop(True, count // 4, "translated")),
        "router_sse20_resumable_us": run(router_loop(True, count // 4, "resumable")),
        "router_json_session_us": run(router_loop(False, count, session=True)),
        "router_json_callers_us": run(router_loop(False, count, callers=True)),
        "router_sse20_callers_us": run(router_loop(True, count // 4, callers=True)),
        "router_json_sticky_us": run(router_loop(False, count, sticky=True)),
    }
