"""Shared fixtures: one real mock upstream per session, routers built on it, clients for both."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager
from fastapi import FastAPI, WebSocket

from asgi_router import ModelRouter, RouterSettings
from asgi_router.observability.sinks import EventBus
from asgi_router.testing import TEST_KEY

from .fake_anthropic import FakeAnthropic
from .fleet import REDIS_PASSWORD, RedisServer
from .mock_upstream import MockUpstream
from .postgres import PostgresServer
from .redaction import LeakTap
from .servers import ServersByTransport, ServerThread
from .sleep_tally import SleepTally

API_KEY = "sk-test-upstream-SECRET-0123456789"
"""The key configured for the mock provider: it must never show up in a response or log."""

CLIENT_KEY = "rk-client-7c1e9f0a2b3d4e5f60718293"
"""An inbound key (``RouterSettings(api_keys=...)``) for auth tests: it must not leak either."""

SECRETS = (API_KEY, CLIENT_KEY, TEST_KEY, REDIS_PASSWORD)
"""Every key a test configures: ``TEST_KEY`` is the one the kit's ``FakeUpstream.provider()`` gives."""


_SLEEPS = pytest.StashKey[SleepTally]()


def pytest_configure(config: pytest.Config) -> None:
    """Tally the session's completed sleeps (tests/sleep_tally.py), for the terminal summary."""
    tally = SleepTally()
    tally.install()
    config.stash[_SLEEPS] = tally


def pytest_unconfigure(config: pytest.Config) -> None:
    if (tally := config.stash.get(_SLEEPS, None)) is not None:
        tally.uninstall()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[object]:
    """Puts the sleeps that end while ``item`` is set up, run or torn down down to it."""
    tally = item.config.stash.get(_SLEEPS, None)
    if tally is not None:
        tally.current_test = item.nodeid
    try:
        return (yield)
    finally:
        if tally is not None:
            tally.current_test = ""


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if (tally := config.stash.get(_SLEEPS, None)) is not None:
        terminalreporter.write_sep("-", "time spent sleeping (tests/sleep_tally.py)")
        for line in tally.summary():
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def leak_tap() -> Iterator[LeakTap]:
    """The redaction tap (tests/redaction.py), listening for the whole session."""
    tap = LeakTap(SECRETS)
    with pytest.MonkeyPatch.context() as patch, tap.listening():
        patch.setattr(ModelRouter, "__call__", tap.wrap(ModelRouter.__call__))
        patch.setattr(EventBus, "publish", tap.wrap_publish(EventBus.publish))
        yield tap


@pytest.fixture(autouse=True)
def no_secret_leaks(leak_tap: LeakTap) -> Iterator[None]:
    """Fail the test during which a configured key, or a prefix of it, was logged or sent."""
    yield
    leaks = leak_tap.take()
    assert not leaks, "secret leaked:\n" + "\n".join(leaks)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


TRANSPORTS = ("aiohttp", "httpx")
"""The upstream transports a router can be built on (``RouterSettings.transport``)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--transport",
        choices=TRANSPORTS,
        default="aiohttp",
        help="the upstream transport for tests not marked both_transports (default: aiohttp, the router's default)",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked ``both_transports`` runs once per transport (its ids say which)."""
    if metafunc.definition.get_closest_marker("both_transports") is not None:
        metafunc.parametrize("transport_kind", TRANSPORTS, indirect=True)


@pytest.fixture(autouse=True)
def transport_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The upstream transport of every router the test builds.

    Most behaviour is the same whichever transport carries it, so a test runs on one: the
    default (``--transport`` picks another). A test whose behaviour depends on the transport
    (streaming, disconnects, timeouts, connection errors, pools, response size caps) is marked
    ``both_transports`` and runs on each. Set through the environment, so that every
    ``RouterSettings`` a test builds (by :func:`make_settings` or by hand) picks it up;
    ``tests/unit`` overrides this fixture.
    """
    kind: str = getattr(request, "param", None) or request.config.getoption("transport")
    monkeypatch.setenv("ASGI_ROUTER_TRANSPORT", kind)
    return kind


@pytest.fixture(scope="session")
def upstream() -> Iterator[MockUpstream]:
    """The kit's fake upstream, scripted by model id (tests/mock_upstream.py), for the session."""
    with MockUpstream() as mock:
        yield mock


@pytest.fixture(scope="session")
def anthropic() -> Iterator[FakeAnthropic]:
    """The kit's Anthropic fake, scripted by model id (tests/fake_anthropic.py), for the session,
    accepting only :data:`API_KEY`; ``.provider()`` is its provider entry (``kind = "anthropic"``)."""
    with FakeAnthropic(API_KEY) as fake:
        yield fake


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real ``redis-server`` on a free loopback port, for the fleet tests (tests/fleet.py)."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL server on a free loopback port, for the ledger's tests (tests/postgres.py)."""
    # Not under pytest's own temporary directory: it is root's alone, and the server runs as
    # the postgres user when the tests run as root.
    workdir = Path(tempfile.mkdtemp(prefix="asgi-router-pg-"))
    server = PostgresServer(workdir).init()
    yield server
    server.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def refused_url() -> str:
    """A loopback URL on which nothing listens (connections are refused)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def make_settings(upstream_url: str, refused_url: str | None = None, **overrides: Any) -> RouterSettings:
    """Providers ``mock`` (the fake upstream) and ``down`` (refuses connections), fast timeouts.

    Inbound auth is off (``allow_unauthenticated=True``) unless an override configures it:
    most tests are not about auth, and settings are refused without a choice.
    """
    if "api_keys" not in overrides and "authorize" not in overrides:
        overrides.setdefault("allow_unauthenticated", True)
    timeouts = overrides.pop("timeouts", {"connect": 1, "first_byte": 1, "idle": 1, "total": 10})
    providers: dict[str, Any] = {
        "mock": {"base_url": f"{upstream_url}/v1", "api_key": API_KEY, "timeouts": timeouts},
        "mock2": {"base_url": f"{upstream_url}/v1", "api_key": API_KEY, "timeouts": timeouts},
    }
    if refused_url is not None:
        providers["down"] = {"base_url": refused_url, "api_key": API_KEY, "timeouts": timeouts}
    providers.update(overrides.pop("providers", {}))
    return RouterSettings(providers=providers, **overrides)


def host_app() -> FastAPI:
    """A host app with its own route and websocket, as a user's app would have."""
    app = FastAPI()
    app.state.started = False

    @app.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "host"}

    @app.post("/v1/embeddings")
    async def embeddings() -> dict[str, str]:
        return {"handled_by": "host"}

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        text = await websocket.receive_text()
        await websocket.send_text(f"echo:{text}")
        await websocket.close()

    return app


@pytest.fixture
def settings(upstream: MockUpstream, refused_url: str) -> RouterSettings:
    return make_settings(upstream.url, refused_url)  # type: ignore[attr-defined]


@pytest.fixture
async def client(settings: RouterSettings) -> AsyncIterator[httpx2.AsyncClient]:
    """In-process client (ASGITransport): fine for status, headers and whole bodies."""
    app = host_app()
    app.add_middleware(ModelRouter, settings=settings)
    async with LifespanManager(app) as manager:
        transport = httpx2.ASGITransport(app=manager.app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://router") as http:
            yield http


@pytest.fixture
def served_router(settings: RouterSettings) -> Iterator[tuple[ModelRouter, ServerThread]]:
    """The router around a host app, served by uvicorn on loopback (real sockets)."""
    router = ModelRouter(host_app(), settings=settings)
    with ServerThread(router) as server:
        yield router, server


def shared_routers(
    upstream: MockUpstream, refused_url: str | None = None, **overrides: Any
) -> ServersByTransport[ModelRouter]:
    """Routers on :func:`make_settings` with ``overrides``, one per transport, for the tests of a
    module to share (its module-scoped ``routers`` fixture). Their breakers are off: one test's
    failures must not open a breaker for the next (tests about breakers build their own)."""
    overrides.setdefault("breaker", {"enabled": False})

    def build(kind: str) -> ModelRouter:
        settings = make_settings(upstream.url, refused_url, transport=kind, **overrides)  # type: ignore[attr-defined]
        return ModelRouter(host_app(), settings=settings)

    return ServersByTransport(build)


@pytest.fixture
def server(routers: ServersByTransport[ModelRouter], transport_kind: str) -> ServerThread:
    """The module's shared router (its module-scoped ``routers`` fixture) on the test's transport,
    served on loopback."""
    return routers(transport_kind)[1]


@pytest.fixture
async def sdk(server: ServerThread) -> AsyncIterator[openai.AsyncOpenAI]:
    """The official ``openai`` client, talking to the module's ``server`` fixture (a router on a
    real socket); it never retries, so each call is one request."""
    async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="client-key", max_retries=0) as client:
        yield client


@pytest.fixture
def openai_clients() -> Iterator[Callable[[str, str], openai.OpenAI]]:
    """Makes official ``openai`` clients (a served router's URL, a key) that never retry, each
    closed when the test ends (an unclosed client's sockets are left to the garbage collector,
    which warns where it finds them)."""
    clients: list[openai.OpenAI] = []

    def make(url: str, key: str) -> openai.OpenAI:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def pool_is_quiet(router: ModelRouter) -> bool:
    """No request holds an upstream connection and no connection is mid-response."""
    return router.transport.is_quiet()


class SentMessages(list[dict[str, Any]]):
    """An ASGI ``send`` that keeps every message it is given, in order, for driving the router by
    hand: ``sent = SentMessages(); await router(scope, receive, sent)``."""

    async def __call__(self, message: dict[str, Any]) -> None:
        self.append(message)


def chat_scope(headers: list[tuple[bytes, bytes]] | None = None) -> dict[str, Any]:
    """An HTTP scope for ``POST /v1/chat/completions``, for driving the router by hand."""
    return {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": headers if headers is not None else [(b"content-type", b"application/json")],
        "query_string": b"",
    }
