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
