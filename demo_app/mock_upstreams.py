"""Built-in mock upstreams: the test kit's fake upstreams, so the demo needs no API key.

Each mock is an :class:`asgi_router.testing.FakeUpstream` (what users test their own apps
with): ``POST /v1/chat/completions`` answers a ``chat.completion`` JSON body, or with
``"stream": true`` a ``chat.completion.chunk`` stream in OpenAI's wire format, word by word,
ending in ``data: [DONE]`` (with a usage chunk when ``stream_options.include_usage`` asks for
one); ``GET /v1/models`` lists :data:`MOCK_MODELS`. The answer says which mock served it and
echoes the start of the last user message, so whoever reads it can tell the upstreams apart.

Three behaviours, one per mock:

``steady``
    always answers.
``flaky``
    fails a share of its requests (``fail_rate``, default one in two) with a 503 and an
    OpenAI-shaped error body. The failures are spread evenly, not drawn at random, so the
    demo is reproducible: at 0.5 the 1st, 3rd, 5th ... request fail.
``slow``
    waits ``delay`` seconds before answering: longer than the router's first-byte timeout,
    so the router gives up on it and fails over.

A fourth name, ``down``, is a port that is bound but never listens: connecting to it is
refused at once, as for an upstream that is not running.

Every mock checks that the request carries the router's key for it (``Bearer mock``), which
shows that the client's own ``Authorization`` is never forwarded, and answers a request with
no ``messages`` with a 400, which the router passes through without failing over.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Self

from asgi_router.testing import FakeUpstream, Hit, reply
from asgi_router.testing.reply import Reply

from .serving import ServerHandle, bind_socket, url_for

__all__ = [
    "MOCK_API_KEY",
    "MOCK_MODELS",
    "MockSpec",
    "MockUpstreams",
    "create_mock_app",
    "reply_text",
]

#: The key the router is configured to send to the mocks (and the mocks insist on).
MOCK_API_KEY: Final = "mock"
#: Model ids the mocks list on ``GET /v1/models`` (they answer to any id).
MOCK_MODELS: Final = ("mock-1", "mock-a", "mock-b")
_ECHO_WORDS: Final = 8
_CHAT: Final = "/v1/chat/completions"


@dataclass(slots=True)
class MockSpec:
    """How one mock upstream behaves."""

    name: str
    #: Share of requests answered with a 503, spread evenly (0 never, 1 always).
    fail_rate: float = 0.0
    #: Seconds to wait before the response starts.
    delay: float = 0.0
    #: Seconds between streamed words.
    word_delay: float = 0.05
    #: The bearer token required on every request; ``None`` accepts any (or none).
    api_key: str | None = MOCK_API_KEY
    #: Chat requests seen so far (the failure schedule and the reply use it).
    requests: int = field(default=0, init=False)
    _debt: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.fail_rate <= 1.0:
            raise ValueError(f"{self.name}: fail_rate must be between 0 and 1, not {self.fail_rate}")
        if self.delay < 0 or self.word_delay < 0:
            raise ValueError(f"{self.name}: delays must not be negative")

    def next_request_fails(self) -> bool:
        """Count a request; say whether it is one of the ``fail_rate`` share that fails."""
        self.requests += 1
        self._debt += self.fail_rate
        if self._debt > 1e-9:
            self._debt -= 1.0
            return True
        return False

    def describe(self) -> str:
        """One line for the demo's banner and index page."""
        if self.fail_rate >= 1.0:
            return "always fails with 503"
        if self.fail_rate > 0.0:
            return f"fails {self.fail_rate:.0%} of requests with 503"
        if self.delay > 0.0:
            return f"waits {self.delay:g} s before answering"
        return "always answers"


def _error(status: int, message: str, kind: str, code: str) -> Reply:
    return reply.status(status, body={"error": {"message": message, "type": kind, "code": code, "param": None}})


def _last_user_text(messages: list[Any]) -> str:
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
            return " ".join(
                part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
            )
    return ""


def reply_text(spec: MockSpec, model: str, messages: list[Any]) -> str:
    """What a mock answers: who it is, and the start of what it was told."""
    words = _last_user_text(messages).split()
    echo = " ".join(words[:_ECHO_WORDS]) + (" ..." if len(words) > _ECHO_WORDS else "")
    heard = f'You said: "{echo}".' if echo else "You sent no user message."
    return (
        f"Hello from the {spec.name} mock upstream (model {model}, request #{spec.requests}). "
        f"{heard} This answer was served through asgi_router."
    )


class DemoUpstream(FakeUpstream):
    """A fake upstream that answers as its :class:`MockSpec` says, whatever the model id."""

    def __init__(self, spec: MockSpec) -> None:
        super().__init__(api_key=spec.api_key or MOCK_API_KEY)
        self.spec = spec

    def reply_for(self, hit: Hit) -> Reply:
        spec = self.spec
        if spec.api_key is not None and hit.headers.get("authorization") != f"Bearer {spec.api_key}":
            return _error(
                401, f"{spec.name} mock upstream: wrong or missing API key", "invalid_request_error", "invalid_api_key"
            )
        if hit.method == "GET" and hit.path == "/v1/models":
            owner = f"mock-{spec.name}"
            models = [{"id": model, "object": "model", "created": 0, "owned_by": owner} for model in MOCK_MODELS]
            return reply.status(200, body={"object": "list", "data": models})
        if hit.path != _CHAT:
            return super().reply_for(hit)
        if not hit.model:
            return _error(400, "a JSON body with a 'model' is required", "invalid_request_error", "missing_model")
        messages = hit.body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error(400, "'messages' must be a non-empty array", "invalid_request_error", "invalid_messages")
        if spec.next_request_fails():
            return _error(
                503,
                f"{spec.name} mock upstream: simulated outage (request #{spec.requests})",
                "server_error",
                "service_unavailable",
            )
        answer = reply.ok(reply_text(spec, hit.model, messages), interval=spec.word_delay)
        # A client that leaves during the delay ends it: the mock answers nobody.
        return reply.slow(spec.delay, answer) if spec.delay > 0 else answer


def create_mock_app(spec: MockSpec) -> DemoUpstream:
    """An OpenAI-compatible mock upstream (an ASGI app) behaving as ``spec`` says."""
    return DemoUpstream(spec)


def default_specs(*, flaky_rate: float = 0.5, slow_delay: float = 3.0, word_delay: float = 0.05) -> dict[str, MockSpec]:
    """The demo's three mocks."""
    return {
        "steady": MockSpec("steady", word_delay=word_delay),
        "flaky": MockSpec("flaky", fail_rate=flaky_rate, word_delay=word_delay),
        "slow": MockSpec("slow", delay=slow_delay, word_delay=word_delay),
    }


class MockUpstreams:
    """The mock upstreams, each served by uvicorn on a free loopback port of the running loop.

    ``async with MockUpstreams() as mocks:`` starts them; ``mocks.base_urls`` then maps each
    name (``steady``, ``flaky``, ``slow``, ``down``) to its OpenAI-style base URL
    (``http://127.0.0.1:PORT/v1``). Nothing is bound or started before :meth:`start`.
    """

    #: The name of the refused-connection pseudo upstream.
    DOWN: Final = "down"

    def __init__(self, specs: Mapping[str, MockSpec] | None = None, *, host: str = "127.0.0.1") -> None:
        self.specs: dict[str, MockSpec] = dict(specs) if specs is not None else default_specs()
        if self.DOWN in self.specs:
            raise ValueError(f"{self.DOWN!r} is reserved for the refused-connection upstream")
        self.host = host
        self._servers: list[ServerHandle] = []
        self._down: socket.socket | None = None  # bound, never listening: behind "down"
        self._base_urls: dict[str, str] = {}

    @property
    def base_urls(self) -> dict[str, str]:
        """``name -> http://127.0.0.1:PORT/v1`` for every mock (only once started)."""
        if not self._base_urls:
            raise RuntimeError("the mock upstreams are not running; use 'async with MockUpstreams()'")
        return dict(self._base_urls)

    async def start(self) -> None:
        """Bind free ports and serve every mock; return once all accept connections."""
        if self._servers:
            raise RuntimeError("the mock upstreams are already running")
        try:
            for name, spec in self.specs.items():
                handle = ServerHandle(f"mock {name}", create_mock_app(spec), bind_socket(self.host, 0))
                self._servers.append(handle)
                await handle.start()
                self._base_urls[name] = f"{handle.url}/v1"
            self._down = bind_socket(self.host, 0)  # bound, never listening: connection refused
            self._base_urls[self.DOWN] = f"{url_for(self._down)}/v1"
        except BaseException:
            await self.stop()
            raise

    async def stop(self, *, force: bool = False) -> None:
        """Stop every mock (in-flight requests get a short grace period) and free the ports."""
        self._base_urls = {}
        if self._down is not None:
            self._down.close()
            self._down = None
        try:
            await asyncio.gather(*(server.stop(force=force) for server in self._servers))
        finally:
            self._servers = []

    def force_stop(self) -> None:
        """Skip the graceful wait of a stop in progress."""
        for server in self._servers:
            server.force_stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
