"""The Responses API route served by translated members: a chat-completions provider
(``responses = "translate"``) and an Anthropic one, through the router, with the official
``openai`` and ``openai-agents`` SDKs as clients and the test kit's fakes as upstreams (native
Responses and chat completions on one fake, Anthropic's Messages API on another)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import openai
import pytest
from starlette.applications import Starlette

from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import AppServer, CapturedEvents, FakeUpstream, reply

from .calculator_agent import run_calculator_agent, script_tool_round_trip

_TEAM_A = "team-a-key-0123456789abcdef"
#: A strict function tool, as the agents SDK sends its tools.
_WEATHER: dict[str, Any] = {
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
#: Each translated member's ref, and the model id its fake is scripted by.
_MEMBERS = {"chat": ("chat/gpt-4o-mini", "gpt-4o-mini"), "claude": ("claude/claude-sonnet", "claude-sonnet")}


@pytest.fixture
def served(
    fake_upstream: FakeUpstream, fake_anthropic_upstream: FakeUpstream
) -> Iterator[tuple[AppServer, CapturedEvents, ModelRouter]]:
    """A router with a native Responses provider, a chat-completions provider that translates
    the route and an Anthropic provider, grouped native first then each translated member."""
    captured = CapturedEvents()
    settings = RouterSettings(
        providers={
            "native": fake_upstream.provider(),
            "chat": fake_upstream.provider(responses="translate"),
            "claude": fake_anthropic_upstream.provider(),
        },
        groups={
            "via_chat": {"members": ["native/gpt-4o", "chat/gpt-4o-mini"]},
            "via_claude": {"members": ["native/gpt-4o", "claude/claude-sonnet"]},
            "translated": {"members": ["chat/gpt-4o-mini", "claude/claude-sonnet"]},
            "translated_first": {"members": ["chat/gpt-4o-mini", "native/gpt-4o"]},
        },
        breaker={"enabled": False},
        allow_unauthenticated=True,
        metrics_route="/metrics",
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


def _usage(member: str, prompt: int, completion: int) -> dict[str, int]:
    """Token counts as ``member``'s fake states them (chat completions' words, or the Messages API's)."""
    if member == "chat":
        return {"prompt_tokens": prompt, "completion_tokens": completion}
    return {"input_tokens": prompt, "output_tokens": completion}


def _upstream(member: str, fake_upstream: FakeUpstream, fake_anthropic_upstream: FakeUpstream) -> FakeUpstream:
    return fake_upstream if member == "chat" else fake_anthropic_upstream


@pytest.mark.parametrize("member", ["chat", "claude"])
def test_responses_create_fails_over_from_a_native_member_to_a_translated_one(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
    fake_anthropic_upstream: FakeUpstream,
    member: str,
) -> None:
    server, captured, _ = served
    ref, model_id = _MEMBERS[member]
    upstream = _upstream(member, fake_upstream, fake_anthropic_upstream)
    fake_upstream.script("gpt-4o", reply.status(503))
    upstream.script(model_id, reply.ok("Bonjour", usage=_usage(member, 9, 2)))
    raw = sdk(server).responses.with_raw_response.create(
        model=f"group/via_{member}", instructions="Answer in French.", input="say hello", store=True
    )
    response = raw.parse()
    assert response.output_text == "Bonjour"
    assert (response.object, response.status, response.store) == ("response", "completed", False)
    assert response.id.startswith("resp_")
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (9, 2, 11)
    assert raw.headers["x-router-model"] == ref
    assert captured.attempts(raw.headers["x-request-id"]) == [
        ("native/gpt-4o", "failed", "upstream_5xx"),
        (ref, "served", "served"),
    ]
    sent = upstream.hits[-1]
    if member == "chat":
        assert sent.path == "/v1/chat/completions"
        assert sent.body["messages"] == [
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "say hello"},
        ]
        assert "store" not in sent.body
    else:
        assert sent.path == "/v1/messages"
        assert sent.body["system"] == [{"type": "text", "text": "Answer in French."}]
        assert sent.body["messages"] == [{"role": "user", "content": "say hello"}]


@pytest.mark.parametrize("member", ["chat", "claude"])
def test_responses_stream_from_a_translated_member_accumulates_in_the_sdks_helper(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
    fake_anthropic_upstream: FakeUpstream,
    member: str,
) -> None:
    server = served[0]
    ref, model_id = _MEMBERS[member]
    upstream = _upstream(member, fake_upstream, fake_anthropic_upstream)
    upstream.script(model_id, reply.ok("Hello there, friend", chunks=4, usage=_usage(member, 5, 4)))
    with sdk(server).responses.stream(model=ref, input="say hello") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    assert "".join(event.delta for event in events if event.type == "response.output_text.delta") == (
        "Hello there, friend"
    )
    assert final.output_text == "Hello there, friend"
    assert final.status == "completed"
    assert final.usage is not None and (final.usage.input_tokens, final.usage.output_tokens) == (5, 4)
    if member == "chat":
        assert fake_upstream.hits[-1].body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("member", ["chat", "claude"])
def test_a_function_tool_round_trip_through_a_translated_member(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
    fake_anthropic_upstream: FakeUpstream,
    member: str,
) -> None:
    server, _, _ = served
    ref, model_id = _MEMBERS[member]
    upstream = _upstream(member, fake_upstream, fake_anthropic_upstream)
    upstream.script(
        model_id, reply.tool_call("get_weather", {"city": "Paris"}, id="call_1"), reply.ok("It is sunny in Paris.")
    )
    client = sdk(server)
    with client.responses.stream(model=ref, input="weather in Paris?", tools=[_WEATHER]) as stream:
        asked = stream.get_final_response()
    call = next(item for item in asked.output if item.type == "function_call")
    assert (call.name, json.loads(call.arguments), call.call_id) == ("get_weather", {"city": "Paris"}, "call_1")
    answer = client.responses.create(
        model=ref,
        input=[
            {"role": "user", "content": "weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": call.arguments},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ],
        tools=[_WEATHER],
    )
    assert answer.output_text == "It is sunny in Paris."
    sent = upstream.hits[-1].body
    if member == "chat":
        assert sent["tools"][0]["function"]["strict"] is True
        assert sent["messages"][1]["tool_calls"][0]["id"] == "call_1"
        assert sent["messages"][2] == {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}
    else:  # the Messages API has no strict mode: the flag is dropped, the schema kept
        assert sent["tools"][0]["input_schema"] == _WEATHER["parameters"]
        assert sent["messages"][1]["content"][0]["id"] == "call_1"
        assert sent["messages"][2]["content"][0] == {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}


@pytest.mark.anyio
@pytest.mark.parametrize("serving", ["chat", "claude", "native"])
async def test_an_openai_agent_runs_a_function_tool_on_whichever_member_serves(
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
    fake_anthropic_upstream: FakeUpstream,
    serving: str,
) -> None:
    server = served[0]
    group = "via_claude" if serving == "claude" else "via_chat"
    if serving == "native":
        upstream, model_id = fake_upstream, "gpt-4o"
    else:
        fake_upstream.script("gpt-4o", reply.status(503))
        upstream, model_id = _upstream(serving, fake_upstream, fake_anthropic_upstream), _MEMBERS[serving][1]
    script_tool_round_trip(upstream, model_id)
    assert await run_calculator_agent(server.url, f"group/{group}") == ("2 + 3 = 5", [(2, 3)])
    asked = [hit for hit in upstream.hits if hit.model == model_id]
    assert len(asked) == 2
    if serving == "native":
        assert asked[0].path == "/v1/responses"
    elif serving == "chat":
        assert asked[0].body["tools"][0]["function"]["strict"] is True
        assert asked[1].body["messages"][-1] == {
            "role": "tool",
            "tool_call_id": asked[1].body["messages"][-2]["tool_calls"][0]["id"],
            "content": "5",
        }
    else:
        assert "strict" not in json.dumps(asked[0].body["tools"])
        assert asked[1].body["messages"][-1]["content"][0]["content"] == "5"


def test_a_translated_member_that_fails_fails_over_to_a_native_one(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
) -> None:
    server, captured, _ = served
    fake_upstream.script("gpt-4o-mini", reply.status(503))
    raw = sdk(server).responses.with_raw_response.create(model="group/translated_first", input="say hello")
    assert raw.parse().output_text == "Hello from gpt-4o"
    assert [hit.path for hit in fake_upstream.hits] == ["/v1/chat/completions", "/v1/responses"]
    assert captured.attempts(raw.headers["x-request-id"]) == [
        ("chat/gpt-4o-mini", "failed", "upstream_5xx"),
        ("native/gpt-4o", "served", "served"),
    ]


def test_previous_response_id_skips_translated_members_for_a_native_one(
    served: tuple[AppServer, CapturedEvents, ModelRouter], fake_upstream: FakeUpstream
) -> None:
    server, captured, _ = served
    body = {"model": "group/translated_first", "input": "and then?", "previous_response_id": "resp_unknown_1"}
    answer = httpx2.post(f"{server.url}/v1/responses", json=body, timeout=5)
    assert answer.status_code == 200
    assert answer.json()["output"][0]["content"][0]["text"] == "Hello from gpt-4o"
    assert captured.attempts(answer.headers["x-request-id"]) == [
        ("chat/gpt-4o-mini", "skipped", "protocol_mismatch"),
        ("native/gpt-4o", "served", "served"),
    ]
    assert [hit.path for hit in fake_upstream.hits] == ["/v1/responses"]


def test_previous_response_id_on_a_plan_of_translated_members_only_is_unsupported_on_member(
    served: tuple[AppServer, CapturedEvents, ModelRouter], fake_upstream: FakeUpstream
) -> None:
    server, _, _ = served
    body = {"model": "group/translated", "input": "and then?", "previous_response_id": "resp_abc"}
    answer = httpx2.post(f"{server.url}/v1/responses", json=body, timeout=5)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "unsupported_on_member"
    assert error["type"] == "invalid_request_error"
    assert "stateless" in error["message"]
    assert fake_upstream.hits == []


def test_a_translated_answers_id_is_not_remembered_as_a_stored_response(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
) -> None:
    server = served[0]
    first = sdk(server).responses.create(model="chat/gpt-4o-mini", input="hi")
    # Were it remembered, the follow-up would be pinned to the chat provider and refused; unknown,
    # it runs the normal plan, whose native member is asked (and answers as its fake does).
    body = {"model": "group/translated_first", "input": "and then?", "previous_response_id": first.id}
    answer = httpx2.post(f"{server.url}/v1/responses", json=body, timeout=5)
    assert answer.status_code == 200
    assert answer.headers["x-router-model"] == "native/gpt-4o"


def test_a_request_no_translated_member_can_take_is_a_400_naming_the_field_not_a_500(
    served: tuple[AppServer, CapturedEvents, ModelRouter], fake_upstream: FakeUpstream
) -> None:
    server, _, _ = served
    body = {"model": "group/translated", "input": "news?", "tools": [{"type": "web_search"}]}
    answer = httpx2.post(f"{server.url}/v1/responses", json=body, timeout=5)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "protocol_mismatch"
    assert 'a tool of type "web_search"' in error["message"]
    assert fake_upstream.hits == []


def test_a_chat_stream_error_before_any_text_fails_over_to_the_next_member(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
    fake_anthropic_upstream: FakeUpstream,
) -> None:
    server, captured, _ = served
    fake_upstream.script("gpt-4o-mini", reply.stream_error(0, 429))
    with sdk(server).responses.stream(model="group/translated", input="hi") as stream:
        final = stream.get_final_response()
    assert final.output_text == "Hello from claude-sonnet"
    body = {"model": "group/translated", "input": "hi", "stream": True}
    answer = httpx2.post(f"{server.url}/v1/responses", json=body, timeout=5)
    assert captured.attempts(answer.headers["x-request-id"]) == [
        ("chat/gpt-4o-mini", "failed", "rate_limited"),
        ("claude/claude-sonnet", "served", "served"),
    ]
    assert [hit.path for hit in fake_upstream.hits] == ["/v1/chat/completions"] * 2


def test_a_translated_stream_cut_after_commit_ends_with_the_responses_streams_own_error(
    sdk: Callable[[AppServer], openai.OpenAI],
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
) -> None:
    server, captured, _ = served
    fake_upstream.script("gpt-4o-mini", reply.broken_stream(3))
    body = {"model": "chat/gpt-4o-mini", "input": "hi", "stream": True}
    answer = httpx2.post(f"{server.url}/v1/responses", json=body, timeout=5)
    blocks = [block for block in answer.content.split(b"\n\n") if block]
    names = [block.split(b"\n", 1)[0] for block in blocks]
    assert names[-2:] == [b"event: error", b"event: response.failed"]
    created = json.loads(blocks[0].split(b"data: ", 1)[1])
    assert created["response"]["id"].encode() in blocks[-1]  # the stream's own response id
    assert captured.wait(answer.headers["x-request-id"]).events[-1].reason == "stream_interrupted"
    with pytest.raises(openai.APIError):
        with sdk(server).responses.stream(model="chat/gpt-4o-mini", input="hi") as stream:
            stream.get_final_response()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("member", ["chat", "claude"])
def test_a_translated_members_usage_reaches_the_record_and_the_metrics(
    served: tuple[AppServer, CapturedEvents, ModelRouter],
    fake_upstream: FakeUpstream,
    fake_anthropic_upstream: FakeUpstream,
    member: str,
    stream: bool,
) -> None:
    server, captured, _ = served
    ref, model_id = _MEMBERS[member]
    upstream = _upstream(member, fake_upstream, fake_anthropic_upstream)
    upstream.script(model_id, reply.ok("three words here", usage=_usage(member, 11, 7)))
    body = {"model": ref, "input": "hi", "stream": stream}
    answer = httpx2.post(f"{server.url}/v1/responses", json=body, timeout=5)
    assert answer.status_code == 200
    record = captured.wait(answer.headers["x-request-id"])
    assert (record.prompt_tokens, record.completion_tokens, record.tokens_measured) == (11, 7, True)
    scraped = httpx2.get(f"{server.url}/metrics", timeout=5).text
    assert f'asgi_router_tokens_total{{candidate="{ref}",kind="prompt"}} 11.0' in scraped
    assert f'asgi_router_tokens_total{{candidate="{ref}",kind="completion"}} 7.0' in scraped


@pytest.mark.parametrize("member", ["chat", "claude"])
def test_a_translated_members_usage_counts_against_a_callers_token_cap(
    fake_upstream: FakeUpstream, fake_anthropic_upstream: FakeUpstream, member: str
) -> None:
    ref, model_id = _MEMBERS[member]
    _upstream(member, fake_upstream, fake_anthropic_upstream).script(
        model_id, reply.ok("hi", usage=_usage(member, 11, 7))
    )
    settings = RouterSettings(
        providers={"chat": fake_upstream.provider(responses="translate"), "claude": fake_anthropic_upstream.provider()},
        api_keys={"team-a": _TEAM_A},
        callers={"team-a": {"tokens_per_day": 15}},
    )
    headers = {"authorization": f"Bearer {_TEAM_A}"}
    body = {"model": ref, "input": "hi", "stream": True}
    with AppServer(ModelRouter(Starlette(), settings=settings)) as server:
        served = httpx2.post(f"{server.url}/v1/responses", json=body, headers=headers, timeout=5)
        assert served.status_code == 200
        refused = httpx2.post(f"{server.url}/v1/responses", json=body, headers=headers, timeout=5)
    assert refused.status_code == 429  # 18 tokens spent, over 15: the cap is reached
    assert refused.json()["error"]["code"] == "caller_limit_reached"
