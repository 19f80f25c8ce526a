"""Anthropic clients on ``/v1/messages``: the official ``anthropic`` SDK through the router, over
real sockets. Groups on that route serve from Anthropic providers byte for byte, skip OpenAI
ones (``protocol_mismatch``), and every error the router makes there is Anthropic-shaped, the
in-band error of a stream that breaks after commit included, so the SDK raises."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anthropic as anthropic_sdk
import httpx2
import pytest

from asgi_router import ModelRouter

from .conftest import API_KEY, shared_routers
from .fake_anthropic import REQUEST_ID, TEXT, FakeAnthropic
from .mock_upstream import MockUpstream
from .resilient import recorded
from .servers import ServersByTransport, ServerThread

pytestmark = pytest.mark.anyio

_HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def routers(
    upstream: MockUpstream, refused_url: str, anthropic: FakeAnthropic
) -> Iterator[ServersByTransport[ModelRouter]]:
    timeouts = {"connect": 1, "first_byte": 2, "idle": 2, "total": 10}
    claude = anthropic.provider(timeouts=timeouts)
    providers = {"claude": claude, "pinned": {**claude, "anthropic_version": "2099-01-01"}}
    groups = {
        "claude": {"members": ["mock/ok", "claude/overloaded", "claude/ok"]},
        "dead": {"members": ["claude/overloaded", "down/x"]},
        "limited": {"members": ["claude/ratelimited-2"]},
        "openai-only": {"members": ["mock/ok"]},
        "refusing": {"members": ["claude/invalid", "claude/ok"]},
        "busy": {"members": ["claude/overloaded"], "degraded": {"content": "Busy, try again soon."}},
    }
    routes = ["/v1/chat/completions", "/v1/messages"]
    catalog = {"claude/ok": {"input_price": 3.0, "output_price": 15.0}}  # priced: its tokens are counted
    with shared_routers(
        upstream, refused_url, providers=providers, groups=groups, routes=routes, catalog=catalog
    ) as served:
        yield served


@pytest.fixture
async def client(server: ServerThread) -> AsyncIterator[anthropic_sdk.AsyncAnthropic]:
    """The official ``anthropic`` client on the router (it never retries: one call, one request)."""
    async with anthropic_sdk.AsyncAnthropic(base_url=server.url, api_key="client-key", max_retries=0) as sdk:
        yield sdk


async def test_a_group_on_the_messages_route_serves_claude_after_skipping_openai_and_failing_over(
    client: anthropic_sdk.AsyncAnthropic,
) -> None:
    raw = await client.messages.with_raw_response.create(model="group/claude", max_tokens=64, messages=_HI)
    message = await raw.parse()
    assert [block.text for block in message.content if block.type == "text"] == [TEXT]
    assert message.stop_reason == "end_turn"
    assert raw.headers["x-router-model"] == "claude/ok"
    assert raw.headers["x-router-attempts"] == "2"  # the OpenAI member was skipped, not tried


@pytest.mark.both_transports
async def test_a_streamed_answer_is_relayed_byte_for_byte(
    client: anthropic_sdk.AsyncAnthropic, server: ServerThread, anthropic: FakeAnthropic
) -> None:
    async with client.messages.stream(model="group/claude", max_tokens=64, messages=_HI) as stream:
        assert "".join([text async for text in stream.text_stream]) == TEXT
    body = {"model": "group/claude", "max_tokens": 64, "messages": _HI, "stream": True}
    headers = {"anthropic-version": "2023-06-01"}
    async with httpx2.AsyncClient() as http:
        response = await http.post(f"{server.url}/v1/messages", json=body, headers=headers)
    assert response.content == anthropic.answer({**body, "model": "ok"})  # what the fake sends


async def test_the_clients_anthropic_version_and_beta_reach_the_provider(
    client: anthropic_sdk.AsyncAnthropic, anthropic: FakeAnthropic
) -> None:
    await client.messages.create(
        model="pinned/ok",
        max_tokens=8,
        messages=_HI,
        extra_headers={
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "fine-grained-tool-streaming-2025-05-14",
            "x-request-id": "beta1",
        },
    )
    (received,) = anthropic.received("beta1")
    assert received.headers["anthropic-version"] == "2023-06-01"  # the client's, over the provider's pin
    assert received.headers["anthropic-beta"] == "fine-grained-tool-streaming-2025-05-14"
    assert received.headers["x-api-key"] == API_KEY  # the provider's key, never the client's
    assert received.body == {"model": "ok", "max_tokens": 8, "messages": _HI}


async def test_without_a_client_version_the_providers_pinned_one_is_sent(
    server: ServerThread, anthropic: FakeAnthropic
) -> None:
    async with httpx2.AsyncClient() as http:
        body = {"model": "pinned/ok", "max_tokens": 8, "messages": _HI}
        response = await http.post(f"{server.url}/v1/messages", json=body, headers={"x-request-id": "pin1"})
    assert response.status_code == 200
    assert anthropic.received("pin1")[0].headers["anthropic-version"] == "2099-01-01"


async def test_an_upstream_refusal_passes_through_as_anthropic_wrote_it(client: anthropic_sdk.AsyncAnthropic) -> None:
    with pytest.raises(anthropic_sdk.BadRequestError) as caught:
        await client.messages.create(model="group/refusing", max_tokens=8, messages=_HI)
    said = "messages.0.content: text content blocks must be non-empty"
    assert caught.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": said},
        "request_id": REQUEST_ID,
    }


def _error(caught: pytest.ExceptionInfo[anthropic_sdk.APIStatusError]) -> dict[str, Any]:
    body = caught.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    ("model", "raised", "kind"),
    [
        ("group/nope", anthropic_sdk.NotFoundError, "not_found_error"),
        ("claude", anthropic_sdk.BadRequestError, "invalid_request_error"),
        ("group/openai-only", anthropic_sdk.BadRequestError, "invalid_request_error"),
        ("group/dead", anthropic_sdk.InternalServerError, "api_error"),
        ("group/limited", anthropic_sdk.RateLimitError, "rate_limit_error"),
    ],
)
async def test_the_routers_own_errors_are_anthropic_shaped(
    client: anthropic_sdk.AsyncAnthropic, model: str, raised: type[anthropic_sdk.APIStatusError], kind: str
) -> None:
    with pytest.raises(raised) as caught:
        await client.messages.create(model=model, max_tokens=8, messages=_HI)
    error = _error(caught)
    assert error["type"] == kind
    assert API_KEY not in json.dumps(error)


async def test_an_exhausted_plan_lists_its_attempts_in_the_anthropic_error(
    client: anthropic_sdk.AsyncAnthropic,
) -> None:
    with pytest.raises(anthropic_sdk.InternalServerError) as caught:
        await client.messages.create(model="group/dead", max_tokens=8, messages=_HI)
    assert caught.value.status_code == 502
    error = _error(caught)
    assert error["message"] == (
        "claude/overloaded: upstream_5xx (529)\n"
        "down/x: protocol_mismatch (an OpenAI-protocol provider does not serve Anthropic's Messages API)"
    )
    assert [a["reason"] for a in error["attempts"]] == ["upstream_5xx", "protocol_mismatch"]


async def test_a_rate_limited_plan_keeps_its_retry_after(client: anthropic_sdk.AsyncAnthropic) -> None:
    with pytest.raises(anthropic_sdk.RateLimitError) as caught:
        await client.messages.create(model="group/limited", max_tokens=8, messages=_HI)
    assert caught.value.response.headers["retry-after"] == "2"


async def test_an_openai_only_plan_on_the_messages_route_is_a_400_saying_why(
    client: anthropic_sdk.AsyncAnthropic,
) -> None:
    with pytest.raises(anthropic_sdk.BadRequestError) as caught:
        await client.messages.create(model="group/openai-only", max_tokens=8, messages=_HI)
    assert _error(caught)["message"] == (
        "mock/ok: protocol_mismatch (an OpenAI-protocol provider does not serve Anthropic's Messages API)"
    )


@pytest.mark.both_transports
async def test_the_anthropic_sdk_raises_on_a_stream_that_breaks_after_commit(
    client: anthropic_sdk.AsyncAnthropic,
) -> None:
    received: list[str] = []
    with pytest.raises(anthropic_sdk.APIStatusError) as caught:
        async with client.messages.stream(model="claude/break-6", max_tokens=64, messages=_HI) as stream:
            async for text in stream.text_stream:
                received.append(text)
    assert received == ["Hello", " from", " break-6"]  # what was relayed before the break, nothing after
    error = _error(caught)
    assert error["type"] == "api_error"
    assert error["message"].startswith("claude/break-6: stream_interrupted")
    assert "incomplete" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_groups_canned_reply_is_a_message_on_the_messages_route(
    client: anthropic_sdk.AsyncAnthropic, stream: bool
) -> None:
    if stream:
        async with client.messages.stream(model="group/busy", max_tokens=8, messages=_HI) as events:
            text = "".join([piece async for piece in events.text_stream])
    else:
        message = await client.messages.create(model="group/busy", max_tokens=8, messages=_HI)
        text = "".join(block.text for block in message.content if block.type == "text")
    assert text == "Busy, try again soon."


async def test_an_inbound_key_refusal_is_anthropic_shaped(upstream: MockUpstream, anthropic: FakeAnthropic) -> None:
    providers = {"claude": anthropic.provider()}
    with shared_routers(
        upstream, providers=providers, routes=["/v1/messages"], api_keys=["inbound-key-0123456789abcdef"]
    ) as routers:
        _, server = routers("aiohttp")
        async with anthropic_sdk.AsyncAnthropic(base_url=server.url, api_key="wrong-key", max_retries=0) as sdk:
            with pytest.raises(anthropic_sdk.AuthenticationError) as caught:
                await sdk.messages.create(model="claude/ok", max_tokens=8, messages=_HI)
    assert _error(caught)["type"] == "authentication_error"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ["/v1/chat/completions", "/v1/messages"])
async def test_an_answer_counts_the_tokens_anthropic_reported_translated_or_relayed(
    routers: ServersByTransport[ModelRouter], transport_kind: str, route: str, stream: bool
) -> None:
    router, server = routers(transport_kind)
    request_id = f"usage-{route.rsplit('/', 1)[-1]}-{stream}"
    async with httpx2.AsyncClient() as client:
        body = {"model": "claude/ok", "max_tokens": 8, "messages": _HI, "stream": stream}
        response = await client.post(server.url + route, json=body, headers={"x-request-id": request_id})
    assert response.status_code == 200
    record = await recorded(router, request_id)
    # A relayed stream's usage is read afterwards from what was sent: message_start says the
    # input, the final message_delta the output; a translated one's comes from its translation.
    assert (record.prompt_tokens, record.completion_tokens) == (11, 7)
    assert record.cost_usd == pytest.approx((11 * 3.0 + 7 * 15.0) / 1e6)


async def test_token_counting_is_refused_with_an_anthropic_not_found_error_that_says_so(
    client: anthropic_sdk.AsyncAnthropic, anthropic: FakeAnthropic
) -> None:
    before = len(anthropic.hits)
    with pytest.raises(anthropic_sdk.NotFoundError) as refused:
        await client.messages.count_tokens(model="group/claude", messages=_HI)
    assert refused.value.status_code == 404
    assert refused.value.body == {
        "type": "error",
        "error": {
            "type": "not_found_error",
            "message": "token counting (POST .../messages/count_tokens) is not supported by this gateway: it "
            "routes messages only; count tokens with the provider's own API",
        },
    }
    assert len(anthropic.hits) == before  # nothing went upstream
