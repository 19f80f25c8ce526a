"""The Responses API route (``/v1/responses``, a default route) through the router, with the
official ``openai`` SDK as the client and the test kit's native Responses fake as the upstream:
its first-event commit and failover, its in-band errors and its end, its usage."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import openai
import pytest
from starlette.applications import Starlette

from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import AppServer, CapturedEvents, FakeUpstream, reply

from .calculator_agent import run_calculator_agent, script_tool_round_trip
from .waiting import polled

_GROUP = {"members": ["first/gpt-4o", "second/gpt-4o-mini"]}
_TEAM_A = "team-a-key-0123456789abcdef"


@pytest.fixture
def served(fake_upstream: FakeUpstream) -> Iterator[tuple[AppServer, CapturedEvents, ModelRouter]]:
    """A router with two providers on the fake (a group failing over from the first to the
    second), on its default routes, served on loopback."""
    captured = CapturedEvents()
    settings = RouterSettings(
        providers={"first": fake_upstream.provider(), "second": fake_upstream.provider()},
        groups={"agents": _GROUP},
        breaker={"enabled": False},
        allow_unauthenticated=True,
    )
    router = ModelRouter(Starlette(), settings=settings, sinks=[captured])
    with AppServer(router) as server:
        yield server, captured, router


@pytest.fixture
def sdk(openai_clients: Callable[[str, str], openai.OpenAI]) -> Callable[[AppServer], openai.OpenAI]:
    """The openai SDK on a served router (conftest's ``openai_clients``: closed when the test ends)."""

    def make(server: AppServer) -> openai.OpenAI:
        return openai_clients(server.url, "client-key")

    return make


def _events(raw: bytes) -> list[tuple[str, bytes]]:
    found = []
    for block in raw.split(b"\n\n"):
        lines = dict(line.split(b": ", 1) for line in block.split(b"\n") if b": " in line)
        if b"data" in lines:
            found.append((lines.get(b"event", b"").decode(), lines[b"data"]))
    return found


def test_responses_is_a_default_route_answered_whole_through_failover(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
) -> None:
    server, captured, _ = served
    fake_upstream.script("gpt-4o", reply.status(503))
    raw = sdk(server).responses.with_raw_response.create(model="group/agents", input="say hello")
    response = raw.parse()
    assert response.output_text == "Hello from gpt-4o-mini"
    assert raw.headers["x-router-model"] == "second/gpt-4o-mini"
    assert [hit.path for hit in fake_upstream.hits] == ["/v1/responses", "/v1/responses"]
    assert captured.attempts(raw.headers["x-request-id"]) == [
        ("first/gpt-4o", "failed", "upstream_5xx"),
        ("second/gpt-4o-mini", "served", "served"),
    ]


def test_responses_stream_accumulates_in_the_sdks_helper(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
) -> None:
    server, _, _ = served
    with sdk(server).responses.stream(model="first/gpt-4o", input="say hello") as stream:
        deltas = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "Hello from gpt-4o"
    assert final.output_text == "Hello from gpt-4o"
    assert final.status == "completed"


def test_a_function_tool_round_trip_goes_through_the_responses_route(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
) -> None:
    server, _, _ = served
    fake_upstream.script(
        "gpt-4o", reply.tool_call("get_weather", {"city": "Paris"}, id="call_1"), reply.ok("It is sunny in Paris.")
    )
    tools: list[Any] = [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
            "strict": True,
        }
    ]
    sdk = sdk(server)
    with sdk.responses.stream(model="first/gpt-4o", input="weather in Paris?", tools=tools) as stream:
        asked = stream.get_final_response()
    call = next(item for item in asked.output if item.type == "function_call")
    assert (call.name, call.arguments, call.call_id) == ("get_weather", '{"city": "Paris"}', "call_1")
    answer = sdk.responses.create(
        model="first/gpt-4o",
        input=[
            {"role": "user", "content": "weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": call.arguments},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
        tools=tools,
    )
    assert answer.output_text == "It is sunny in Paris."
    assert fake_upstream.hits[-1].body["input"][-1] == {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "sunny",
    }


@pytest.mark.parametrize(
    ("code", "reason"),
    [(429, "rate_limited"), (500, "upstream_5xx"), (503, "upstream_5xx")],
)
def test_a_first_real_event_that_is_response_failed_fails_over_as_what_it_names(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
    code: int,
    reason: str,
) -> None:
    server, captured, _ = served
    # response.created and response.in_progress are held; then the stream says it failed.
    fake_upstream.script("gpt-4o", reply.stream_error(2, code))
    with sdk(server).responses.stream(model="group/agents", input="say hello") as stream:
        final = stream.get_final_response()
    assert final.output_text == "Hello from gpt-4o-mini"
    record = polled(lambda: captured.records[-1] if captured.records else None, what="the request's record")
    assert captured.attempts(record.request_id) == [
        ("first/gpt-4o", "failed", reason),
        ("second/gpt-4o-mini", "served", "served"),
    ]


def test_invalid_prompt_as_the_first_real_event_is_passed_through_as_the_clients_400(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
) -> None:
    server, _, _ = served
    fake_upstream.script("gpt-4o", reply.stream_error(2, 400, "the prompt was flagged"))
    with pytest.raises(openai.BadRequestError) as caught:
        with sdk(server).responses.stream(model="group/agents", input="say hello") as stream:
            stream.get_final_response()
    assert caught.value.code == "invalid_prompt"
    assert [hit.model for hit in fake_upstream.hits] == ["gpt-4o"]  # no failover


def test_a_whole_answer_with_status_failed_fails_over(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
) -> None:
    server, captured, _ = served
    failed = {
        "id": "resp_x",
        "object": "response",
        "status": "failed",
        "error": {"code": "server_error", "message": "boom"},
    }
    fake_upstream.script("gpt-4o", reply.status(200, body=failed))
    raw = sdk(server).responses.with_raw_response.create(model="group/agents", input="say hello")
    assert raw.parse().output_text == "Hello from gpt-4o-mini"
    assert captured.attempts(raw.headers["x-request-id"])[0] == ("first/gpt-4o", "failed", "upstream_5xx")


def test_a_committed_stream_that_ends_before_response_completed_ends_with_the_streams_own_error(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
) -> None:
    server, captured, _ = served
    fake_upstream.script("gpt-4o", reply.broken_stream(5))
    answer = httpx2.post(
        f"{server.url}/v1/responses", json={"model": "first/gpt-4o", "input": "hi", "stream": True}, timeout=5
    )
    events = _events(answer.content)
    assert [kind for kind, _ in events[-2:]] == ["error", "response.failed"]
    assert b'"code":"stream_interrupted"' in events[-1][1]
    created = events[0][1]
    assert b'"id":"resp_fake_' in created
    assert created.split(b'"id":"', 1)[1][:12] in events[-1][1]  # the stream's own response id
    record = captured.wait(answer.headers["x-request-id"])
    assert record.events[-1].reason == "stream_interrupted"
    with pytest.raises(openai.APIError):
        with sdk(server).responses.stream(model="first/gpt-4o", input="hi") as stream:
            stream.get_final_response()


def test_a_whole_responses_stream_is_served_with_nothing_added(
    served: tuple[AppServer, CapturedEvents, ModelRouter], fake_upstream: FakeUpstream
) -> None:
    server, captured, _ = served
    answer = httpx2.post(
        f"{server.url}/v1/responses", json={"model": "first/gpt-4o", "input": "hi", "stream": True}, timeout=5
    )
    events = _events(answer.content)
    assert events[-1][0] == "response.completed"
    assert [kind for kind, _ in events].count("error") == 0
    record = captured.wait(answer.headers["x-request-id"])
    assert (record.status, record.events[-1].reason) == (200, "served")


@pytest.mark.parametrize("stream", [False, True])
def test_responses_usage_reaches_the_record_the_metrics_and_a_callers_cap(
    fake_upstream: FakeUpstream, stream: bool
) -> None:
    usage = {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 7, "total_tokens": 18}
    fake_upstream.script("gpt-4o", reply.ok("three words here", usage=usage))
    captured = CapturedEvents()
    settings = RouterSettings(
        providers={"first": fake_upstream.provider()},
        api_keys={"team-a": _TEAM_A},
        callers={"team-a": {"tokens_per_day": 15}},
        metrics_route="/metrics",
    )
    headers = {"authorization": f"Bearer {_TEAM_A}"}
    body = {"model": "first/gpt-4o", "input": "hi", "stream": stream}
    with AppServer(ModelRouter(Starlette(), settings=settings, sinks=[captured])) as server:
        answer = httpx2.post(f"{server.url}/v1/responses", json=body, headers=headers, timeout=5)
        assert answer.status_code == 200
        record = captured.wait(answer.headers["x-request-id"])
        assert (record.prompt_tokens, record.completion_tokens, record.tokens_measured) == (11, 7, True)
        scraped = httpx2.get(f"{server.url}/metrics", headers=headers, timeout=5).text
        assert 'asgi_router_tokens_total{candidate="first/*",kind="prompt"} 11.0' in scraped
        assert 'asgi_router_tokens_total{candidate="first/*",kind="completion"} 7.0' in scraped
        refused = httpx2.post(f"{server.url}/v1/responses", json=body, headers=headers, timeout=5)
    assert refused.status_code == 429  # 18 tokens spent, over 15: the cap is reached
    assert refused.json()["error"]["code"] == "caller_limit_reached"


@pytest.mark.anyio
@pytest.mark.parametrize("native_fails", [False, True])
async def test_an_openai_agent_runs_a_function_tool_through_the_responses_route(
    served: tuple[AppServer, CapturedEvents, ModelRouter], fake_upstream: FakeUpstream, native_fails: bool
) -> None:
    server = served[0]
    if native_fails:
        fake_upstream.script("gpt-4o", reply.status(503))
    answering = "gpt-4o-mini" if native_fails else "gpt-4o"
    script_tool_round_trip(fake_upstream, answering)
    assert await run_calculator_agent(server.url, "group/agents") == ("2 + 3 = 5", [(2, 3)])
    asked = [hit for hit in fake_upstream.hits if hit.model == answering]
    assert asked[0].body["tools"][0]["strict"] is True  # the agents SDK's strict schema went through
    outputs = [item for item in asked[1].body["input"] if item.get("type") == "function_call_output"]
    assert [item["output"] for item in outputs] == ["5"]


def test_a_cached_group_does_not_cache_the_responses_route(
    sdk: Callable[[AppServer], openai.OpenAI], fake_upstream: FakeUpstream
) -> None:
    settings = RouterSettings(
        providers={"first": fake_upstream.provider()},
        groups={"cached": {"members": ["first/gpt-4o"], "cache": {}}},
        allow_unauthenticated=True,
    )
    with AppServer(ModelRouter(Starlette(), settings=settings)) as server:
        client = sdk(server)
        answers = [client.responses.with_raw_response.create(model="group/cached", input="say hello") for _ in range(2)]
        chats = [
            client.chat.completions.with_raw_response.create(
                model="group/cached", messages=[{"role": "user", "content": "say hello"}]
            )
            for _ in range(2)
        ]
    assert ["x-router-cache" in answer.headers for answer in answers] == [False, False]
    assert [chat.headers["x-router-cache"] for chat in chats] == ["miss", "hit"]  # the same group's chat is cached
    assert [hit.path for hit in fake_upstream.hits] == ["/v1/responses", "/v1/responses", "/v1/chat/completions"]
