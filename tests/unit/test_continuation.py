"""Continuing a broken stream, piece by piece: the candidate order, what a stream said, the splice,
and the commit rule's reading of a stream's first events."""

from __future__ import annotations

import json

import pytest

from asgi_router.attempts.request_answers import resume_order
from asgi_router.core.candidate import Candidate
from asgi_router.protocols.continuation import Said, Splice, said_so_far
from asgi_router.protocols.first_event import EMPTY, REAL, FirstEvent, shows_text
from asgi_router.responses.whole_events import WholeEvents, complete_events

A, B, C, D = (Candidate(name, "m") for name in "abcd")


@pytest.mark.parametrize(
    ("modes", "broken", "reason", "expected"),
    [
        # after a cut: the same candidate first, then the others in plan order
        (("prefill", "prefill", "prefill", "prefill"), B, "stream_interrupted", [B, A, C, D]),
        # after a stall: the next resumable one first, then the rest in plan order, not the stalled one
        (("prefill", "prefill", "prefill", "prefill"), B, "timeout", [C, A, D]),
        (("prefill", "prefill", "none", "prefix"), B, "timeout", [D, A]),
        # the broken candidate cannot continue: the others do
        (("prefill", "none", "prefill", "none"), B, "stream_interrupted", [A, C]),
        # a stall on the last candidate: nothing comes after it, so plan order from the top
        (("prefill", "prefill", "prefill", "prefill"), D, "timeout", [A, B, C]),
        (("none", "none", "none", "none"), A, "stream_interrupted", []),
    ],
)
def test_resume_order(modes: tuple[str, ...], broken: Candidate, reason: str, expected: list[Candidate]) -> None:
    order = resume_order((A, B, C, D), modes, broken, reason)  # type: ignore[arg-type]
    assert [candidate for candidate, _ in order] == expected
    assert all(mode != "none" for _, mode in order)


def _chunk(delta: dict[str, object], **extra: object) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None, **extra}
    return b"data: " + json.dumps({"id": "x1", "created": 5, "model": "m", "choices": [choice]}).encode() + b"\n\n"


def test_said_so_far_reads_the_text_and_refuses_what_cannot_be_continued() -> None:
    role, hello, world = (
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Hel"}),
        _chunk({"content": "lo"}),
    )
    assert said_so_far(role + hello + world) == Said("Hello", "x1", 5)
    tool = _chunk({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f", "arguments": ""}}]})
    assert said_so_far(role + hello + tool) == "a tool call or reasoning had started"
    assert said_so_far(role + _chunk({"reasoning_content": "hmm"})) == "a tool call or reasoning had started"
    assert said_so_far(role + _chunk({"content": "a"}, logprobs={"content": []})) == "logprobs were asked for"
    assert said_so_far(role + _chunk({"content": "a"}, index=1)) == "more than one choice"
    assert said_so_far(role) == "no text had been sent"


def test_the_splice_keeps_one_id_drops_the_role_delta_and_what_the_prefill_lost_and_sums_usage() -> None:
    splice = Splice(Said("Hello ", "x1", 5), " ", (10, 2))
    head = b'data: {"id":"y","created":9,"model":"n","choices":'
    usage = b'{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}'
    events = (
        head
        + b'[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null}\n\n'
        + head
        + b'[{"index":0,"delta":{"content":" world"}}],"usage":null}\n\n'
        + head
        + b'[],"usage":'
        + usage
        + b"}\n\n"
        + b"data: [DONE]\n\n"
    )
    out = [json.loads(e.removeprefix(b"data: ")) for e in splice.feed(events).split(b"\n\n")[:-2]]
    assert [(c["id"], c["created"], c["model"]) for c in out] == [("x1", 5, "n"), ("x1", 5, "n")]
    assert out[0]["choices"][0]["delta"] == {"content": "world"}
    assert out[1]["usage"] == {"prompt_tokens": 22, "completion_tokens": 5, "total_tokens": 27}
    assert splice.feed(b"data: [DONE]\n\n") == b""  # one stream, one end


def test_the_splice_drops_a_later_role_delta_and_everything_after_its_done() -> None:
    splice = Splice(Said("Hello", "x1", 5), "", (0, 0))
    head = b'data: {"id":"y","created":9,"model":"n","choices":'
    text = splice.feed(head + b'[{"index":0,"delta":{"content":" world"}}]}\n\n')
    assert json.loads(text.removeprefix(b"data: "))["choices"][0]["delta"] == {"content": " world"}
    role = splice.feed(head + b'[{"index":0,"delta":{"role":"assistant"}}]}\n\n')
    with_text = splice.feed(head + b'[{"index":0,"delta":{"role":"assistant","content":"!"}}]}\n\n')
    assert role == b""
    assert json.loads(with_text.removeprefix(b"data: "))["choices"][0]["delta"] == {"content": "!"}
    assert splice.feed(b"data: [DONE]\n\n") == b"data: [DONE]\n\n"
    assert splice.feed(head + b'[{"index":0,"delta":{"content":"more"}}]}\n\ndata: [DONE]\n\n') == b""


@pytest.mark.parametrize(
    ("anthropic", "events", "verdict"),
    [
        (False, [b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'], None),
        (False, [b": keep-alive\n\n", b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n'], REAL),
        (False, [b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}\n\n'], REAL),
        (False, [b'data: {"error":{"message":"x","type":"server_error","code":null}}\n\n'], 500),
        (False, [b'data: {"error":{"message":"x","type":"requests","code":"rate_limit_exceeded"}}\n\n'], 429),
        (False, [b'data: {"error":{"message":"x","code":503}}\n\n'], 503),
        (False, [b"data: [DONE]\n\n"], EMPTY),
        (False, [b'data: {"choices":[{"delta":{"content":""},"finish_reason":"length"}]}\n\n'], REAL),
        (True, [b'event: message_stop\ndata: {"type":"message_stop"}\n\n'], EMPTY),
        (True, [b'data: {"type":"content_block_stop","index":0}\n\n'], None),
        (True, [b'data: {"type":"message_delta","delta":{"stop_reason":null},"usage":{}}\n\n'], None),
        (True, [b'data: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{}}\n\n'], REAL),
        (
            True,
            [
                b'event: message_start\ndata: {"type":"message_start","message":{}}\n\n',
                b'event: ping\ndata: {"type":"ping"}\n\n',
            ],
            None,
        ),
        (True, [b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"x"}}\n\n'], 529),
        (True, [b'event: error\ndata: {"type":"error","error":{"type":"rate_limit_error","message":"x"}}\n\n'], 429),
        (True, [b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'], None),
        (
            True,
            [b'data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t"}}\n\n'],
            REAL,
        ),
        (True, [b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n'], REAL),
    ],
)
def test_a_stream_commits_on_its_first_real_event(anthropic: bool, events: list[bytes], verdict: int | None) -> None:
    reader = FirstEvent(anthropic=anthropic)
    said = None
    for event in events:  # and each event cut in two, as the network may hand it over
        said = reader.feed(event[:7])
        assert said is None
        said = reader.feed(event[7:])
    assert said == verdict


_CONTENT = b'data: {"choices":[{"index":0,"delta":{"content":"Hi"}}]}'


@pytest.mark.parametrize(
    ("chunk", "shown"),
    [
        (_CONTENT + b"\n\n", True),
        (_CONTENT, True),  # the event's line not finished yet: what came says text
        (_CONTENT + b'\n\ndata: {"error":{"message":"x","code":503}}\n\n', True),  # after the commit point
        (b'data: {"error":{"message":"x","content":"y"}}\n\n', False),
        (b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n', False),
        (b": keep-alive\n\n" + _CONTENT + b"\n\n", False),
        (b"event: x\n" + _CONTENT + b"\n\n", False),
        (b'data: {"choices":[{"delta":{"content":"Hi', True),
        (b'data: {"choices":[{"delta":{"content":"', False),
    ],
)
def test_a_first_chunk_shows_text_only_where_its_first_event_commits(chunk: bytes, shown: bool) -> None:
    assert shows_text(chunk) is shown
    if shown and chunk.endswith(b"\n\n"):  # the byte test and the event reader agree
        assert FirstEvent(anthropic=False).feed(chunk) == REAL


def test_the_hold_back_cuts_after_the_last_blank_line() -> None:
    assert complete_events(b"data: a\n\ndata: b") == len(b"data: a\n\n")
    assert complete_events(b"data: a\r\n\r\ndata: b") == len(b"data: a\r\n\r\n")
    assert complete_events(b"data: a\n") == 0
    assert complete_events(b"data: a\n\n") == len(b"data: a\n\n")


def test_the_decision_point_continues_only_a_cut_or_a_stall_within_max_resumes() -> None:
    from asgi_router.attempts.decisions import Decisions
    from asgi_router.attempts.request_answers import Continue

    modes = ("prefill", "prefix", "none", "continue_final_message")
    cut = Decisions.resume((A, B, C, D), modes, A, "stream_interrupted", 0, 2)  # type: ignore[arg-type]
    assert cut == Continue(((A, "prefill"), (B, "prefix"), (D, "continue_final_message")))
    assert Decisions.resume((A, B, C, D), modes, A, "timeout", 1, 2) == Continue(  # type: ignore[arg-type]
        ((B, "prefix"), (D, "continue_final_message"))
    )
    assert Decisions.resume((A, B, C, D), modes, A, "stream_interrupted", 2, 2) is None  # type: ignore[arg-type]
    assert Decisions.resume((A, B, C, D), modes, A, "router_error", 0, 2) is None  # type: ignore[arg-type]
    assert Decisions.resume((A,), ("none",), A, "timeout", 0, 2) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_whole_events_cut_a_stream_fed_byte_by_byte_at_its_blank_lines_only(newline: bytes) -> None:
    events = [b"data: {" + b"x" * n + b"}" + newline + newline for n in (1, 5, 30)]
    whole = WholeEvents()
    out = [whole.cut(bytes([byte])) for byte in b"".join(events) + b"data: {"]
    assert [piece for piece in out if piece] == events  # each event once, when its blank line ended
    assert whole.held == b"data: {"


def test_whole_events_drop_an_unfinished_event_past_its_bound_and_stop_keeping_what_was_said() -> None:
    whole = WholeEvents(max_event_bytes=10, max_said_bytes=12)
    assert whole.cut(b"data: {}\n\ndata: {") == b"data: {}\n\n" and not whole.overflowed
    whole.sent(b"data: {}\n\n")
    assert whole.said() == b"data: {}\n\n"
    assert whole.cut(b"xxxx") == b"" and whole.overflowed and not whole.holding
    whole.sent(b"data: {}\n\n")  # past 12 bytes: nothing kept to continue from
    assert whole.said() is None
