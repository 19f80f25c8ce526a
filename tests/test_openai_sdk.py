"""The official ``openai`` SDK as a real client, over real sockets: what users will run."""

from __future__ import annotations

from collections.abc import Iterator

import httpx2
import openai
import pytest

from asgi_router import ModelRouter

from .conftest import API_KEY, shared_routers
from .mock_upstream import MockUpstream
from .resilient import FAST_BACKOFF, tag
from .servers import ServersByTransport, ServerThread

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def routers(upstream: MockUpstream, refused_url: str) -> Iterator[ServersByTransport[ModelRouter]]:
    groups = {
        "coder": {"members": ["down/x", "mock/status-503", "mock2/ok"]},
        "broken": {"members": ["mock/break-2", "mock2/ok"]},
        "limited": {"members": ["mock/status-429-ra2", "mock2/status-429-ra5"]},
        "dead": {"members": ["down/a", "mock/status-500"]},
        "overflow": {"members": ["mock/ctx-exceeded", "mock2/ctx-anthropic"]},
        "ids": {"members": ["mock/status-503-rid1", "mock2/rid-winner"]},
        "refused": {"members": ["mock/status-400-ridrefuser", "mock2/rid-never"]},
    }
    with shared_routers(upstream, refused_url, backoff=FAST_BACKOFF, groups=groups) as served:
        yield served


async def test_sdk_non_streaming_completion_through_a_failing_over_group(sdk: openai.AsyncOpenAI) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(
        model="group/coder", messages=[{"role": "user", "content": "hi"}]
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "hello from ok"
    assert raw.headers["x-router-model"] == "mock2/ok"
    assert raw.headers["x-router-attempts"] == "3"


@pytest.mark.both_transports
async def test_sdk_streaming_completion_yields_every_delta(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.chat.completions.create(
        model="group/coder", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    parts = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices[0].delta.content]
    assert "".join(parts) == "Hello from ok"


@pytest.mark.both_transports
async def test_sdk_raises_api_error_on_a_stream_broken_after_commit(sdk: openai.AsyncOpenAI) -> None:
    stream = await sdk.chat.completions.create(
        model="group/broken", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    received: list[str] = []
    with pytest.raises(openai.APIError) as caught:
        async for chunk in stream:
            received.append(chunk.choices[0].delta.content or "")
    # what was relayed before the break (the opening role chunk and one word), nothing spliced after
    assert received == ["", "Hello"]
    assert "stream_interrupted" in caught.value.message
    assert "incomplete" in caught.value.message


async def test_sdk_sees_429_as_rate_limit_error_with_retry_after(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.RateLimitError) as caught:
        await sdk.chat.completions.create(model="group/limited", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.response.headers["retry-after"] == "2"
    assert caught.value.code == "rate_limit_exceeded"


async def test_sdk_sees_exhausted_plan_as_502_with_each_attempt(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        await sdk.chat.completions.create(model="group/dead", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 502
    assert caught.value.message == "Error code: 502 - down/a: connect_error\nmock/status-500: upstream_5xx (500)"
    assert isinstance(caught.value.body, dict)
    assert [a["reason"] for a in caught.value.body["attempts"]] == ["connect_error", "upstream_5xx"]
    assert API_KEY not in str(caught.value.body)


@pytest.mark.parametrize(
    ("model", "error", "code"),
    [
        ("gpt-4o", openai.BadRequestError, "invalid_model_reference"),
        ("group/", openai.BadRequestError, "invalid_model_reference"),
        ("group/nope", openai.NotFoundError, "model_not_found"),
        ("nope/gpt-4o", openai.NotFoundError, "model_not_found"),
    ],
)
async def test_sdk_gets_openai_shaped_errors_for_bad_model_refs(
    sdk: openai.AsyncOpenAI, model: str, error: type[openai.APIStatusError], code: str
) -> None:
    with pytest.raises(error) as caught:
        await sdk.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.code == code
    assert caught.value.type == "invalid_request_error"


_OPENAI_OVERFLOW = (
    "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."
    " Please reduce the length of the messages."
)


@pytest.mark.parametrize(
    ("model", "words", "lines"),
    [
        ("mock/ctx-exceeded", _OPENAI_OVERFLOW, ["mock/ctx-exceeded: context_window (400)"]),
        (
            "group/overflow",
            "prompt is too long: 210000 tokens > 200000 maximum",  # the last provider's words
            ["mock/ctx-exceeded: context_window (400)", "mock2/ctx-anthropic: context_window (400)"],
        ),
    ],
)
async def test_sdk_sees_an_overflow_on_every_candidate_as_a_400_that_starts_with_the_providers_words(
    sdk: openai.AsyncOpenAI, model: str, words: str, lines: list[str]
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 400
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.type == "invalid_request_error"
    # What clients match an overflow on (litellm: the SDK error's text) starts with the provider's words.
    assert caught.value.message.startswith(f"Error code: 400 - {words}")
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["message"].splitlines() == [words, *lines]


async def _retry_soon(response: httpx2.Response) -> None:
    """Let the SDK retry after 10 ms (it honours ``retry-after-ms``) rather than its own backoff
    of 0.5 s, then 1 s: how long it waits is not what the test is about."""
    response.headers["retry-after-ms"] = "10"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_an_sdk_that_retries_on_its_own_is_not_multiplied_by_the_routers_retries(
    server: ServerThread, upstream: MockUpstream, stream: bool
) -> None:
    # The SDK sends x-stainless-retry-count on every try: it retries, so the router does not retry
    # in place as well (3 SDK tries x 3 router tries was 9 upstream calls for one request).
    model = f"status-503-{tag()}"  # its own hit counter at the mock
    async with (
        httpx2.AsyncClient(event_hooks={"response": [_retry_soon]}) as http,
        openai.AsyncOpenAI(
            base_url=f"{server.url}/v1", api_key="client-key", max_retries=2, http_client=http
        ) as client,
    ):
        with pytest.raises(openai.InternalServerError) as caught:
            await client.chat.completions.create(
                model=f"mock/{model}", messages=[{"role": "user", "content": "hi"}], stream=stream
            )
    assert caught.value.status_code == 502
    assert upstream.count(model) == 3  # one per SDK try
    assert caught.value.response.headers["x-router-attempts"] == "1"


async def test_a_client_that_does_not_say_it_retries_still_gets_the_routers_retries(
    server: ServerThread, upstream: MockUpstream
) -> None:
    model = f"status-503-{tag()}"
    async with httpx2.AsyncClient(base_url=server.url, timeout=10) as client:
        response = await client.post(
            "/v1/chat/completions", json={"model": f"mock/{model}", "messages": [{"role": "user", "content": "hi"}]}
        )
    assert response.status_code == 502
    assert upstream.count(model) == 3  # the first try and the default 2 retries in place
    assert response.headers["x-router-attempts"] == "3"


# --- the provider's own request id -------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_the_winners_own_request_id_is_sent_as_x_upstream_request_id(
    sdk: openai.AsyncOpenAI, stream: bool
) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(
        model="group/ids", messages=[{"role": "user", "content": "hi"}], stream=stream, extra_headers=_CLIENT_ID
    )
    assert raw.headers["x-router-model"] == "mock2/rid-winner"
    assert raw.headers.get_list("x-upstream-request-id") == ["req_winner"]  # not the failed candidate's
    assert raw.headers.get_list("x-request-id") == ["client-id-1"]  # the router's id stays the client's


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_passed_through_refusal_carries_the_refusing_providers_request_id(
    sdk: openai.AsyncOpenAI, stream: bool
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk.chat.completions.create(
            model="group/refused", messages=[{"role": "user", "content": "hi"}], stream=stream, extra_headers=_CLIENT_ID
        )
    headers = caught.value.response.headers
    assert headers["x-router-model"] == "mock/status-400-ridrefuser"
    assert headers.get_list("x-upstream-request-id") == ["req_refuser"]
    assert headers.get_list("x-request-id") == ["client-id-1"]


@pytest.mark.parametrize(
    ("model", "upstream_id"),
    [("mock/anthrid-abc", ["req_abc"]), ("mock/badrid", []), ("mock/ok", [])],
    ids=["anthropic-request-id", "not-a-sane-token", "none-sent"],
)
async def test_x_upstream_request_id_is_anthropics_request_id_too_and_only_ever_a_sane_token(
    sdk: openai.AsyncOpenAI, model: str, upstream_id: list[str]
) -> None:
    raw = await sdk.chat.completions.with_raw_response.create(model=model, messages=[{"role": "user", "content": "hi"}])
    assert raw.headers.get_list("x-upstream-request-id") == upstream_id


_CLIENT_ID = {"x-request-id": "client-id-1"}
