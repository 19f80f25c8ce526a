"""The one structured log line per request: what it writes for a principal."""

from __future__ import annotations

import logging

import pytest

from asgi_router.observability.events import RequestRecord, log_request


@pytest.mark.parametrize(
    ("principal", "written"),
    [
        (None, "principal=-"),
        ("alice", "principal=alice"),
        ("key-1a2b3c4d", "principal=key-1a2b3c4d"),
        ("bob\r\nforged=1", "principal=<str>"),
        ({"user": "u-1", "token": "secret-token-value"}, "principal=<dict>"),
    ],
)
def test_log_line_names_a_safe_principal_and_only_the_type_of_anything_else(
    caplog: pytest.LogCaptureFixture, principal: object, written: str
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_router")
    record = RequestRecord("req-1", "group/g", principal=principal)
    log_request(record)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "asgi_router"]
    assert line.endswith(written)
    assert "\n" not in line and "secret-token-value" not in line


@pytest.mark.parametrize(("measured", "written"), [(True, " tokens=7+4 "), (False, " tokens=~7+4 ")])
def test_log_line_marks_estimated_tokens_as_the_record_does(
    caplog: pytest.LogCaptureFixture, measured: bool, written: str
) -> None:
    caplog.set_level(logging.INFO, logger="asgi_router")
    record = RequestRecord("req-1", "group/g", prompt_tokens=7, completion_tokens=4, tokens_measured=measured)
    log_request(record)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "asgi_router"]
    assert written in line


def test_log_line_names_the_guardrails_that_ran_and_only_where_one_ran(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="asgi_router")
    log_request(RequestRecord("req-1", "a/m", guardrails=(("pii", "mask"), ("shape", "fail_over"))))
    log_request(RequestRecord("req-2", "a/m"))
    guarded, plain = [r.getMessage() for r in caplog.records if r.name == "asgi_router"]
    assert guarded.endswith(" guardrails=[pii:mask shape:fail_over]")
    assert "guardrails=" not in plain
