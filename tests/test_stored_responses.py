"""A stored response's own calls (retrieve, delete, input items, cancel) go to the provider that
produced it, for the caller that made it only. Clients: the official ``openai`` SDK and httpx;
upstreams: two of the kit's fakes (each holds only what it produced), over real sockets; a fleet's
two routers share one real redis-server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any, NamedTuple

import httpx2
import openai
import pytest
from openai.types.responses import Response
from starlette.applications import Starlette

from asgi_router import ModelRouter, RouterSettings
from asgi_router.fleet.shared_state import SharedState
from asgi_router.testing import AppServer, FakeUpstream, Hit, reply
from asgi_router.testing.reply import Reply

from .fleet import RedisServer
from .waiting import polled

_KEYS = {"team-a": "team-a-key-0123456789abcdef", "team-b": "team-b-key-0123456789abcdef"}


@pytest.fixture(scope="module")
def second() -> Iterator[FakeUpstream]:
    """A second OpenAI fake: provider ``beta``'s, which holds only what it produced."""
    with FakeUpstream() as fake:
        yield fake


@pytest.fixture
def beta(second: FakeUpstream) -> FakeUpstream:
    second.reset()
    return second


def _settings(alpha: FakeUpstream, beta: FakeUpstream, **overrides: Any) -> RouterSettings:
    """``alpha`` and ``beta`` on their own fakes; group ``ab`` tries alpha first."""
    return RouterSettings(
        providers={"alpha": alpha.provider(), "beta": beta.provider()},
        groups={"ab": {"members": ["alpha/m-a", "beta/m-b"]}},
        api_keys=_KEYS,
        metrics_route="/metrics",
        **overrides,
    )


@pytest.fixture
def sdk(openai_clients: Callable[[str, str], openai.OpenAI]) -> Callable[..., openai.OpenAI]:
    """The openai SDK on a served router as ``caller``."""

    def make(server: AppServer, caller: str = "team-a") -> openai.OpenAI:
        return openai_clients(server.url, _KEYS[caller])

    return make


def _served_by_beta(sdk: Callable[..., openai.OpenAI], server: AppServer, alpha: FakeUpstream) -> Response:
    """A response of group ``ab`` that alpha refused and beta produced."""
    alpha.script("m-a", reply.status(503))
    created = sdk(server).responses.create(model="group/ab", input="hello there")
    assert created.output_text == "Hello from m-b"
    alpha.reset()
    return created


class Produced(NamedTuple):
    router: ModelRouter
    server: AppServer
    response: Response


@pytest.fixture
def produced(sdk: Callable[..., openai.OpenAI], fake_upstream: FakeUpstream, beta: FakeUpstream) -> Iterator[Produced]:
    """A served router on alpha and beta, and a response beta produced (the fakes' hits reset)."""
    router = ModelRouter(Starlette(), settings=_settings(fake_upstream, beta))
    with AppServer(router) as server:
        created = _served_by_beta(sdk, server, fake_upstream)
        beta.reset()
        yield Produced(router, server, created)


def _paths(fake: FakeUpstream) -> list[tuple[str, str, str]]:
    return [(hit.method, hit.path, hit.query) for hit in fake.hits]


@pytest.mark.both_transports
def test_retrieve_input_items_cancel_and_delete_reach_the_provider_that_produced_the_response(
    sdk: Callable[..., openai.OpenAI],
    produced: Produced,
    fake_upstream: FakeUpstream,
    beta: FakeUpstream,
    transport_kind: str,
) -> None:
    router, server, created = produced
    client = sdk(server)
    retrieved = client.responses.with_raw_response.retrieve(created.id)
    assert retrieved.parse().id == created.id
    assert retrieved.parse().output_text == "Hello from m-b"
    assert retrieved.headers["x-router-model"] == "beta/m-b"
    items = client.responses.input_items.list(created.id, order="asc", limit=5)
    assert [item.content[0].text for item in items.data] == ["hello there"]  # type: ignore[union-attr]
    cancelled = client.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    client.responses.delete(created.id)

    route = f"/v1/responses/{created.id}"
    assert _paths(beta) == [
        ("GET", route, ""),
        ("GET", f"{route}/input_items", "limit=5&order=asc"),
        ("POST", f"{route}/cancel", ""),
        ("DELETE", route, ""),
    ]
    assert fake_upstream.hits == []  # alpha, first in the group, never asked
    assert {hit.headers["authorization"] for hit in beta.hits} == {f"Bearer {beta.api_key}"}
    assert created.id not in beta.stored
    # Deleted: the router forgot it, and answers the 404 itself.
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    assert len(beta.hits) == 4
    records = [record for record in router.recent.snapshot() if record.winner == "beta/m-b"]
    assert [record.status for record in records[-4:]] == [200, 200, 200, 200]
    assert records[-1].prompt_tokens is None and records[-1].cost_usd is None  # no spend
    scraped = httpx2.get(f"{server.url}/metrics", headers={"authorization": f"Bearer {_KEYS['team-a']}"}).text
    for call in ("{id}", "{id}/input_items", "{id}/cancel"):
        assert f'asgi_router_requests_total{{path="/v1/responses/{call}",status="200"}}' in scraped
    assert 'asgi_router_requests_total{path="/v1/responses/{id}",status="404"} 1.0' in scraped
    assert created.id not in scraped  # the id is never a label


def test_a_call_carries_the_members_fixed_query_and_headers_then_the_clients_query(
    sdk: Callable[..., openai.OpenAI], fake_upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    settings = _settings(fake_upstream, beta)
    settings.providers["beta"] = settings.providers["beta"].model_copy(
        update={"query": {"api-version": "2025-01"}, "headers": {"x-tenant": "blue"}}
    )
    router = ModelRouter(Starlette(), settings=settings)
    with AppServer(router) as server:
        created = _served_by_beta(sdk, server, fake_upstream)
        beta.reset()
        sdk(server).responses.input_items.list(created.id, after="msg_in_0", limit=2)
        (hit,) = beta.hits
        assert hit.path == f"/v1/responses/{created.id}/input_items"
        assert hit.query == "api-version=2025-01&after=msg_in_0&limit=2"
        assert hit.headers["x-tenant"] == "blue"
        assert hit.body is None


def test_another_callers_id_and_an_unknown_id_get_the_same_404_in_openais_words_and_reach_no_provider(
    sdk: Callable[..., openai.OpenAI], produced: Produced, fake_upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    _, server, created = produced
    with pytest.raises(openai.NotFoundError) as raised:
        sdk(server, "team-b").responses.retrieve(created.id)
    assert raised.value.body == {
        "message": f"Response with id '{created.id}' not found.",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    with pytest.raises(openai.NotFoundError):
        sdk(server, "team-b").responses.delete(created.id)
    headers = {"authorization": f"Bearer {_KEYS['team-a']}"}
    unknown = httpx2.get(f"{server.url}/v1/responses/resp_never_relayed/input_items", headers=headers)
    assert unknown.status_code == 404
    assert unknown.json()["error"]["message"] == "Response with id 'resp_never_relayed' not found."
    assert beta.hits == [] and fake_upstream.hits == []
    # the owner still reaches it: team-b's delete did not forget it
    assert sdk(server).responses.retrieve(created.id).id == created.id


@pytest.mark.both_transports
def test_a_call_whose_producing_provider_is_down_gets_503_naming_the_candidate(
    sdk: Callable[..., openai.OpenAI], fake_upstream: FakeUpstream, transport_kind: str
) -> None:
    with ExitStack() as stack:
        gone = stack.enter_context(FakeUpstream())
        router = ModelRouter(Starlette(), settings=_settings(fake_upstream, gone, breaker={"enabled": False}))
        server = stack.enter_context(AppServer(router))
        created = _served_by_beta(sdk, server, fake_upstream)
        gone.stop()
        with pytest.raises(openai.InternalServerError) as raised:
            sdk(server).responses.retrieve(created.id)
        assert raised.value.status_code == 503
        error = raised.value.body
        assert isinstance(error, dict) and error["code"] == "previous_response_unavailable"
        assert "beta/m-b" in error["message"] and "connect_error" in error["message"]
        assert gone.api_key not in str(error) and fake_upstream.hits == []


def test_a_call_whose_producing_providers_breaker_is_open_gets_503_and_no_connection(
    produced: Produced, beta: FakeUpstream
) -> None:
    router, server, created = produced
    router.state.trip("beta", router.settings.breaker, time.monotonic())
    answer = httpx2.get(
        f"{server.url}/v1/responses/{created.id}", headers={"authorization": f"Bearer {_KEYS['team-a']}"}
    )
    assert answer.status_code == 503
    assert answer.json()["error"]["attempts"] == [{"candidate": "beta/m-b", "reason": "circuit_open", "status": None}]
    assert beta.hits == []


def test_an_upstream_404_for_a_known_id_is_passed_through(
    sdk: Callable[..., openai.OpenAI], produced: Produced, beta: FakeUpstream
) -> None:
    _, server, created = produced
    beta.forget(created.id)  # the provider's copy expired: its own 404 reaches the client
    with pytest.raises(openai.NotFoundError) as raised:
        sdk(server).responses.retrieve(created.id)
    assert raised.value.response.headers["x-router-model"] == "beta/m-b"
    assert [hit.method for hit in beta.hits] == ["GET"]


def test_a_virtual_key_reaches_what_its_caller_made_and_once_revoked_gets_401(
    openai_clients: Callable[[str, str], openai.OpenAI], fake_upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    admin_key = "admin-key-0123456789abcdef"
    settings = _settings(fake_upstream, beta, admin_keys=[admin_key], ledger_url="memory://")
    router = ModelRouter(Starlette(), settings=settings)
    with AppServer(router) as server:
        admin = {"authorization": f"Bearer {admin_key}"}

        def issued(caller: str) -> dict[str, Any]:
            made = httpx2.post(f"{server.url}/admin/keys", json={"caller": caller}, headers=admin)
            assert made.status_code == 201, made.text
            key: dict[str, Any] = made.json()
            return key

        key, other = issued("team-v"), issued("team-w")
        fake_upstream.script("m-a", reply.status(503))
        created = openai_clients(server.url, key["secret"]).responses.create(model="group/ab", input="hi")
        assert openai_clients(server.url, key["secret"]).responses.retrieve(created.id).id == created.id
        assert router.recent.snapshot()[-1].key_id == key["id"]
        with pytest.raises(openai.NotFoundError):
            openai_clients(server.url, other["secret"]).responses.retrieve(created.id)
        assert httpx2.delete(f"{server.url}/admin/keys/{key['id']}", headers=admin).status_code == 204
        with pytest.raises(openai.AuthenticationError):
            openai_clients(server.url, key["secret"]).responses.retrieve(created.id)
        assert [hit.method for hit in beta.hits] == ["POST", "GET"]


class _Replaying(FakeUpstream):
    """A fake that replays a stored response's events on ``GET .../responses/{id}?stream=true``."""

    def reply_for(self, hit: Hit) -> Reply:
        if hit.method == "GET" and "stream=true" in hit.query:
            held = self.stored[hit.path.rsplit("/", 1)[1]]
            events = [
                {"type": "response.created", "sequence_number": 0, "response": {**held, "status": "in_progress"}},
                {"type": "response.completed", "sequence_number": 1, "response": held},
            ]
            body = b"".join(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events)
            return reply.status(200, body=body, headers={"content-type": "text/event-stream"})
        return super().reply_for(hit)


@pytest.mark.both_transports
def test_a_retrieve_that_asks_for_a_stream_gets_the_providers_events_relayed(
    sdk: Callable[..., openai.OpenAI], fake_upstream: FakeUpstream, transport_kind: str
) -> None:
    with _Replaying() as replaying:
        router = ModelRouter(Starlette(), settings=_settings(fake_upstream, replaying))
        with AppServer(router) as server:
            created = _served_by_beta(sdk, server, fake_upstream)
            with sdk(server).responses.retrieve(created.id, stream=True) as events:
                seen = [(event.type, event.sequence_number) for event in events]
            assert seen == [("response.created", 0), ("response.completed", 1)]
            assert replaying.hits[-1].query == "stream=true"


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1/responses/resp_1/steps", 404, "unknown_url"),
        ("GET", "/v1/responses/", 404, "unknown_url"),
        ("GET", "/v1/responses/resp_1/", 404, "unknown_url"),
        ("POST", "/v1/responses/resp_1", 405, "method_not_allowed"),
        ("PUT", "/v1/responses/resp_1/cancel", 405, "method_not_allowed"),
        ("DELETE", "/v1/responses/resp_1/input_items", 405, "method_not_allowed"),
    ],
)
def test_other_paths_and_methods_below_the_route_get_the_routers_own_error_in_openais_shape(
    fake_upstream: FakeUpstream, beta: FakeUpstream, method: str, path: str, status: int, code: str
) -> None:
    router = ModelRouter(Starlette(), settings=_settings(fake_upstream, beta))
    with AppServer(router) as server:
        answer = httpx2.request(method, server.url + path, headers={"authorization": f"Bearer {_KEYS['team-a']}"})
        assert answer.status_code == status
        assert answer.json()["error"]["code"] == code
        if status == 405:
            assert answer.headers["allow"] in ("GET, DELETE", "POST", "GET")
        refused = httpx2.request(method, server.url + path)  # inbound auth first, as on the route
        assert refused.status_code == 401
    assert beta.hits == [] and fake_upstream.hits == []


@pytest.mark.fleet
def test_a_retrieve_on_another_host_reaches_the_producing_provider_and_a_delete_there_is_forgotten_fleet_wide(
    sdk: Callable[..., openai.OpenAI], redis_server: RedisServer, fake_upstream: FakeUpstream, beta: FakeUpstream
) -> None:
    prefix = f"stored{time.monotonic_ns()}"
    with ExitStack() as stack:
        servers = []
        for _ in range(2):
            settings = _settings(fake_upstream, beta, state_url=redis_server.url, state_key_prefix=prefix)
            router = ModelRouter(Starlette(), settings=settings)
            servers.append(stack.enter_context(AppServer(router)))
            state = router.state
            assert isinstance(state, SharedState)
            polled(lambda state=state: state.link.up, within=10, what="the store connection")
        one, other = servers
        created = _served_by_beta(sdk, one, fake_upstream)
        polled(lambda: _known(other, created.id), within=5, what="the id in the fleet's store")
        beta.reset()
        assert sdk(other).responses.retrieve(created.id).output_text == "Hello from m-b"
        sdk(other).responses.delete(created.id)
        assert [hit.method for hit in beta.hits] == ["GET", "DELETE"]
        with pytest.raises(openai.NotFoundError):
            sdk(one).responses.retrieve(created.id)
        assert len(beta.hits) == 2 and fake_upstream.hits == []


def _known(server: AppServer, response_id: str) -> bool:
    """Whether ``server`` sends a call about ``response_id`` upstream (a 404 from the router
    itself carries no ``x-router-model``)."""
    answer = httpx2.get(
        f"{server.url}/v1/responses/{response_id}/input_items",
        headers={"authorization": f"Bearer {_KEYS['team-a']}"},
    )
    return "x-router-model" in answer.headers
