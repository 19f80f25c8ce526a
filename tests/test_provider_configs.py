"""The OpenAI-compatible provider configurations the Protocols page shows, run for real.

Each TOML example of ``docs/protocols.md``'s "OpenAI-compatible providers" section is loaded as
written, with only its ``base_url``'s scheme and host swapped for a recording server on
127.0.0.1 (its path kept), and the recorder checks what a request through the router looks like
on the wire: the path below the base URL, the query, and the header the key travels in. A health
probe carries the same query and key.
"""

from __future__ import annotations

import re
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from asgi_router import ModelRouter, RouterSettings

from .conftest import API_KEY, host_app
from .servers import ServerThread
from .waiting import polled

pytestmark = pytest.mark.anyio

_PAGE = Path(__file__).resolve().parents[1] / "docs" / "protocols.md"


@dataclass
class Heard:
    method: str
    path: str
    query: str
    headers: dict[str, str]


class Recorder:
    """Answers every request with a chat completion and keeps what it heard."""

    def __init__(self) -> None:
        self.heard: list[Heard] = []
        self._lock = threading.Lock()
        self.app = Starlette(routes=[Route("/{path:path}", self.answer, methods=["GET", "POST"])])

    async def answer(self, request: Request) -> Response:
        with self._lock:
            self.heard.append(Heard(request.method, request.url.path, request.url.query, dict(request.headers)))
        choice = {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        return JSONResponse({"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]})

    def last(self, method: str) -> Heard:
        def found() -> list[Heard]:
            with self._lock:
                return [heard for heard in self.heard if heard.method == method]

        return polled(found, within=5, what=f"a {method} at the recorder")[-1]


@pytest.fixture(scope="module")
def recorder() -> Iterator[tuple[Recorder, str]]:
    recording = Recorder()
    with ServerThread(recording.app, lifespan="off") as server:
        yield recording, server.url


def _documented_provider(name: str) -> dict[str, Any]:
    """The ``[providers.<name>]`` table of the page's "OpenAI-compatible providers" section."""
    section = _PAGE.read_text(encoding="utf-8").split("## OpenAI-compatible providers", 1)[1]
    for block in re.findall(r"```toml\n(.*?)```", section, re.DOTALL):
        providers = tomllib.loads(block).get("providers", {})
        if name in providers:
            provider: dict[str, Any] = providers[name]
            return provider
    raise AssertionError(f"docs/protocols.md shows no [providers.{name}]")


def _pointed_at(provider: dict[str, Any], url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The documented provider with its scheme and host replaced by ``url``, its key set."""
    monkeypatch.setenv(provider["api_key_env"], API_KEY)
    return {**provider, "base_url": url + urlsplit(provider["base_url"]).path}


@pytest.mark.parametrize(
    ("name", "path", "query", "header", "value"),
    [
        ("azure", "/openai/deployments/gpt-4o/chat/completions", "api-version=2024-10-21", "api-key", API_KEY),
        ("gemini", "/v1beta/openai/chat/completions", "", "authorization", f"Bearer {API_KEY}"),
        ("deepseek", "/chat/completions", "", "authorization", f"Bearer {API_KEY}"),
    ],
)
async def test_each_documented_provider_config_sends_its_path_query_and_key_header(
    recorder: tuple[Recorder, str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    path: str,
    query: str,
    header: str,
    value: str,
) -> None:
    recording, url = recorder
    provider = _pointed_at(_documented_provider(name), url, monkeypatch)
    settings = RouterSettings(providers={name: provider}, allow_unauthenticated=True)
    with ServerThread(ModelRouter(host_app(), settings=settings)) as server:
        async with httpx2.AsyncClient() as client:
            body = {"model": f"{name}/some-model", "messages": [{"role": "user", "content": "hi"}]}
            response = await client.post(f"{server.url}/v1/chat/completions", json=body)
    assert response.status_code == 200
    heard = recording.last("POST")
    assert (heard.path, heard.query) == (path, query)
    assert heard.headers[header] == value
    assert {"authorization", "api-key"} & set(heard.headers) == {header}


async def test_a_health_probe_carries_the_providers_query_and_key_header(
    recorder: tuple[Recorder, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    recording, url = recorder
    provider = _pointed_at(_documented_provider("azure"), url, monkeypatch)
    provider["health"] = {"interval": 0.05, "path": "/models"}
    settings = RouterSettings(providers={"azure": provider}, allow_unauthenticated=True)
    with ServerThread(ModelRouter(host_app(), settings=settings)):
        heard = recording.last("GET")
    assert (heard.path, heard.query) == ("/openai/deployments/gpt-4o/models", "api-version=2024-10-21")
    assert heard.headers["api-key"] == API_KEY
