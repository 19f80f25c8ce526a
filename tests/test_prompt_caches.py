"""Provider prompt caches kept warm across failover, through real sockets: the kit's fake upstreams
(which record the bodies they receive) behind a router, the official ``openai`` and ``anthropic``
SDKs as clients.

Anthropic-style ``cache_control`` marks are stripped for an OpenAI member and kept (with
breakpoints added to a long prefix) for an Anthropic one; ``prompt_cache_key`` carries the
session's digest only where enabled; cached and cache-written prompt tokens reach the record, its
cost and the metrics, for both kinds, streamed and not.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from starlette.applications import Starlette

from asgi_router import ModelRouter, RequestRecord, RouterSettings
from asgi_router.config.provider_settings import ProviderSettings
from asgi_router.protocols.cache_marks import MIN_CACHED_TOKENS
from asgi_router.routing.facts import CHARS_PER_TOKEN
from asgi_router.routing.sticky_keys import sticky_key
from asgi_router.testing import AppServer, CapturedEvents, FakeUpstream, reply
from asgi_router.transports.provider import PromptCaching, ProviderRuntime, RouteTarget

from .metrics_helpers import Scrape

_EPHEMERAL = {"type": "ephemeral"}
#: Text long enough for Anthropic to cache (the router's estimate: four characters a token).
_LONG = "All work and no play makes Jack a dull boy. " * (MIN_CACHED_TOKENS * CHARS_PER_TOKEN // 40)
_MARKED: list[Any] = [
    {"role": "system", "content": [{"type": "text", "text": "You are terse.", "cache_control": _EPHEMERAL}]},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "a long document", "cache_control": _EPHEMERAL},
            {"type": "text", "text": "summarise it"},
        ],
    },
]
_HI: list[Any] = [{"role": "user", "content": "hi"}]


def _tool(description: str) -> dict[str, Any]:
    parameters = {"type": "object", "properties": {"where": {"type": "string"}}}
    return {"type": "function", "function": {"name": "weather", "description": description, "parameters": parameters}}


@contextmanager
def _router(
    providers: dict[str, Any],
    members: list[str],
    catalog: dict[str, Any] | None = None,
    **settings: Any,
) -> Iterator[tuple[AppServer, CapturedEvents]]:
    captured = CapturedEvents()
    routed = RouterSettings.model_validate(
        {
            "providers": providers,
            "groups": {"chat": {"members": members}},
            "catalog": catalog or {},
            "allow_unauthenticated": True,
            **settings,
        }
    )
    with AppServer(ModelRouter(Starlette(), settings=routed, sinks=[captured])) as server:
        yield server, captured


def _openai(server: AppServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def _chat(server: AppServer, captured: CapturedEvents, **body: Any) -> tuple[Any, RequestRecord]:
    with _openai(server) as client:
        raw = client.chat.completions.with_raw_response.create(model="group/chat", **body)
        completion = list(raw.parse()) if body.get("stream") else raw.parse()
    return completion, captured.wait(raw.headers["x-request-id"])


# --- marks: kept for Anthropic, stripped for OpenAI ------------------------------------------------


def test_a_marked_request_fails_over_from_anthropic_to_an_openai_member_that_gets_no_marks(
    fake_upstream: FakeUpstream, fake_anthropic_upstream: FakeUpstream
) -> None:
    fake_anthropic_upstream.script("claude", reply.status(529))
    fake_upstream.script("gpt", reply.ok("served by gpt"))
    providers = {"claude": fake_anthropic_upstream.provider(), "openai": fake_upstream.provider()}
    with _router(providers, ["claude/claude", "openai/gpt"]) as (server, captured):
        completion, record = _chat(
            server, captured, messages=_MARKED, tools=[{**_tool("w"), "cache_control": _EPHEMERAL}]
        )
    assert completion.choices[0].message.content == "served by gpt"
    assert [(e.candidate, e.outcome) for e in record.events] == [("claude/claude", "failed"), ("openai/gpt", "served")]
    (tried,) = fake_anthropic_upstream.hits  # translated: the client's marks on the blocks it marked
    assert tried.body["system"] == [{"type": "text", "text": "You are terse.", "cache_control": _EPHEMERAL}]
    assert tried.body["messages"][0]["content"] == [
        {"type": "text", "text": "a long document", "cache_control": _EPHEMERAL},
        {"type": "text", "text": "summarise it"},
    ]
    assert tried.body["tools"][0]["cache_control"] == _EPHEMERAL
    (served,) = fake_upstream.hits
    assert "cache_control" not in str(served.body)
    assert served.body["messages"] == [
        {"role": "system", "content": [{"type": "text", "text": "You are terse."}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "a long document"}, {"type": "text", "text": "summarise it"}],
        },
    ]
    assert served.body["tools"] == [_tool("w")]


def test_prompt_cache_off_sends_an_openai_member_the_marks_as_the_client_sent_them(
    fake_upstream: FakeUpstream,
) -> None:
    providers = {"openai": fake_upstream.provider(prompt_cache="off")}
    with _router(providers, ["openai/gpt"]) as (server, captured):
        _chat(server, captured, messages=_MARKED)
    (served,) = fake_upstream.hits
    assert served.body["messages"] == _MARKED


def test_a_long_system_prompt_and_long_tools_get_breakpoints_when_translated_and_short_ones_none(
    fake_anthropic_upstream: FakeUpstream,
) -> None:
    providers = {"claude": fake_anthropic_upstream.provider()}
    long_system = [{"role": "system", "content": "Be brief."}, {"role": "system", "content": _LONG}, *_HI]
    with _router(providers, ["claude/claude"]) as (server, captured):
        _chat(server, captured, messages=long_system, tools=[_tool("short"), _tool(_LONG)])
        _chat(server, captured, messages=[{"role": "system", "content": "Be brief."}, *_HI], tools=[_tool("short")])
    long, short = fake_anthropic_upstream.hits
    assert long.body["system"] == [
        {"type": "text", "text": "Be brief."},
        {"type": "text", "text": _LONG, "cache_control": _EPHEMERAL},
    ]
    assert [tool.get("cache_control") for tool in long.body["tools"]] == [None, _EPHEMERAL]
    assert "cache_control" not in str(short.body)


def test_the_clients_marks_and_the_added_breakpoints_stay_within_anthropics_four(
    fake_anthropic_upstream: FakeUpstream,
) -> None:
    marked = [{"type": "text", "text": f"part {n}", "cache_control": _EPHEMERAL} for n in range(3)]
    messages = [{"role": "system", "content": _LONG}, {"role": "user", "content": marked}]
    providers = {"claude": fake_anthropic_upstream.provider()}
    with _router(providers, ["claude/claude"]) as (server, captured):
        _chat(server, captured, messages=messages, tools=[_tool(_LONG)])
    (hit,) = fake_anthropic_upstream.hits
    assert [block.get("cache_control") for block in hit.body["messages"][0]["content"]] == [_EPHEMERAL] * 3
    assert hit.body["system"][-1]["cache_control"] == _EPHEMERAL  # the fourth: the prefix holds the tools
    assert "cache_control" not in hit.body["tools"][-1]


# --- prompt_cache_key -------------------------------------------------------------------------------


def test_prompt_cache_key_is_the_sessions_digest_where_enabled_and_never_overrides_the_clients(
    fake_upstream: FakeUpstream,
) -> None:
    providers = {"keyed": fake_upstream.provider(prompt_cache_key=True), "plain": fake_upstream.provider()}
    session = {"x-session-id": "conversation-42"}
    with _router(providers, ["keyed/gpt"]) as (server, _), _openai(server) as client:
        client.chat.completions.create(model="group/chat", messages=_HI, extra_headers=session)
        client.chat.completions.create(model="group/chat", messages=_HI)  # no session: no key
        client.chat.completions.create(
            model="group/chat", messages=_HI, extra_headers=session, extra_body={"prompt_cache_key": "mine"}
        )
        client.chat.completions.create(model="plain/gpt", messages=_HI, extra_headers=session)  # not enabled
    keyed, unkeyed, own, plain = (hit.body for hit in fake_upstream.hits)
    assert keyed["prompt_cache_key"] == sticky_key("session", {}, "conversation-42", None)
    assert "conversation-42" not in str(keyed)
    assert "prompt_cache_key" not in unkeyed and "prompt_cache_key" not in plain
    assert own["prompt_cache_key"] == "mine"


def test_prompt_cache_key_is_on_by_default_only_for_api_openai_com() -> None:
    def caching(**provider: Any) -> PromptCaching | None:
        target = ProviderRuntime.build("p", ProviderSettings(**provider), ["/v1/chat/completions"]).targets
        assert isinstance(target["/v1/chat/completions"], RouteTarget)
        return target["/v1/chat/completions"].caching

    assert caching(base_url="https://api.openai.com/v1") == PromptCaching(True, False, b"x-session-id")
    assert caching(base_url="http://127.0.0.1:9/v1") == PromptCaching(strip_marks=True)
    assert caching(base_url="http://127.0.0.1:9/v1", prompt_cache_key=True) == PromptCaching(
        True, False, b"x-session-id"
    )
    assert caching(base_url="https://api.openai.com/v1", prompt_cache_key=False) == PromptCaching(strip_marks=True)
    assert caching(base_url="https://api.openai.com/v1", prompt_cache="off") is None
    assert caching(base_url="http://127.0.0.1:9/v1", kind="anthropic") == PromptCaching(breakpoints=True)
    for refused in ({"kind": "anthropic", "prompt_cache_key": True}, {"prompt_cache": "off", "prompt_cache_key": True}):
        with pytest.raises(ValueError, match="prompt_cache_key"):
            ProviderSettings(base_url="http://127.0.0.1:9/v1", **refused)


# --- cached tokens: records, cost, metrics -------------------------------------------------------------

#: USD per million: fresh prompt 2, cache read 0.5, cache write 2.5, completion 10.
_PRICES = {"input_price": 2.0, "cached_input_price": 0.5, "cache_write_price": 2.5, "output_price": 10.0}
_OPENAI_USAGE = {
    "prompt_tokens": 2000,
    "completion_tokens": 10,
    "total_tokens": 2010,
    "prompt_tokens_details": {"cached_tokens": 1500, "audio_tokens": 0},
}
# Anthropic counts the cache apart from its input: 100 fresh, 1,500 read, 400 written.
_ANTHROPIC_USAGE = {
    "input_tokens": 100,
    "cache_read_input_tokens": 1500,
    "cache_creation_input_tokens": 400,
    "output_tokens": 10,
}


def _usd(fresh: int, read: int, written: int, completion: int) -> float:
    return (fresh * 2.0 + read * 0.5 + written * 2.5 + completion * 10.0) / 1_000_000


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_openais_cached_tokens_are_priced_at_the_cached_rate_and_counted_in_the_metrics(
    fake_upstream: FakeUpstream, stream: bool
) -> None:
    fake_upstream.script("gpt", reply.ok("cached", usage=_OPENAI_USAGE))
    providers = {"openai": fake_upstream.provider()}
    catalog = {"openai/gpt": _PRICES}
    body: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    with _router(providers, ["openai/gpt"], catalog, metrics_route="/metrics") as (server, captured):
        _, record = _chat(server, captured, messages=_HI, **body)
        scrape = Scrape(httpx2.get(f"{server.url}/metrics").text)
    assert (record.prompt_tokens, record.cached_prompt_tokens, record.cache_write_tokens) == (2000, 1500, 0)
    assert record.cost_usd == pytest.approx(_usd(500, 1500, 0, 10))
    assert scrape.value("asgi_router_prompt_cache_tokens_total", candidate="openai/gpt", kind="read") == 1500
    assert scrape.value("asgi_router_prompt_cache_tokens_total", candidate="openai/gpt", kind="write") == 0
    assert scrape.value("asgi_router_tokens_total", candidate="openai/gpt", kind="prompt") == 2000


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_anthropics_cache_reads_and_writes_are_in_the_prompt_and_priced_at_their_rates_on_the_chat_route(
    fake_anthropic_upstream: FakeUpstream, stream: bool
) -> None:
    fake_anthropic_upstream.script("claude", reply.ok("cached", usage=_ANTHROPIC_USAGE))
    providers = {"claude": fake_anthropic_upstream.provider()}
    catalog = {"claude/claude": _PRICES}
    body: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
    with _router(providers, ["claude/claude"], catalog, metrics_route="/metrics") as (server, captured):
        completion, record = _chat(server, captured, messages=_HI, **body)
        scrape = Scrape(httpx2.get(f"{server.url}/metrics").text)
    usage = completion[-1].usage if stream else completion.usage  # what the client sees, in OpenAI's words
    assert (usage.prompt_tokens, usage.prompt_tokens_details.cached_tokens) == (2000, 1500)
    assert (record.prompt_tokens, record.cached_prompt_tokens, record.cache_write_tokens) == (2000, 1500, 400)
    assert record.tokens_measured
    assert record.cost_usd == pytest.approx(_usd(100, 1500, 400, 10))
    assert scrape.value("asgi_router_prompt_cache_tokens_total", candidate="claude/claude", kind="read") == 1500
    assert scrape.value("asgi_router_prompt_cache_tokens_total", candidate="claude/claude", kind="write") == 400


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_anthropics_cache_counts_reach_the_record_on_the_messages_route(
    fake_anthropic_upstream: FakeUpstream, stream: bool
) -> None:
    fake_anthropic_upstream.script("claude", reply.ok("cached", usage=_ANTHROPIC_USAGE))
    providers = {"claude": fake_anthropic_upstream.provider()}
    catalog = {"claude/claude": _PRICES}
    with _router(providers, ["claude/claude"], catalog, routes=["/v1/chat/completions", "/v1/messages"]) as (
        server,
        captured,
    ):
        client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
        system = [{"type": "text", "text": _LONG, "cache_control": _EPHEMERAL}]
        asked: dict[str, Any] = {"model": "group/chat", "max_tokens": 64, "system": system, "messages": _HI}
        if stream:
            with client.messages.stream(**asked) as events:
                message = events.get_final_message()
                request_id = events.response.headers["x-request-id"]
        else:
            raw = client.messages.with_raw_response.create(**asked)
            message, request_id = raw.parse(), raw.headers["x-request-id"]
        client.close()
        record = captured.wait(request_id)
    assert message.usage.cache_read_input_tokens == 1500  # relayed as the upstream said it
    (hit,) = fake_anthropic_upstream.hits
    assert hit.body["system"] == system  # the Messages route's body goes as it came, marks and all
    assert (record.prompt_tokens, record.cached_prompt_tokens, record.cache_write_tokens) == (2000, 1500, 400)
    assert record.cost_usd == pytest.approx(_usd(100, 1500, 400, 10))
