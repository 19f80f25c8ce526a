"""The semantic response cache (``cache.semantic``): a paraphrase of the last user message is
served the stored answer when its embedding is close enough (cosine ≥ ``threshold``), only within
the same conversation and caller, and misses below the threshold or when the embedding cannot
be had; a fleet's processes index each other's entries through Redis.

The embeddings come from a fake upstream that answers ``/embeddings`` with vectors the test
chose for each text (and counts the calls), the answers from the test kit's fake.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import openai
import pytest
from starlette.applications import Starlette

from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import AppServer, FakeUpstream, Hit, reply

from .fleet import RedisServer
from .waiting import polled

_KEY = "rk-alice-0123456789abcdef"
_OTHER = "rk-bob-0123456789abcdef0"

#: Unit vectors at known angles to the first: cosine 1.0, 0.98, 0.9 and 0.0 with it.
_VECTORS = {
    "What is the capital of France?": [1.0, 0.0, 0.0],
    "Which city is France's capital?": [0.98, math.sqrt(1 - 0.98**2), 0.0],
    "What is France famous for?": [0.9, math.sqrt(1 - 0.9**2), 0.0],
    "How tall is Everest?": [0.0, 0.0, 1.0],
}


class Embeddings(FakeUpstream):
    """A fake OpenAI upstream whose ``/embeddings`` answers each text with its chosen vector;
    a text it has no vector for gets a 500 (an embedding that cannot be had)."""

    def reply_for(self, hit: Hit) -> reply.Reply:
        if hit.path.endswith("/embeddings"):
            text = (hit.body or {}).get("input")
            vector = _VECTORS.get(text) if isinstance(text, str) else None
            if vector is None:
                return reply.status(500)
            body = {"object": "list", "data": [{"object": "embedding", "index": 0, "embedding": vector}]}
            return reply.raw(json.dumps(body).encode(), headers={"content-type": "application/json"})
        return super().reply_for(hit)

    def embeddings(self) -> int:
        return sum(1 for hit in self.hits if hit.path.endswith("/embeddings"))

    def chats(self) -> int:
        return sum(1 for hit in self.hits if hit.path.endswith("/chat/completions"))


@pytest.fixture(scope="module")
def upstream() -> Iterator[Embeddings]:
    with Embeddings() as served:
        yield served


@pytest.fixture(autouse=True)
def _fresh(upstream: Embeddings) -> None:
    upstream.reset()


def _settings(upstream: Embeddings, **overrides: Any) -> RouterSettings:
    semantic = {"embed": "openai/text-embedding-3-small", "threshold": 0.95, **overrides.pop("semantic", {})}
    return RouterSettings(
        providers={"openai": upstream.provider()},
        groups={"chat": {"members": ["openai/gpt-4o"], "cache": {"semantic": semantic}}},
        api_keys={"alice": _KEY, "bob": _OTHER},
        **overrides,
    )


@contextmanager
def _served(settings: RouterSettings) -> Iterator[AppServer]:
    with AppServer(ModelRouter(Starlette(), settings=settings)) as server:
        yield server


def _ask(server: AppServer, text: str, *, before: list[dict[str, str]] | None = None, key: str = _KEY) -> Any:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)
    messages = [*(before or []), {"role": "user", "content": text}]
    return client.chat.completions.with_raw_response.create(model="group/chat", messages=messages)  # type: ignore[arg-type]


def test_a_paraphrase_above_the_threshold_is_served_the_stored_answer(upstream: Embeddings) -> None:
    upstream.script("gpt-4o", reply.ok("Paris."), reply.ok("It is famous for many things."))
    with _served(_settings(upstream)) as server:
        first = _ask(server, "What is the capital of France?")
        paraphrase = _ask(server, "Which city is France's capital?")
        further = _ask(server, "What is France famous for?")
    assert first.headers["x-router-cache"] == "miss"
    assert paraphrase.headers["x-router-cache"] == "semantic-hit"
    assert float(paraphrase.headers["x-router-cache-similarity"]) == pytest.approx(0.98, abs=1e-3)
    assert paraphrase.headers["x-router-attempts"] == "0"
    assert paraphrase.parse().choices[0].message.content == "Paris."
    assert further.headers["x-router-cache"] == "miss"  # cosine 0.9: below the threshold
    assert further.parse().choices[0].message.content == "It is famous for many things."
    assert upstream.chats() == 2


def test_the_rest_of_the_conversation_and_the_caller_must_match_exactly(upstream: Embeddings) -> None:
    with _served(_settings(upstream)) as server:
        _ask(server, "What is the capital of France?")
        earlier = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]
        other_context = _ask(server, "Which city is France's capital?", before=earlier)
        other_caller = _ask(server, "Which city is France's capital?", key=_OTHER)
    assert other_context.headers["x-router-cache"] == other_caller.headers["x-router-cache"] == "miss"
    # A context with no entry at all asks for no embedding on lookup (only to index the answer).
    assert upstream.chats() == 3


def test_an_embedding_that_cannot_be_had_is_a_miss_and_never_a_failure(upstream: Embeddings) -> None:
    with _served(_settings(upstream)) as server:
        _ask(server, "What is the capital of France?")
        unknown = _ask(server, "Tell me about France's capital, please.")  # the fake has no vector: 500
    assert unknown.headers["x-router-cache"] == "miss"
    assert unknown.parse().choices[0].message.content
    assert upstream.chats() == 2


def test_a_fleets_processes_index_each_others_entries_through_redis(
    upstream: Embeddings, redis_server: RedisServer
) -> None:
    settings = _settings(upstream, state_url=redis_server.url, state_key_prefix=f"semantic{time.monotonic_ns()}")
    routers = [ModelRouter(Starlette(), settings=settings) for _ in range(2)]
    with AppServer(routers[0]) as one, AppServer(routers[1]) as two:
        for router in routers:
            polled(lambda router=router: router.state.link.up, within=10, what="the shared store")  # type: ignore[attr-defined]
        assert _ask(one, "What is the capital of France?").headers["x-router-cache"] == "miss"
        paraphrase = _ask(two, "Which city is France's capital?")
    assert paraphrase.headers["x-router-cache"] == "semantic-hit"
    assert upstream.chats() == 1
