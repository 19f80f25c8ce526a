"""The Responses API's stream as the router reads it (``protocols/openai_responses_events.py``),
and the affinity rule of a follow-up (``attempts/request_answers.py``, ``response_affinity.py``)."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

from asgi_router.attempts.request_answers import not_found, pinned_error, pinned_plan
from asgi_router.attempts.response_affinity import ResponseAffinity
from asgi_router.core.candidate import Candidate
from asgi_router.core.router_errors import RouterError
from asgi_router.protocols.first_event import EMPTY, REAL
from asgi_router.protocols.openai_responses_events import (
    ResponsesEnd,
    ResponsesFirstEvent,
    failed_body,
    response_id_in,
    responses_stream_error,
)
from asgi_router.routing.plan import Plan


def _event(kind: str, **fields: Any) -> bytes:
    return f"event: {kind}\ndata: ".encode() + json.dumps({"type": kind, **fields}).encode() + b"\n\n"


_CREATED = _event("response.created", response={"id": "resp_1", "status": "in_progress"})
_IN_PROGRESS = _event("response.in_progress", response={"id": "resp_1", "status": "in_progress"})


def test_the_lifecycle_events_and_comments_are_held_and_the_response_id_kept() -> None:
    reader = ResponsesFirstEvent()
    assert reader.feed(_CREATED + b": keep-alive\n\n" + _IN_PROGRESS) is None
    assert reader.feed(_event("response.queued", response={"id": "resp_1"})) is None
    assert reader.response_id == "resp_1"


@pytest.mark.parametrize(
    "event",
    [
        _event("response.output_item.added", output_index=0, item={"type": "message"}),
        _event("response.output_text.delta", delta="Hi"),
        _event("response.function_call_arguments.delta", delta="{"),
        _event("response.completed", response={"id": "resp_1", "status": "completed"}),
        _event("response.incomplete", response={"id": "resp_1", "status": "incomplete"}),
    ],
)
def test_an_item_a_delta_or_the_end_commits(event: bytes) -> None:
    reader = ResponsesFirstEvent()
    assert reader.feed(_CREATED + event) == REAL


@pytest.mark.parametrize(
    ("code", "status"),
    [("rate_limit_exceeded", 429), ("server_error", 500), ("invalid_prompt", 400), ("something_new", 500)],
)
def test_a_first_real_event_that_fails_stands_for_the_status_its_code_names(code: str, status: int) -> None:
    failed = _event("response.failed", response={"id": "resp_1", "error": {"code": code, "message": "no"}})
    reader = ResponsesFirstEvent()
    assert reader.feed(_CREATED + failed) == status
    assert reader.failure == (code, "no")
    error = ResponsesFirstEvent()
    assert error.feed(_event("error", code=code, message="said so")) == status
    assert error.failure == (code, "said so")


def _compact(kind: str, **fields: Any) -> bytes:
    """An event as the API writes it: compact JSON, its ``type`` first."""
    data = json.dumps({"type": kind, **fields}, separators=(",", ":")).encode()
    return f"event: {kind}\ndata: ".encode() + data + b"\n\n"


def test_compact_events_are_judged_by_their_type_and_id_alone_and_others_by_a_parse() -> None:
    reader = ResponsesFirstEvent()
    assert reader.feed(_compact("response.created", response={"id": "resp_2", "status": "in_progress"})) is None
    assert reader.response_id == "resp_2"
    # A held event whose ``type`` or ``id`` is not first is still held, its id still read.
    later = _compact("response.in_progress", sequence_number=1, response={"status": "in_progress", "id": "resp_3"})
    assert reader.feed(later) is None
    assert reader.response_id == "resp_3"
    assert reader.feed(_compact("response.output_text.delta", delta="Hi", sequence_number=2)) == REAL
    failed = _compact("response.failed", response={"id": "resp_2", "error": {"code": "rate_limit_exceeded"}})
    failing = ResponsesFirstEvent()
    assert failing.feed(failed) == 429
    assert failing.failure == ("rate_limit_exceeded", "the upstream's response failed")
    broken = ResponsesFirstEvent()  # a held event cut short of valid JSON: held all the same
    assert broken.feed(b'data: {"type":"response.created","response":{"id":"resp_4"\n\n') is None


def test_whole_event_chunks_then_cut_ones_read_as_the_same_stream_cut_anywhere() -> None:
    created = _compact("response.created", response={"id": "resp_5", "status": "in_progress"})
    delta = _compact("response.output_text.delta", delta="Hi")
    reader = ResponsesFirstEvent()
    assert reader.feed(created) is None  # one whole event per chunk: read as it is
    assert reader.feed(b": keep-alive\n\n") is None  # a comment: split as any other chunk
    assert reader.feed(delta[:12]) is None
    assert reader.feed(delta[12:]) == REAL
    assert reader.response_id == "resp_5"
    for size in (1, 9, 40):
        cut = ResponsesFirstEvent()
        stream = created + delta
        verdicts = [cut.feed(stream[at : at + size]) for at in range(0, len(stream), size)]
        assert verdicts[-1] == REAL and set(verdicts[:-1]) == {None}
        assert cut.response_id == "resp_5"


def test_the_end_of_a_compact_stream_is_found_and_a_name_in_text_is_not_one() -> None:
    completed = _compact("response.completed", response={"id": "resp_1", "status": "completed"})
    text = _compact("response.output_text.delta", delta="about response.completed and response.failed")
    for size in (5, 11, 64, len(text) + len(completed)):
        ends = ResponsesEnd()
        stream = text + completed
        for at in range(0, len(stream), size):
            ends.feed(stream[at : at + size])
        assert ends.said
        before = ResponsesEnd()
        for at in range(0, len(text), size):
            before.feed(text[at : at + size])
        assert not before.said


def test_a_stream_cut_mid_event_waits_and_done_before_anything_is_empty() -> None:
    reader = ResponsesFirstEvent()
    delta = _event("response.output_text.delta", delta="Hi")
    assert reader.feed(_CREATED + delta[:10]) is None
    assert reader.feed(delta[10:]) == REAL
    assert ResponsesFirstEvent().feed(b"data: [DONE]\n\n") == EMPTY


def test_the_end_is_found_whatever_the_chunks_and_only_for_a_last_event() -> None:
    completed = _event("response.completed", response={"id": "resp_1", "output": [{"text": "x" * 5000}]})
    ends = ResponsesEnd()
    for at in range(0, len(completed), 7):  # cut everywhere, the event's name too
        ends.feed(completed[at : at + 7])
    assert ends.said
    for kind in ("response.failed", "response.incomplete"):
        other = ResponsesEnd()
        other.feed(b'data: {"type": "' + kind.encode() + b'"}\n\n')  # no event: line, spaced JSON
        assert other.said
    never = ResponsesEnd()
    never.feed(
        _CREATED + _event("response.output_text.delta", delta='event: response.completed "type":"response.failed"')
    )
    assert not never.said


def test_a_whole_answer_that_says_it_failed_is_read_and_its_id_found() -> None:
    failed = {
        "id": "resp_9",
        "object": "response",
        "status": "failed",
        "error": {"code": "server_error", "message": "x"},
    }
    assert failed_body(json.dumps(failed).encode()) == ("server_error", "x")
    completed = {"id": "resp_9", "status": "completed", "output": [{"type": "message", "status": "failed"}]}
    assert failed_body(json.dumps(completed).encode()) is None  # an item's status is not the response's
    assert response_id_in(json.dumps(completed).encode()) == "resp_9"


def test_the_in_band_error_is_an_error_the_sdk_raises_on_then_response_failed_with_the_same_id() -> None:
    written = responses_stream_error("resp_1", "a/m", "timeout", "no data within the idle timeout")
    error_event, failed_event = written.split(b"\n\n")[:2]
    assert error_event.startswith(b"event: error\ndata: ")
    error = json.loads(error_event.split(b"data: ", 1)[1])
    assert (error["code"], error["error"]["code"]) == ("timeout", "timeout")
    failed = json.loads(failed_event.split(b"data: ", 1)[1])
    assert (failed["type"], failed["response"]["id"], failed["response"]["error"]["code"]) == (
        "response.failed",
        "resp_1",
        "timeout",
    )


def test_a_follow_up_is_pinned_to_the_producers_provider_in_plan_order_else_to_the_producer() -> None:
    plan = Plan((Candidate("b", "x"), Candidate("a", "y"), Candidate("a", "z"), Candidate("c", "w")))
    pinned = pinned_plan(plan, "a/z")
    assert pinned.labels == ("a/y", "a/z")
    assert pinned.pinned == "a/z" and "model_not_found" not in pinned.failover_on
    assert pinned_plan(plan, "d/v").labels == ("d/v",)


def test_a_pinned_plans_failure_is_a_503_naming_the_producer_but_a_429_stays_one() -> None:
    limited = RouterError(429, "rate_limit_exceeded", "a/z: rate_limited", retry_after=7)
    assert pinned_error(limited, "a/z") is limited
    failed = pinned_error(RouterError(502, "upstream_unavailable", "a/z: upstream_5xx"), "a/z")
    assert (failed.status, failed.code) == (503, "previous_response_unavailable")
    assert "a/z" in failed.message
    assert not_found("resp_\n" + "x" * 100).message == "Previous response with id '?' not found."


def test_the_process_table_keeps_the_last_ids_used_and_tells_callers_apart() -> None:
    async def main() -> None:
        table = ResponseAffinity(2, 60.0)
        table.remember("resp_1", "a/m", "team-a")
        table.remember("resp_2", "b/m", "team-a")
        assert await table.producer("resp_1", "team-a") == ("a/m", True)  # now the most recent
        table.remember("resp_3", "c/m", None)
        assert await table.producer("resp_2", "team-a") is None  # the least recently used, forgotten
        assert await table.producer("resp_1", "team-b") == ("a/m", False)
        assert await table.producer("resp_3", None) == ("c/m", True)
        assert len(table) == 2

    anyio.run(main)
