"""An upstream's ``usage`` that cannot be a token count (hundreds of digits, negative, ``true``, a
fraction) is ignored as unmeasured: the scrape stays a 200, the budget is not spent by it, the
client's translated usage does not repeat it, and later responses are counted as usual."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from asgi_lifespan import LifespanManager

from asgi_router import ModelRouter
from asgi_router.core.usage_bounds import MAX_PLAUSIBLE_TOKENS, plausible_tokens
from asgi_router.testing import FakeUpstream, reply

from .conftest import host_app, make_settings
from .metrics_helpers import Scrape

pytestmark = pytest.mark.anyio

ABSURD: list[Any] = [10**300, -5, True, 12.5, MAX_PLAUSIBLE_TOKENS + 1]
ABSURD_IDS = ["300-digits", "negative", "true", "fraction", "above-the-bound"]
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def fake_anthropic() -> Iterator[FakeUpstream]:
    with FakeUpstream(kind="anthropic") as up:
        yield up


@asynccontextmanager
async def routed(providers: dict[str, Any], **settings: Any) -> AsyncIterator[httpx2.AsyncClient]:
    router = ModelRouter(
        host_app(),
        settings=make_settings("http://127.0.0.1:9", providers=providers, metrics_route="/metrics", **settings),
    )
    async with LifespanManager(router):
        transport = httpx2.ASGITransport(app=router)
        async with httpx2.AsyncClient(transport=transport, base_url="http://router") as client:
            yield client


@pytest.mark.parametrize("absurd", ABSURD, ids=ABSURD_IDS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_absurd_usage_figure_leaves_metrics_scrapable_and_is_not_counted(
    fake: FakeUpstream, absurd: Any, stream: bool
) -> None:
    fake.script("absurd", reply.ok("fine", usage={"prompt_tokens": absurd, "completion_tokens": 3}))
    fake.script("usual", reply.ok("fine", usage={"prompt_tokens": 7, "completion_tokens": 2}))
    body: dict[str, Any] = {**CHAT, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    async with routed({"fake": fake.provider()}) as client:
        first = await client.post("/v1/chat/completions", json={**body, "model": "fake/absurd"})
        assert first.status_code == 200, first.text
        assert (await client.get("/metrics")).status_code == 200
        second = await client.post("/v1/chat/completions", json={**body, "model": "fake/usual"})
        assert second.status_code == 200, second.text
        scraped = await client.get("/metrics")
    assert scraped.status_code == 200, scraped.text
    scrape = Scrape(scraped.text)
    # Direct model ids are folded into their provider's label: only the usual response counts.
    assert scrape.value("asgi_router_tokens_total", candidate="fake/*", kind="prompt") == 7
    assert scrape.value("asgi_router_tokens_total", candidate="fake/*", kind="completion") == 2


async def test_an_absurd_usage_figure_does_not_spend_a_tpm_budget(fake: FakeUpstream) -> None:
    fake.script("budgeted", reply.ok("fine", usage={"prompt_tokens": 10**300, "completion_tokens": 10**300}))
    groups = {"g": {"members": [{"ref": "fake/budgeted", "tpm": 100_000}, "fake/other"]}}
    async with routed({"fake": fake.provider()}, groups=groups) as client:
        served_by = []
        for _ in range(3):
            response = await client.post("/v1/chat/completions", json={**CHAT, "model": "group/g"})
            assert response.status_code == 200, response.text
            served_by.append(response.headers["x-router-model"])
    assert served_by == ["fake/budgeted"] * 3


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_an_anthropic_members_absurd_usage_is_not_translated_into_the_clients_usage(
    fake_anthropic: FakeUpstream, stream: bool
) -> None:
    fake_anthropic.script("claude", reply.ok("fine", usage={"input_tokens": 10**300, "output_tokens": -4}))
    body: dict[str, Any] = {**CHAT, "model": "claude/claude", "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    async with routed({"claude": fake_anthropic.provider()}) as client:
        response = await client.post("/v1/chat/completions", json=body)
        assert response.status_code == 200, response.text
        assert str(10**300)[:50] not in response.text and '"completion_tokens":-4' not in response.text
        assert (await client.get("/metrics")).status_code == 200


@pytest.mark.parametrize("value", [*ABSURD, None, "12", [1], {"n": 1}, False])
def test_plausible_tokens_refuses_what_cannot_be_a_count(value: Any) -> None:
    assert plausible_tokens(value) is None


@pytest.mark.parametrize("value", [0, 1, 4096, MAX_PLAUSIBLE_TOKENS])
def test_plausible_tokens_keeps_a_count(value: int) -> None:
    assert plausible_tokens(value) == value
