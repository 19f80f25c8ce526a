"""The response cache's pure parts, case by case: the key (what makes two requests the same),
reading an answer into an entry (only a complete one), writing an entry again in every shape
(read back, it says the same), the in-memory store's bounds (bytes, time, use order) and the
semantic index's (contexts apart, ``max_entries``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from asgi_router.caching.cache_key import cache_key, context_key, last_user_text
from asgi_router.caching.memory_entries import MemoryEntries
from asgi_router.caching.replay_shapes import PIECE_CHARS, render
from asgi_router.caching.response_cache import Pending, ResponseCache
from asgi_router.caching.semantic_index import SemanticIndex, unit
from asgi_router.caching.stored_answer import StoredAnswer, ToolUse, read_answer
from asgi_router.config.cache_settings import CacheSettings
from asgi_router.request.request_state import RequestState

from ..doubles import FakeClock

pytestmark = pytest.mark.anyio

_BODY = {"model": "group/chat", "messages": [{"role": "user", "content": "hi  there"}], "temperature": 0.2}


def test_field_order_whitespace_and_delivery_fields_do_not_change_the_key() -> None:
    reordered = {"temperature": 0.2, "messages": _BODY["messages"], "model": "group/chat"}
    delivery = {**_BODY, "stream": True, "stream_options": {"include_usage": True}, "user": "u1", "metadata": {}}
    delivery["store"] = False
    key = cache_key(_BODY, "chat", "group/chat#default", "alice")
    assert cache_key(reordered, "chat", "group/chat#default", "alice") == key
    assert cache_key(delivery, "chat", "group/chat#default", "alice") == key


@pytest.mark.parametrize(
    ("body", "protocol", "ref", "caller"),
    [
        ({**_BODY, "messages": [{"role": "user", "content": "hi there"}]}, "chat", "group/chat#default", "alice"),
        ({**_BODY, "temperature": 0.3}, "chat", "group/chat#default", "alice"),
        (_BODY, "messages", "group/chat#default", "alice"),
        (_BODY, "chat", "group/cheap#default", "alice"),
        (_BODY, "chat", "group/chat#long-prompts", "alice"),
        (_BODY, "chat", "group/chat#default", "bob"),
        (_BODY, "chat", "group/chat#default", None),
    ],
    ids=["string contents", "a parameter", "protocol", "group", "rule", "caller", "shared"],
)
def test_what_the_answer_depends_on_changes_the_key(
    body: dict[str, object], protocol: str, ref: str, caller: str | None
) -> None:
    assert cache_key(body, protocol, ref, caller) != cache_key(_BODY, "chat", "group/chat#default", "alice")


def test_the_context_key_leaves_out_only_the_last_user_message() -> None:
    def chat(*turns: str) -> dict[str, object]:
        roles = ["user", "assistant"] * len(turns)
        return {"model": "m", "messages": [{"role": r, "content": t} for r, t in zip(roles, turns, strict=False)]}

    asked = context_key(chat("Which is larger?", "Paris.", "Yes"), "chat", "r", None)
    assert asked == context_key(chat("Which is larger?", "Paris.", "Sure"), "chat", "r", None)
    assert asked != context_key(chat("Is it raining?", "Paris.", "Yes"), "chat", "r", None)
    parts = {
        "role": "user",
        "content": [{"type": "text", "text": "a"}, {"type": "image_url"}, {"type": "text", "text": "b"}],
    }
    assert last_user_text({"messages": [parts]}) == "a\nb"
    assert context_key({"messages": [{"role": "system", "content": "s"}]}, "chat", "r", None) is None


_ANSWER = StoredAnswer(
    "chatcmpl-1",
    "gpt-4o",
    "Hello, " + "é" * (PIECE_CHARS * 2),
    (ToolUse("call_1", "lookup", '{"city": "Paris"}'),),
    "tool_calls",
    12,
    34,
)


@pytest.mark.parametrize("anthropic", [False, True], ids=["openai", "anthropic"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_entry_written_in_any_shape_reads_back_as_the_same_answer(anthropic: bool, stream: bool) -> None:
    answer = _ANSWER if not anthropic else StoredAnswer(**{**_answer_fields(), "finish": "tool_use"})
    _, body = render(answer, anthropic=anthropic, stream=stream, include_usage=True)
    assert read_answer(body, anthropic=anthropic, stream=stream) == answer


def _answer_fields() -> dict[str, object]:
    return {name: getattr(_ANSWER, name) for name in StoredAnswer.__dataclass_fields__}


def test_a_replayed_stream_says_the_text_in_pieces_and_usage_only_when_asked() -> None:
    _, without = render(_ANSWER, anthropic=False, stream=True, include_usage=False)
    _, with_usage = render(_ANSWER, anthropic=False, stream=True, include_usage=True)
    events = [e.removeprefix(b"data: ") for e in without.split(b"\n\n")[:-1]]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert (
        sum(1 for c in chunks if c["choices"][0]["delta"].get("content")) == 3
    )  # the text, 64 characters at most each
    assert b'"usage"' not in without and b'"usage"' in with_usage


@pytest.mark.parametrize(
    ("body", "anthropic", "stream"),
    [
        (b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n', False, True),
        (
            b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]}\n\ndata: {"error"',
            False,
            True,
        ),
        (b'data: {"error":{"message":"broke"}}\n\ndata: [DONE]\n\n', False, True),
        (b'{"choices":[{"index":0,"message":{"role":"assistant","content":"a"},"finish_reason":null}]}', False, False),
        (
            b'{"choices":[{"index":0,"message":{"role":"assistant","content":"no"},"finish_reason":"content_filter"}]}',
            False,
            False,
        ),
        (
            b'{"choices":[{"index":0,"message":{"content":null,"refusal":"I will not"},"finish_reason":"stop"}]}',
            False,
            False,
        ),
        (
            b'{"choices":[{"index":0,"message":{"content":"a"},"finish_reason":"stop"},{"index":1,"message":{"content":"b"},"finish_reason":"stop"}]}',
            False,
            False,
        ),
        (b'{"error":{"message":"x"}}', False, False),
        (b'{"type":"message","content":[{"type":"thinking","thinking":"hm"}],"stop_reason":"end_turn"}', True, False),
        (b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","model":"c"}}\n\n', True, True),
    ],
    ids=[
        "no [DONE]",
        "cut mid-event",
        "in-band error",
        "no finish reason",
        "content filter",
        "refusal",
        "two choices",
        "an error body",
        "thinking block",
        "no message_stop",
    ],
)
def test_an_incomplete_or_unrepeatable_answer_reads_as_nothing_to_store(
    body: bytes, anthropic: bool, stream: bool
) -> None:
    assert read_answer(body, anthropic=anthropic, stream=stream) is None


def test_an_entry_survives_its_stored_form_and_garbage_reads_as_none() -> None:
    assert StoredAnswer.loads(_ANSWER.dumps()) == _ANSWER
    assert StoredAnswer.loads(b"[1, 2]") is None and StoredAnswer.loads(b"\xff") is None


async def test_memory_entries_are_bounded_by_bytes_least_recently_used_first_and_expire() -> None:
    clock = FakeClock()
    entries = MemoryEntries(30, clock)
    await entries.put("a", b"1" * 10, ttl=100)
    await entries.put("b", b"2" * 10, ttl=100)
    await entries.put("c", b"3" * 10, ttl=5)
    assert await entries.get("a") == b"1" * 10  # a is now the most recently used
    await entries.put("d", b"4" * 10, ttl=100)
    assert await entries.get("b") is None and entries.size() == 30
    clock.advance(5)
    assert await entries.get("c") is None and entries.size() == 20
    await entries.put("huge", b"x" * 31, ttl=100)  # larger than the whole store: not kept
    assert await entries.get("huge") is None and await entries.get("a") is not None


async def test_an_entrys_ttl_runs_from_its_answers_last_byte_not_from_the_store_after_it() -> None:
    clock = FakeClock()
    entries = MemoryEntries(10_000, clock)
    cache = ResponseCache(entries, wall=clock.wall, clock=clock)
    sent: list[object] = []

    async def send(message: object) -> None:
        sent.append(message)

    async def receive() -> dict[str, object]:
        return {"type": "http.disconnect"}

    state = RequestState({"type": "http", "headers": []}, receive, send, "req-1", "/v1/chat/completions")
    state.status, state.winner = 200, "openai/gpt-4o"
    pending = Pending("k", 10, "chat", CacheSettings(ttl=10), send, clock)
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
    }
    await pending({"type": "http.response.body", "body": json.dumps(answer).encode(), "more_body": True})
    clock.advance(1)
    await pending({"type": "http.response.body", "body": b"", "more_body": False})  # the client has it all
    clock.advance(4)  # the store runs late
    await cache.keep(pending, state)
    kept = await entries.get("k")
    assert kept is not None and StoredAnswer.loads(kept) is not None
    assert StoredAnswer.loads(kept).stored_at == clock.wall() - 4  # type: ignore[union-attr]
    clock.advance(5.9)
    assert await entries.get("k") is not None
    clock.advance(0.1)  # 10 s after the last byte, not after the store
    assert await entries.get("k") is None
    late = Pending("late", 3, "chat", CacheSettings(ttl=3), send, clock)
    await late({"type": "http.response.body", "body": json.dumps(answer).encode(), "more_body": False})
    clock.advance(3)
    await cache.keep(late, state)  # its time ran out before the store: not kept
    assert await entries.get("late") is None and len(sent) == 3


def test_the_semantic_index_compares_only_within_a_context_and_keeps_at_most_max_entries() -> None:
    index = SemanticIndex(max_entries=2)
    index.add("ctx-a", "k1", [1.0, 0.0])
    index.add("ctx-b", "k2", [0.0, 1.0])
    found = index.nearest("ctx-a", [3.0, 0.1])  # not normalised: the index does it
    assert found is not None and found[0] == "k1" and found[1] == pytest.approx(0.9994, abs=1e-3)
    assert index.nearest("ctx-c", [1.0, 0.0]) is None and not index.has("ctx-c")
    index.add("ctx-a", "k3", [0.0, 1.0])  # the oldest (k1) goes
    assert len(index) == 2 and index.nearest("ctx-a", [1.0, 0.0]) == ("k3", 0.0)
    index.add("ctx-a", "zero", [0.0, 0.0])  # no direction: not indexed
    assert len(index) == 2 and unit(b"") is None
    index.add("ctx-b", "packed", np.asarray([0.0, 2.0], dtype=np.float32).tobytes())  # as the fleet's stream carries it
    assert index.nearest("ctx-b", [0.0, 1.0]) == ("packed", pytest.approx(1.0))
