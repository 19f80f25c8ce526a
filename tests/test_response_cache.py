"""The response cache (a group's ``cache``), end to end: a repeated request answered from a
stored answer without an upstream call, in the shape asked (JSON or an event stream, OpenAI's or
Anthropic's), never across callers, never a failed or truncated answer, the client's
``cache-control`` obeyed; what a hit says in its headers, its record and the metrics.

The upstreams are the test kit's fakes (``fake_upstream``, ``fake_anthropic_upstream``), which
count the requests they get; the clients the official ``openai`` and ``anthropic`` SDKs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import httpx2
import openai
import pytest
import redis as redis_client
from starlette.applications import Starlette

from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import AppServer, FakeUpstream, reply

from .doubles import FakeClock, RecordSink
from .fleet import RedisServer
from .waiting import eventually, polled

pytestmark = pytest.mark.anyio

_ALICE = "rk-alice-0123456789abcdef"
_BOB = "rk-bob-0123456789abcdef0"
_HI = [{"role": "user", "content": "say two words"}]


@contextmanager
def _served(
    fake_upstream: FakeUpstream, cache: dict[str, Any] | None = None, **overrides: Any
) -> Iterator[tuple[AppServer, ModelRouter, RecordSink]]:
    providers = overrides.pop("providers", {"openai": fake_upstream.provider()})
    groups = overrides.pop(
        "groups", {"chat": {"members": ["openai/gpt-4o"], "cache": cache if cache is not None else {}}}
    )
    overrides.setdefault("api_keys", {"alice": _ALICE, "bob": _BOB})
    clock = overrides.pop("clock", FakeClock())
    settings = RouterSettings(providers=providers, groups=groups, **overrides)
    records = RecordSink()
    router = ModelRouter(Starlette(), settings=settings, sinks=[records], clock=clock)
    with AppServer(router) as server:
        yield server, router, records


def _openai(server: AppServer, key: str = _ALICE) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)


def _streamed_text(stream: Any) -> str:
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def test_a_repeated_request_is_answered_from_the_cache_in_both_shapes_with_no_upstream_call(
    fake_upstream: FakeUpstream,
) -> None:
    fake_upstream.script("gpt-4o", reply.ok("Hello there, friend", usage={"prompt_tokens": 7, "completion_tokens": 3}))
    with _served(fake_upstream) as (server, _, _):
        client = _openai(server)
        first = client.chat.completions.with_raw_response.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
        second = client.chat.completions.with_raw_response.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
        streamed = client.chat.completions.with_raw_response.create(
            model="group/chat",
            messages=_HI,  # type: ignore[arg-type]
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(streamed.parse())
    assert len(fake_upstream.hits) == 1
    assert first.headers["x-router-cache"] == "miss" and "age" not in first.headers
    assert second.headers["x-router-cache"] == streamed.headers["x-router-cache"] == "hit"
    assert second.headers["x-router-attempts"] == streamed.headers["x-router-attempts"] == "0"
    assert second.headers["x-router-model"] == streamed.headers["x-router-model"] == "openai/gpt-4o"
    assert int(second.headers["age"]) >= 0
    made, served = first.parse(), second.parse()
    assert served.choices[0].message.content == made.choices[0].message.content == "Hello there, friend"
    assert (served.id, served.model, served.choices[0].finish_reason) == (made.id, made.model, "stop")
    assert served.usage is not None and (served.usage.prompt_tokens, served.usage.completion_tokens) == (7, 3)
    assert _streamed_text(chunks) == "Hello there, friend"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 10  # include_usage asked for it


def test_a_streamed_answer_with_a_tool_call_is_stored_and_served_whole_as_json(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("gpt-4o", reply.tool_call("lookup", {"city": "Paris"}, text="Let me see."))
    with _served(fake_upstream) as (server, _, _):
        client = _openai(server)
        streamed = list(client.chat.completions.create(model="group/chat", messages=_HI, stream=True))  # type: ignore[arg-type]
        whole = client.chat.completions.with_raw_response.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
        again = list(client.chat.completions.create(model="group/chat", messages=_HI, stream=True))  # type: ignore[arg-type]
    assert len(fake_upstream.hits) == 1
    assert whole.headers["x-router-cache"] == "hit"
    message = whole.parse().choices[0].message
    assert message.content == _streamed_text(streamed) == _streamed_text(again) == "Let me see."
    assert message.tool_calls is not None and len(message.tool_calls) == 1
    call = message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == ("lookup", '{"city": "Paris"}')
    assert whole.parse().choices[0].finish_reason == "tool_calls"
    replayed = [c.choices[0].delta.tool_calls for c in again if c.choices and c.choices[0].delta.tool_calls]
    assert "".join(part[0].function.arguments or "" for part in replayed) == '{"city": "Paris"}'  # type: ignore[union-attr]


def test_messages_answers_are_served_from_the_cache_in_anthropics_shapes(
    fake_upstream: FakeUpstream, fake_anthropic_upstream: FakeUpstream
) -> None:
    fake_anthropic_upstream.script("claude", reply.ok("Bonjour le monde"))
    providers = {"claude": fake_anthropic_upstream.provider()}
    groups = {"claude": {"members": ["claude/claude"], "cache": {}}}
    with _served(fake_upstream, providers=providers, groups=groups, routes=["/v1/messages"]) as (server, _, _):
        client = anthropic.Anthropic(base_url=server.url, api_key=_ALICE, max_retries=0)
        with client.messages.stream(model="group/claude", max_tokens=64, messages=_HI) as stream:  # type: ignore[arg-type]
            streamed = "".join(stream.text_stream)
        raw = client.messages.with_raw_response.create(model="group/claude", max_tokens=64, messages=_HI)  # type: ignore[arg-type]
        with client.messages.stream(model="group/claude", max_tokens=64, messages=_HI) as stream:  # type: ignore[arg-type]
            again = "".join(stream.text_stream)
            final = stream.get_final_message()
    assert len(fake_anthropic_upstream.hits) == 1
    assert raw.headers["x-router-cache"] == "hit" and raw.headers["x-router-model"] == "claude/claude"
    message = raw.parse()
    assert [block.text for block in message.content if block.type == "text"] == ["Bonjour le monde"]
    assert streamed == again == "Bonjour le monde"
    assert message.stop_reason == final.stop_reason == "end_turn"
    assert final.usage.input_tokens == message.usage.input_tokens


def test_an_answer_never_crosses_callers_unless_the_group_shares_its_cache(fake_upstream: FakeUpstream) -> None:
    with _served(fake_upstream) as (server, _, _):
        for key in (_ALICE, _BOB, _ALICE, _BOB):
            _openai(server, key).chat.completions.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
        assert len(fake_upstream.hits) == 2  # one each
    fake_upstream.reset()
    with _served(fake_upstream, {"shared": True}) as (server, _, _):
        for key in (_ALICE, _BOB):
            raw = _openai(server, key).chat.completions.with_raw_response.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
        assert raw.headers["x-router-cache"] == "hit"
        assert len(fake_upstream.hits) == 1


@pytest.mark.parametrize(
    "failure",
    [reply.broken_stream(2), reply.status(500), reply.status(400)],
    ids=["truncated stream", "failed", "refused"],
)
def test_a_failed_truncated_or_refused_answer_is_never_stored(
    fake_upstream: FakeUpstream, failure: reply.Reply
) -> None:
    fake_upstream.script("gpt-4o", failure, reply.ok("fine now"))
    with _served(fake_upstream) as (server, _, _):
        client = _openai(server)
        with pytest.raises(openai.APIError):
            list(client.chat.completions.create(model="group/chat", messages=_HI, stream=True))  # type: ignore[arg-type]
        answer = client.chat.completions.with_raw_response.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
    assert answer.headers["x-router-cache"] == "miss"
    assert answer.parse().choices[0].message.content == "fine now"
    assert len(fake_upstream.hits) == 2


def test_a_groups_canned_reply_is_never_stored(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("gpt-4o", reply.status(503), reply.ok("real answer"))
    groups = {"chat": {"members": ["openai/gpt-4o"], "cache": {}, "degraded": {"content": "Busy."}}}
    with _served(fake_upstream, groups=groups) as (server, _, _):
        client = _openai(server)
        canned = client.chat.completions.with_raw_response.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
        real = client.chat.completions.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
    assert canned.headers["x-router-degraded"] == "1"
    assert real.choices[0].message.content == "real answer"


def test_no_store_neither_looks_up_nor_stores_and_no_cache_stores_without_looking_up(
    fake_upstream: FakeUpstream,
) -> None:
    with _served(fake_upstream) as (server, _, _):
        client = _openai(server)

        def ask(control: str | None = None) -> str:
            headers = {"cache-control": control} if control is not None else {}
            raw = client.chat.completions.with_raw_response.create(
                model="group/chat",
                messages=_HI,  # type: ignore[arg-type]
                extra_headers=headers,
            )
            return raw.headers["x-router-cache"]

        assert [ask("no-store"), ask("no-store")] == ["bypass", "bypass"]
        assert len(fake_upstream.hits) == 2
        assert ask() == "miss"  # nothing was stored
        assert ask() == "hit"
        assert ask("no-cache") == "bypass"  # not looked up: asked upstream again
        assert ask("max-age=0, No-Store") == "bypass"
        assert len(fake_upstream.hits) == 5


def test_the_clients_ttl_shortens_how_long_an_answer_is_kept(fake_upstream: FakeUpstream) -> None:
    clock = FakeClock()
    with _served(fake_upstream, {"ttl": 60}, clock=clock) as (server, _, _):
        client = _openai(server)

        def ask(ttl: str | None = None) -> httpx2.Headers:
            headers = {"x-router-cache-ttl": ttl} if ttl is not None else {}
            return client.chat.completions.with_raw_response.create(
                model="group/chat",
                messages=_HI,  # type: ignore[arg-type]
                extra_headers=headers,
            ).headers  # type: ignore[return-value]

        assert ask("5")["x-router-cache"] == "miss"
        clock.advance(4)
        assert ask()["x-router-cache"] == "hit"
        clock.advance(2)
        assert ask("600")["x-router-cache"] == "miss"  # expired; stored again for the group's 60 s at most
        clock.advance(59)
        assert ask()["x-router-cache"] == "hit"
        clock.advance(2)
        assert ask()["x-router-cache"] == "miss"
        with pytest.raises(openai.BadRequestError, match="x-router-cache-ttl"):
            ask("soon")


async def test_a_hit_is_recorded_with_what_it_saved_and_charges_no_caps(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("gpt-4o", reply.ok("priced", usage={"prompt_tokens": 1000, "completion_tokens": 500}))
    catalog = {"openai/gpt-4o": {"input_price": 2.0, "output_price": 8.0}}
    callers = {"alice": {"tokens_per_day": 1600}}
    with _served(fake_upstream, catalog=catalog, callers=callers, metrics_route="/metrics") as (server, _, records):
        client = _openai(server)
        first = client.chat.completions.with_raw_response.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
        hits = [
            client.chat.completions.with_raw_response.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
            for _ in range(3)
        ]
        await eventually(lambda: len(records) == 4)
        async with httpx2.AsyncClient() as http:
            scrape = (await http.get(f"{server.url}/metrics", headers={"authorization": f"Bearer {_ALICE}"})).text
    made = records.of(first.headers["x-request-id"])
    assert made.cache is not None and made.cache.outcome == "miss" and made.cost_usd == pytest.approx(0.006)
    served = records.of(hits[-1].headers["x-request-id"])
    assert served.cache is not None and served.cache.outcome == "hit"
    assert (served.cache.saved_tokens, served.cache.saved_usd) == (1500, pytest.approx(0.006))
    assert (served.cost_usd, served.prompt_tokens, served.winner, served.events) == (None, None, "openai/gpt-4o", [])
    # 1,500 tokens charged once: three more served from the cache did not reach the 1,600 cap.
    assert all(hit.headers.get("x-router-limit") is None for hit in hits)
    assert 'asgi_router_cache_requests_total{group="chat",outcome="hit"} 3.0' in scrape
    assert 'asgi_router_cache_requests_total{group="chat",outcome="miss"} 1.0' in scrape
    assert 'asgi_router_cache_saved_usd_total{group="chat"} 0.018' in scrape
    assert "asgi_router_cache_bytes " in scrape and "asgi_router_cache_bytes 0.0" not in scrape


def test_a_group_without_a_cache_answers_as_before(fake_upstream: FakeUpstream) -> None:
    groups = {"chat": {"members": ["openai/gpt-4o"]}}
    with _served(fake_upstream, groups=groups) as (server, _, _):
        client = _openai(server)
        for _ in range(2):
            raw = client.chat.completions.with_raw_response.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
            assert "x-router-cache" not in raw.headers
    assert len(fake_upstream.hits) == 2


def test_two_routers_on_one_redis_share_an_entry_and_keep_answering_when_redis_stops(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    redis = RedisServer(tmp_path).start()
    try:
        settings = RouterSettings(
            providers={"openai": fake_upstream.provider()},
            groups={"chat": {"members": ["openai/gpt-4o"], "cache": {}}},
            api_keys={"alice": _ALICE},
            state_url=redis.url,
            state_key_prefix=f"cache{time.monotonic_ns()}",
        )
        routers = [ModelRouter(Starlette(), settings=settings) for _ in range(2)]
        with AppServer(routers[0]) as one, AppServer(routers[1]) as two:
            for router in routers:
                polled(lambda router=router: router.state.link.up, within=10, what="the shared store")  # type: ignore[attr-defined]

            def ask(server: AppServer) -> str:
                raw = _openai(server).chat.completions.with_raw_response.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
                assert raw.parse().choices[0].message.content
                return raw.headers["x-router-cache"]

            assert [ask(one), ask(two), ask(one)] == ["miss", "hit", "hit"]
            assert len(fake_upstream.hits) == 1
            with redis_client.Redis.from_url(redis.url) as store:
                entries = store.keys(f"{settings.state_key_prefix}:cache:e:*")
                assert len(entries) == 1 and 0 < store.ttl(entries[0]) <= 300  # the entry expires
            redis.kill()
            assert [ask(two), ask(one)] == ["miss", "miss"]  # the store is away: a miss, never a failure
            assert len(fake_upstream.hits) == 3
    finally:
        redis.stop()


def test_the_fleets_entries_are_bounded_by_cache_max_bytes_oldest_evicted(
    fake_upstream: FakeUpstream, redis_server: RedisServer
) -> None:
    prefix = f"bounded{time.monotonic_ns()}"
    settings = RouterSettings(
        providers={"openai": fake_upstream.provider()},
        groups={"chat": {"members": ["openai/gpt-4o"], "cache": {}}},
        api_keys={"alice": _ALICE},
        state_url=redis_server.url,
        state_key_prefix=prefix,
        cache_max_bytes=1000,
    )
    fake_upstream.script("gpt-4o", reply.ok("x" * 300))
    router = ModelRouter(Starlette(), settings=settings)
    with AppServer(router) as server:
        polled(lambda: router.state.link.up, within=10, what="the shared store")  # type: ignore[attr-defined]
        client = _openai(server)
        for n in range(5):
            client.chat.completions.create(model="group/chat", messages=[{"role": "user", "content": f"q{n}"}])
        first = client.chat.completions.with_raw_response.create(
            model="group/chat", messages=[{"role": "user", "content": "q0"}]
        )
        last = client.chat.completions.with_raw_response.create(
            model="group/chat", messages=[{"role": "user", "content": "q4"}]
        )
    assert (first.headers["x-router-cache"], last.headers["x-router-cache"]) == ("miss", "hit")
    with redis_client.Redis.from_url(redis_server.url) as store:
        assert 0 < int(store.get(f"{prefix}:cache:bytes") or 0) <= 1000
        assert len(store.keys(f"{prefix}:cache:e:*")) <= 2


def test_a_translated_answer_of_an_anthropic_member_is_stored_and_served_in_openais_shapes(
    fake_upstream: FakeUpstream, fake_anthropic_upstream: FakeUpstream
) -> None:
    fake_anthropic_upstream.script("claude", reply.ok("Translated for you"))
    providers = {"claude": fake_anthropic_upstream.provider()}
    groups = {"chat": {"members": ["claude/claude"], "cache": {}}}
    with _served(fake_upstream, providers=providers, groups=groups) as (server, _, _):
        client = _openai(server)
        streamed = _streamed_text(client.chat.completions.create(model="group/chat", messages=_HI, stream=True))  # type: ignore[arg-type]
        whole = client.chat.completions.with_raw_response.create(model="group/chat", messages=_HI)  # type: ignore[arg-type]
    assert streamed == whole.parse().choices[0].message.content == "Translated for you"
    assert whole.headers["x-router-cache"] == "hit" and whole.headers["x-router-model"] == "claude/claude"
    assert len(fake_anthropic_upstream.hits) == 1
