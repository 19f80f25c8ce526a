"""Token counts read after a response (usage.py), the catalog, and the context-window decisions."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest

from asgi_router.attempts.bookkeeping import Bookkeeper
from asgi_router.attempts.outcomes import Committed
from asgi_router.attempts.usage import LAST_CHUNKS, TAIL_BYTES, LastChunks, Tail, count_tokens, find_usage
from asgi_router.config.catalog_settings import ModelInfo
from asgi_router.core.candidate import Candidate
from asgi_router.core.classify import DEFAULT_FAILOVER, PROVIDER_WORDS_CAP, refine_client_error
from asgi_router.core.router_errors import OVERFLOW_SENTENCE, AttemptSummary, exhausted_error
from asgi_router.resilience.stats import InMemoryStats, Limits
from asgi_router.responses.answer import _streamed_usage
from asgi_router.responses.relay import RelayResult
from asgi_router.routing.catalog import Catalog
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.policy import GroupPolicy


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


# --- usage --------------------------------------------------------------------------------------


def test_find_usage_reads_a_non_streaming_body() -> None:
    body = json.dumps({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}})
    assert find_usage(body.encode()) == (12, 7, 0, 0)


def test_find_usage_takes_the_final_sse_chunk_and_skips_null_usage() -> None:
    stream = (
        _sse({"choices": [{"delta": {"content": "hi"}}], "usage": None})
        + _sse({"choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 2}})
        + b"data: [DONE]\n\n"
    )
    assert find_usage(stream) == (30, 2, 0, 0)
    only_null = _sse({"choices": [], "usage": None})
    assert find_usage(only_null) is None


def test_find_usage_reads_anthropics_counts_cache_included() -> None:
    message = {"type": "message", "usage": {"input_tokens": 20, "cache_read_input_tokens": 5, "output_tokens": 9}}
    assert find_usage(json.dumps(message).encode()) == (25, 9, 5, 0)  # 5 of them read from the cache


def test_find_usage_reads_an_embeddings_prompt_as_a_measured_usage_with_no_output() -> None:
    body = {"object": "list", "data": [], "usage": {"prompt_tokens": 8, "total_tokens": 8}}
    assert find_usage(json.dumps(body).encode()) == (8, 0, 0, 0)
    counted = count_tokens(json.dumps(body).encode(), prompt_estimate=100)
    assert (counted.prompt, counted.completion, counted.measured) == (8, 0, True)


def test_find_usage_reads_a_responses_usage_whose_input_counts_its_cached_tokens() -> None:
    usage = {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 7, "total_tokens": 18}
    completed = {"type": "response.completed", "response": {"object": "response", "usage": usage}}
    assert find_usage(b"event: response.completed\n" + _sse(completed)) == (11, 7, 4, 0)  # 4 of the 11 read cached


@pytest.mark.parametrize(("cached", "read"), [(4, 4), (40, 11)])
def test_find_usage_reads_a_compact_responses_usage_as_the_parse_does(cached: int, read: int) -> None:
    usage = {"input_tokens": 11, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": 7}
    compact = json.dumps({"usage": {**usage, "total_tokens": 18}}, separators=(",", ":")).encode()
    spaced = json.dumps({"usage": {**usage, "total_tokens": 18}}).encode()
    assert find_usage(compact) == find_usage(spaced) == (11, 7, read, 0)  # cached tokens within the input
    too_many = compact.replace(b'"output_tokens":7', b'"output_tokens":99999999999')
    assert find_usage(too_many) is None


def test_find_usage_joins_an_anthropic_streams_input_and_final_output() -> None:
    start = {"type": "message_start", "message": {"usage": {"input_tokens": 11, "output_tokens": 1}}}
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}}
    stream = b"event: message_start\n" + _sse(start) + b"event: message_delta\n" + _sse(delta)
    assert find_usage(stream) == (11, 7, 0, 0)
    assert find_usage(b"event: message_delta\n" + _sse(delta)) == (None, 7, 0, 0)  # the start fell out of the tail
    counted = count_tokens(b"event: message_delta\n" + _sse(delta), prompt_estimate=40, chunks=30)
    assert (counted.prompt, counted.completion, counted.measured) == (40, 7, True)


def _streamed(parts: list[bytes], sent: list[bytes], relayed: bool = True) -> tuple[bytes | None, int | None]:
    """What the answer phase hands the bookkeeper for a stream that held ``parts`` for commit and
    sent ``sent`` (the held parts first), where an estimate may be needed; ``relayed=False``: the
    relay was cancelled after ``sent``."""
    committed = Committed(Candidate("p", "m"), cast(Any, None), b"".join(parts), cast(Any, None), 0.0, 0.0, 0.0, 1)
    committed.parts = tuple(parts) if len(parts) > 1 else None
    recent = LastChunks(maxlen=LAST_CHUNKS)
    for chunk in sent:
        recent.add(chunk)
    before_last = sent[-2] if len(sent) > 1 else b""
    result = RelayResult(sum(map(len, sent)), "served", len(sent), before_last, sent[-1]) if relayed else None
    return _streamed_usage(committed, recent, result, len(sent))


def _pieces(event: bytes) -> list[bytes]:
    """An event as an upstream's writes may arrive: in three pieces."""
    return [event[:3], event[3:-1], event[-1:]]


def test_a_streams_usage_is_read_from_its_held_chunks_and_its_last_ones_however_they_arrived() -> None:
    start = {"type": "message_start", "message": {"usage": {"input_tokens": 11, "output_tokens": 1}}}
    delta = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}}
    head = _pieces(b"event: message_start\n" + _sse(start))
    text = [_sse({"type": "content_block_delta", "index": 0, "delta": {"text": "x" * 100}})] * 2000  # past 64 KiB
    ending = _pieces(b"event: message_delta\n" + _sse(delta)) + _pieces(b"event: message_stop\ndata: {}\n\n")
    data, chunks = _streamed(head, [*head, *text, *ending])
    assert data is not None and chunks == 2009
    assert find_usage(data) == (11, 7, 0, 0)  # Anthropic's prompt, from its first event, however long the stream
    assert len(data) < 2000  # the held chunks and the last few: no tail of the stream kept


@pytest.mark.parametrize("count", [1, 2, 3, 4, 12])
def test_a_short_streams_chunks_are_each_read_once_when_the_held_ones_are_among_the_last(count: int) -> None:
    sent = [b"%d;" % index for index in range(count)]
    held = sent[: min(count, 2)]
    data, chunks = _streamed(held, sent)
    expected = b"".join(sent) if count <= LAST_CHUNKS + 2 else b"".join(held + sent[-LAST_CHUNKS:])
    assert data == expected and chunks == count


def test_a_cancelled_relay_still_reads_its_held_and_last_chunks() -> None:
    data, chunks = _streamed([b"a"], [b"a", b"b", b"c"], relayed=False)
    assert (data, chunks) == (b"abc", 3)


def test_find_usage_is_not_fooled_by_the_word_usage_in_content() -> None:
    content = 'the "usage" is {"prompt_tokens": 999, "completion_tokens": 999}'
    body = json.dumps({"choices": [{"message": {"content": content}}]}).encode()
    assert find_usage(body) is None


@pytest.mark.parametrize(
    "data", [b"", b'"usage"', b'"usage": {broken', b'"usage": {"prompt_tokens": -1, "completion_tokens": 2}']
)
def test_find_usage_of_junk_is_none(data: bytes) -> None:
    assert find_usage(data) is None


def test_tail_keeps_at_most_the_last_limit_bytes_and_counts_every_chunk() -> None:
    tail = Tail(limit=10)
    for index in range(20):
        tail.add(f"{index:02d}.".encode())
    assert tail.bytes() == b"6.17.18.19."[-10:]
    assert tail.chunks == 20
    assert sum(len(chunk) for chunk in tail._chunks) < 10 + 3  # only what the last 10 bytes need


def test_tail_default_limit_is_64_kib_even_for_one_huge_chunk() -> None:
    tail = Tail()
    tail.add(b"x" * (TAIL_BYTES * 3))
    tail.add(b"end")
    assert len(tail.bytes()) == TAIL_BYTES
    assert tail.bytes().endswith(b"end")


def test_count_tokens_prefers_measured_usage_and_else_estimates() -> None:
    measured = count_tokens(b'{"usage": {"prompt_tokens": 5, "completion_tokens": 6}}', prompt_estimate=100)
    assert (measured.prompt, measured.completion, measured.measured, measured.total) == (5, 6, True, 11)
    streamed = count_tokens(b"data: [DONE]\n\n", prompt_estimate=40, chunks=25)
    assert (streamed.prompt, streamed.completion, streamed.measured) == (40, 25, False)
    whole = count_tokens(b"x" * 700, prompt_estimate=40)
    assert (whole.prompt, whole.completion) == (40, 100)


# --- catalog ------------------------------------------------------------------------------------

_CATALOG = Catalog(
    {
        "a/small": ModelInfo(context_window=1000, max_output_tokens=200, input_price=1.0, output_price=2.0),
        "a/window": ModelInfo(context_window=1000),
    }
)


@pytest.mark.parametrize(
    ("key", "prompt", "max_tokens", "fits"),
    [
        ("a/small", 800, 200, True),
        ("a/small", 801, 200, False),
        ("a/small", 10, 201, False),  # over the output cap
        ("a/small", 999, None, True),
        ("a/small", 1001, None, False),
        ("a/window", 10, 990, True),
        ("not/listed", 10**9, 10**9, True),
    ],
)
def test_catalog_fits_prompt_plus_max_tokens_in_the_window(
    key: str, prompt: int, max_tokens: int | None, fits: bool
) -> None:
    assert _CATALOG.fits(key, prompt, max_tokens) is fits


def test_catalog_cost_is_per_million_tokens_and_none_when_unpriced() -> None:
    assert _CATALOG.cost("a/small", 1_000_000, 500_000) == pytest.approx(2.0)
    assert _CATALOG.cost("a/window", 1, 1) is None
    assert _CATALOG.is_priced("a/small") and not _CATALOG.is_priced("a/window")


# --- admission queries (bookkeeping) --------------------------------------------------------------------


def _book(stats: InMemoryStats | None = None) -> Bookkeeper:
    return Bookkeeper(stats or InMemoryStats(), _CATALOG, ["a/small", "a/other"], ["a/other"])


def test_a_candidate_whose_window_cannot_hold_the_request_does_not_fit() -> None:
    facts = RequestFacts({"messages": [{"role": "user", "content": "x" * 4000}]})  # ~1004 tokens
    assert not _book().fits("a/small", facts)
    assert _book().fits("a/unlisted", facts)


def test_an_over_budget_member_says_when_its_usage_frees_up() -> None:
    stats = InMemoryStats()
    policy = GroupPolicy("g", limits={"a/other": Limits(rpm=1)})
    book = _book(stats)
    assert book.over_budget("a/other", policy, RequestFacts({})) is None
    book.started("a/other", RequestFacts({}))
    frees_in = book.over_budget("a/other", policy, RequestFacts({}))
    assert frees_in is not None and 0 < frees_in <= 60
    assert book.over_budget("a/other", None, RequestFacts({})) is None  # limits belong to a group's plan


def test_failed_attempt_counts_the_request_but_gives_back_its_token_estimate() -> None:
    stats = InMemoryStats()
    book = _book(stats)
    facts = RequestFacts({"messages": [{"role": "user", "content": "x" * 400}]})
    book.started("a/other", facts)
    assert stats.usage("a/other").tokens == facts.prompt_tokens
    book.failed("a/other", facts, "upstream_5xx", 0.1, 30.0)
    assert (stats.usage("a/other").requests, stats.usage("a/other").tokens) == (1, 0)
    assert stats.in_flight("a/other") == 0


def test_failure_counts_as_the_first_byte_timeout_but_a_refusal_does_not() -> None:
    stats = InMemoryStats()
    book = _book(stats)
    book.started("a/small", RequestFacts({}))
    book.failed("a/small", RequestFacts({}), "client_error", 0.1, 30.0)
    assert stats.latency("a/small") is None
    book.started("a/small", RequestFacts({}))
    book.failed("a/small", RequestFacts({}), "connect_error", 0.01, 30.0)
    assert stats.latency("a/small") == 30.0


def test_untracked_keys_leave_no_trace_in_the_statistics() -> None:
    stats = InMemoryStats()
    book = _book(stats)
    book.started("x/client-chosen", RequestFacts({}))
    book.committed("x/client-chosen", 0.2)
    book.finished("x/client-chosen", RequestFacts({}), b"{}")
    assert stats._in_flight == {} and stats._ema == {} and stats._usage == {}


# --- classification and the exhausted status -----------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error", "reason"),
    [
        (400, {"code": "context_length_exceeded", "message": "too long"}, "context_window"),
        (400, {"code": None, "message": "This model's maximum context length is 8192 tokens"}, "context_window"),
        (400, {"message": "prompt is too long: 210000 tokens > 200000 maximum"}, "context_window"),
        (400, {"code": "invalid_value", "message": "temperature must be <= 2"}, "client_error"),
        (422, {"code": "context_length_exceeded"}, "client_error"),  # only a 400 is refined
        (400, "context_length_exceeded", "client_error"),
    ],
)
def test_refine_client_error_finds_context_exceeded_400s_only(status: int, error: object, reason: str) -> None:
    assert refine_client_error(status, json.dumps({"error": error}).encode())[0] == reason


def test_refine_client_error_of_a_non_json_body_is_client_error() -> None:
    assert refine_client_error(400, b"<html>bad request</html>") == ("client_error", None)


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (
            {"code": "context_length_exceeded", "message": "This model's maximum context length is 8192 tokens."},
            "This model's maximum context length is 8192 tokens.",
        ),
        (
            {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"},
            "prompt is too long: 210000 tokens > 200000 maximum",
        ),
        ({"code": "context_length_exceeded"}, None),  # no message: nothing of the provider's to keep
        ({"code": "context_length_exceeded", "message": 42}, None),
        ({"code": "context_length_exceeded", "message": " \r\n\t "}, None),
        # One printable line: CR/LF, escapes, NUL and bidi overrides never reach the client's message.
        (
            {"code": "context_length_exceeded", "message": "too\r\nlong\x1b[31m\x00 \u202eevil\u202c  end"},
            "too long [31m evil end",
        ),
    ],
)
def test_a_context_window_400_keeps_the_providers_own_words_as_one_printable_line(
    error: dict[str, object], words: str | None
) -> None:
    assert refine_client_error(400, json.dumps({"error": error}).encode()) == ("context_window", words)


def test_the_providers_words_are_bounded() -> None:
    reason, words = refine_client_error(
        400, json.dumps({"error": {"code": "context_length_exceeded", "message": "x" * 5000}}).encode()
    )
    assert reason == "context_window" and words is not None
    assert len(words) == PROVIDER_WORDS_CAP and words.endswith("...")


def test_context_window_fails_over_by_default() -> None:
    assert "context_window" in DEFAULT_FAILOVER
    assert "client_error" not in DEFAULT_FAILOVER


def test_exhausted_with_every_candidate_over_budget_is_a_429_with_retry_after() -> None:
    error = exhausted_error(
        [
            AttemptSummary("a/m", "over_budget", retry_after=12.0, skipped=True),
            AttemptSummary("b/m", "over_budget", retry_after=3.5, skipped=True),
        ]
    )
    assert (error.status, error.code, error.retry_after) == (429, "rate_limit_exceeded", 3.5)


def test_exhausted_with_no_window_large_enough_is_a_400_context_length_exceeded() -> None:
    error = exhausted_error(
        [AttemptSummary("a/m", "context_window", skipped=True), AttemptSummary("b/m", "context_window", 400)]
    )
    assert (error.status, error.code) == (400, "context_length_exceeded")
    assert error.message.splitlines() == [OVERFLOW_SENTENCE, "a/m: context_window", "b/m: context_window (400)"]


def test_an_overflow_message_starts_with_the_last_providers_own_words_then_one_line_per_candidate() -> None:
    error = exhausted_error(
        [
            AttemptSummary("a/m", "context_window", 400, words="This model's maximum context length is 8192 tokens."),
            AttemptSummary("b/m", "context_window", skipped=True),
            AttemptSummary("c/m", "context_window", 400, words="prompt is too long: 210000 tokens > 200000 maximum"),
            AttemptSummary("d/m", "context_window", 400),  # said nothing in words: the last that did wins
        ]
    )
    assert (error.status, error.code) == (400, "context_length_exceeded")
    assert error.message.splitlines() == [
        "prompt is too long: 210000 tokens > 200000 maximum",
        "a/m: context_window (400)",
        "b/m: context_window",
        "c/m: context_window (400)",
        "d/m: context_window (400)",
    ]
    assert [attempt["candidate"] for attempt in json.loads(error.body())["error"]["attempts"]] == [
        "a/m",
        "b/m",
        "c/m",
        "d/m",
    ]


def test_the_routers_own_overflow_sentence_holds_the_words_clients_detect_an_overflow_by() -> None:
    # litellm's mapping of an OpenAI-compatible 400 raises ContextWindowExceededError (and so runs
    # its context_window_fallbacks) when the lowercased message contains this substring.
    assert "this model's maximum context length is" in OVERFLOW_SENTENCE.lower()
    assert OVERFLOW_SENTENCE.isprintable()


def test_provider_words_are_kept_only_for_an_overflow() -> None:
    words = "This model's maximum context length is 8192 tokens."
    error = exhausted_error(
        [AttemptSummary("a/m", "context_window", 400, words=words), AttemptSummary("b/m", "timeout")]
    )
    assert error.status == 502  # mixed reasons: not an overflow, so no provider's words lead
    assert words not in error.message


def test_exhausted_status_is_decided_by_contacted_candidates_not_skips() -> None:
    error = exhausted_error([AttemptSummary("a/m", "context_window", skipped=True), AttemptSummary("b/m", "timeout")])
    assert error.status == 504
