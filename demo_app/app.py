"""The demo's host app: a FastAPI app of its own, with ``ModelRouter`` mounted on it.

The host app answers ``GET /`` and ``GET /health``; the router answers ``GET /v1/models`` (from
its configuration) and ``POST /v1/chat/completions`` by trying the configured upstreams in order. The routing setup,
built by :func:`build_settings` from the mock upstreams' base URLs:

=====================  ==========================================  ==================================
model                  tries                                       shows
=====================  ==========================================  ==================================
``group/demo``         ``flaky/mock-1``, then ``steady/mock-1``    failover on 503 (every other call)
``group/slow-first``   ``slow/mock-1``, then ``steady/mock-1``     failover on the first-byte timeout
``group/rotate``       ``steady/mock-a`` and ``steady/mock-b``     the start rotates per request
``group/unreachable``  ``down/mock-1``, then ``slow/mock-1``       every candidate fails: 502
``demo``               alias of ``group/demo``
=====================  ==========================================  ==================================

Real providers join when their key is in the environment: ``OPENAI_API_KEY`` adds provider
``openai`` and ``group/openai`` (``openai/gpt-4o-mini``, then ``steady/mock-1``);
``OPENROUTER_API_KEY`` adds ``openrouter`` and ``group/openrouter`` likewise. Keys are read by
the router from the environment and never printed.

Use :func:`running_demo` to get the mocks and the app together::

    async with running_demo() as demo:
        ...  # demo.app is the FastAPI app; demo.mocks.base_urls the upstreams
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

from fastapi import FastAPI
from pydantic import SecretStr

from asgi_router import GroupSettings, ModelRouter, ProviderSettings, RouterSettings, Timeouts

from .mock_upstreams import MOCK_API_KEY, MockSpec, MockUpstreams, default_specs

__all__ = [
    "DEFAULT_FIRST_BYTE_TIMEOUT",
    "REAL_PROVIDERS",
    "STATUS_ROUTE",
    "Demo",
    "RealProvider",
    "build_settings",
    "create_app",
    "running_demo",
]

#: The router's first-byte timeout for the mocks (the ``slow`` mock waits longer than this).
DEFAULT_FIRST_BYTE_TIMEOUT: Final = 1.0
#: The router's live status page in the demo.
STATUS_ROUTE: Final = "/router/status"


@dataclass(frozen=True, slots=True)
class RealProvider:
    """A real OpenAI-compatible provider that joins the demo when its key variable is set."""

    name: str
    base_url: str
    key_env: str
    model: str
    headers: tuple[tuple[str, str], ...] = ()


REAL_PROVIDERS: Final = (
    RealProvider("openai", "https://api.openai.com/v1", "OPENAI_API_KEY", "gpt-4o-mini"),
    RealProvider(
        "openrouter",
        "https://openrouter.ai/api/v1",
        "OPENROUTER_API_KEY",
        "openai/gpt-4o-mini",
        # OpenRouter's optional app-name header: an example of a provider-configured header.
        (("X-Title", "asgi_router demo"),),
    ),
)


def build_settings(
    upstreams: Mapping[str, str],
    *,
    first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT,
    env: Mapping[str, str] | None = None,
    state_url: str | None = None,
) -> RouterSettings:
    """The demo's router configuration for mock upstreams at ``upstreams`` (name -> base URL).

    ``upstreams`` needs ``steady``, ``flaky``, ``slow`` and ``down`` (as
    :attr:`MockUpstreams.base_urls` has). ``env`` (default ``os.environ``) decides which real
    providers join; only the *name* of the key variable goes into the settings.
    """
    env = os.environ if env is None else env
    mock_timeouts = Timeouts(connect=1.0, first_byte=first_byte_timeout, idle=5.0, total=30.0)
    key = SecretStr(MOCK_API_KEY)
    providers = {
        name: ProviderSettings(base_url=upstreams[name], api_key=key, timeouts=mock_timeouts)
        for name in ("steady", "flaky", "slow", "down")
    }
    groups = {
        "demo": GroupSettings(members=["flaky/mock-1", "steady/mock-1"]),
        "slow-first": GroupSettings(members=["slow/mock-1", "steady/mock-1"]),
        "rotate": GroupSettings(strategy="rotate", members=["steady/mock-a", "steady/mock-b"]),
        "unreachable": GroupSettings(members=["down/mock-1", "slow/mock-1"]),
    }
    for real in REAL_PROVIDERS:
        if env.get(real.key_env):
            providers[real.name] = ProviderSettings(
                base_url=real.base_url,
                api_key_env=real.key_env,
                timeouts=Timeouts(first_byte=30.0),
                headers=dict(real.headers),
            )
            groups[real.name] = GroupSettings(members=[f"{real.name}/{real.model}", "steady/mock-1"])
    # The demo serves anyone on loopback: a router without inbound auth must say so explicitly
    # (it logs a warning at start-up). Real deployments set api_keys or pass authorize=.
    shared: dict[str, Any] = {"state_url": state_url} if state_url else {}
    return RouterSettings(
        providers=providers,
        groups=groups,
        aliases={"demo": "group/demo"},
        allow_unauthenticated=True,
        status_route=STATUS_ROUTE,  # the breakers and the requests, live, in a browser
        **shared,
    )


def _describe(settings: RouterSettings, mocks: Mapping[str, MockSpec]) -> dict[str, Any]:
    providers: dict[str, Any] = {}
    for name, provider in settings.providers.items():
        if name in mocks:
            role = f"mock upstream: {mocks[name].describe()}"
        elif name == MockUpstreams.DOWN:
            role = "mock upstream: nothing listens (connection refused)"
        else:
            role = f"real provider (key from ${provider.api_key_env})"
        providers[name] = {"base_url": provider.base_url, "role": role}
    return {
        "name": "asgi_router demo",
        "description": (
            "A FastAPI app with asgi_router.ModelRouter mounted. POST /v1/chat/completions with "
            "model 'group/<id>' or 'provider/model-id'; the router tries the group's members in "
            "order until one answers. See the x-router-model and x-router-attempts headers."
        ),
        "chat_completions": "POST /v1/chat/completions",
        "providers": providers,
        "groups": {
            f"group/{name}": {"strategy": group.strategy, "members": list(group.members)}
            for name, group in settings.groups.items()
        },
        "aliases": dict(settings.aliases),
    }


def create_app(
    upstreams: Mapping[str, str],
    *,
    settings: RouterSettings | None = None,
    mocks: Mapping[str, MockSpec] | None = None,
    first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT,
    state_url: str | None = None,
) -> FastAPI:
    """The host app with ``ModelRouter`` mounted, routing to the upstreams at ``upstreams``.

    ``settings`` replaces the demo's routing setup (:func:`build_settings`) entirely; ``mocks``
    (the specs the mocks run with) only feeds the description on ``GET /``.
    """
    settings = settings or build_settings(upstreams, first_byte_timeout=first_byte_timeout, state_url=state_url)
    description = _describe(settings, mocks if mocks is not None else default_specs())

    app = FastAPI(title="asgi_router demo", version="0.1.0")
    app.state.router_settings = settings

    @app.get("/")
    async def index() -> dict[str, Any]:
        """What this demo is and what to try."""
        return description

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    app.add_middleware(ModelRouter, settings=settings)
    return app


@dataclass(frozen=True, slots=True)
class Demo:
    """A running set of mock upstreams and the host app routing to them."""

    app: FastAPI
    mocks: MockUpstreams
    settings: RouterSettings


@asynccontextmanager
async def running_demo(
    *,
    flaky_rate: float = 0.5,
    slow_delay: float = 3.0,
    word_delay: float = 0.05,
    first_byte_timeout: float = DEFAULT_FIRST_BYTE_TIMEOUT,
    host: str = "127.0.0.1",
) -> AsyncIterator[Demo]:
    """Start the mock upstreams and build the host app for them; stop the mocks on exit.

    The host app itself is not served here: drive it in-process (its lifespan opens the
    router's upstream client) or serve it with uvicorn, as ``python -m demo_app`` does.
    """
    specs = default_specs(flaky_rate=flaky_rate, slow_delay=slow_delay, word_delay=word_delay)
    async with MockUpstreams(specs, host=host) as mocks:
        app = create_app(mocks.base_urls, mocks=specs, first_byte_timeout=first_byte_timeout)
        yield Demo(app, mocks, app.state.router_settings)
