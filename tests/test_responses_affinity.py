"""``previous_response_id`` affinity: a follow-up goes back to the candidate that produced its
previous response, across two routers sharing one real redis-server (as a load balancer
alternates a conversation's turns between hosts), and never fails over to a provider that cannot
know that response. Clients: the official ``openai`` SDK and httpx; upstream: the kit's fake."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import httpx2
import openai
import pytest
from starlette.applications import Starlette

from asgi_router import ModelRouter, RouterSettings
from asgi_router.fleet.shared_state import SharedState
from asgi_router.testing import AppServer, FakeUpstream, reply

from .fleet import RedisServer
from .waiting import polled

pytestmark = pytest.mark.fleet

_KEYS = {"team-a": "team-a-key-0123456789abcdef", "team-b": "team-b-key-0123456789abcdef"}


def _settings(fake: FakeUpstream, **overrides: Any) -> RouterSettings:
    """Providers ``alpha`` and ``beta`` on the fake; group ``ab`` tries alpha first, ``ba`` beta."""
    return RouterSettings(
        providers={"alpha": fake.provider(), "beta": fake.provider()},
        groups={"ab": {"members": ["alpha/m-a", "beta/m-b"]}, "ba": {"members": ["beta/m-b", "alpha/m-a"]}},
        api_keys=_KEYS,
        breaker={"enabled": False},
        **overrides,
    )


@pytest.fixture
def hosts(redis_server: RedisServer, fake_upstream: FakeUpstream) -> Iterator[list[AppServer]]:
    """Two routers (hosts) sharing the session's redis-server under a prefix of this test's own."""
    prefix = f"resp{time.monotonic_ns()}"
    with ExitStack() as stack:
        servers = []
        for _ in range(2):
            router = ModelRouter(
                Starlette(),
                settings=_settings(fake_upstream, state_url=redis_server.url, state_key_prefix=prefix),
            )
            servers.append(stack.enter_context(AppServer(router)))
            state = router.state
            assert isinstance(state, SharedState)
            polled(lambda state=state: state.link.up, within=10, what="the store connection")
        yield servers


@pytest.fixture
def sdk(openai_clients: Callable[[str, str], openai.OpenAI]) -> Callable[..., openai.OpenAI]:
    """The openai SDK on a served router as ``caller``."""

    def make(server: AppServer, caller: str = "team-a") -> openai.OpenAI:
        return openai_clients(server.url, _KEYS[caller])

    return make


def _follow_up(server: AppServer, previous: str, caller: str = "team-a", model: str = "group/ba") -> httpx2.Response:
    return httpx2.post(
        f"{server.url}/v1/responses",
        json={"model": model, "input": "and then?", "previous_response_id": previous},
        headers={"authorization": f"Bearer {_KEYS[caller]}"},
        timeout=10,
    )


def test_a_follow_up_on_another_host_goes_back_to_the_candidate_that_produced_its_response(
    sdk: Callable[..., openai.OpenAI], hosts: list[AppServer], fake_upstream: FakeUpstream
) -> None:
    one, other = hosts
    first = sdk(one).responses.create(model="group/ab", input="hello")
    assert first.output_text == "Hello from m-a"
    # The other host, asked for a group that tries beta first, sends it back to alpha.
    raw = sdk(other).responses.with_raw_response.create(
        model="group/ba", input="and then?", previous_response_id=first.id
    )
    assert raw.parse().output_text == "Hello from m-a"
    assert raw.headers["x-router-model"] == "alpha/m-a"
    hit = fake_upstream.hits[-1]
    assert (hit.model, hit.body["previous_response_id"]) == ("m-a", first.id)
    # An id the router does not know runs the normal plan.
    unknown = _follow_up(other, "resp_never_relayed")
    assert unknown.headers["x-router-model"] == "beta/m-b"


def test_a_follow_up_whose_candidate_is_down_gets_503_naming_it_and_no_other_provider_is_tried(
    sdk: Callable[..., openai.OpenAI], hosts: list[AppServer], fake_upstream: FakeUpstream
) -> None:
    one, other = hosts
    first = sdk(one).responses.create(model="group/ab", input="hello")
    fake_upstream.reset()
    fake_upstream.script("m-a", reply.status(503))
    answer = _follow_up(other, first.id)
    assert answer.status_code == 503
    error = answer.json()["error"]
    assert error["code"] == "previous_response_unavailable"
    assert "alpha/m-a" in error["message"] and _KEYS["team-a"] not in answer.text
    assert {hit.model for hit in fake_upstream.hits} == {"m-a"}  # beta never asked
    with pytest.raises(openai.InternalServerError) as raised:
        sdk(one).responses.create(model="group/ba", input="again", previous_response_id=first.id)
    assert raised.value.status_code == 503


def test_a_follow_up_whose_candidate_is_rate_limited_stays_a_429_with_retry_after(
    sdk: Callable[..., openai.OpenAI], hosts: list[AppServer], fake_upstream: FakeUpstream
) -> None:
    one, other = hosts
    first = sdk(one).responses.create(model="group/ab", input="hello")
    fake_upstream.script("m-a", reply.status(429, retry_after=7))
    answer = _follow_up(other, first.id)
    assert answer.status_code == 429
    assert answer.headers["retry-after"] == "7"


def test_a_404_from_the_candidate_that_produced_it_is_passed_through(
    sdk: Callable[..., openai.OpenAI], hosts: list[AppServer], fake_upstream: FakeUpstream
) -> None:
    one, _ = hosts
    first = sdk(one).responses.create(model="group/ab", input="hello")
    fake_upstream.script("m-a", reply.status(404))
    assert _follow_up(one, first.id).status_code == 404
    assert [hit.model for hit in fake_upstream.hits[1:]] == ["m-a"]


def test_another_callers_response_id_gets_the_404_an_unknown_id_gets_and_reaches_no_provider(
    sdk: Callable[..., openai.OpenAI], hosts: list[AppServer], fake_upstream: FakeUpstream
) -> None:
    one, other = hosts
    first = sdk(one).responses.create(model="group/ab", input="hello")
    with pytest.raises(openai.NotFoundError) as raised:
        sdk(other, "team-b").responses.create(model="group/ab", input="hi", previous_response_id=first.id)
    assert raised.value.code == "previous_response_not_found"
    assert len(fake_upstream.hits) == 1


def test_this_process_remembers_at_most_responses_max_ids_the_least_recently_used_forgotten(
    sdk: Callable[..., openai.OpenAI],
    fake_upstream: FakeUpstream,
) -> None:
    router = ModelRouter(Starlette(), settings=_settings(fake_upstream, responses_max=2))
    with AppServer(router) as server:
        ids = [sdk(server).responses.create(model="group/ab", input="hello").id for _ in range(3)]
        # the first is forgotten: its follow-up runs the normal plan (beta first)
        assert _follow_up(server, ids[0]).headers["x-router-model"] == "beta/m-b"
        assert _follow_up(server, ids[2]).headers["x-router-model"] == "alpha/m-a"
