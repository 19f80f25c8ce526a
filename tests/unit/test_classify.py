"""classify.py: the failover table (which failure is which reason, which reasons move on), Retry-After."""

from __future__ import annotations

import inspect
import random
from datetime import UTC, datetime, timedelta

import aiohttp
import httpx2
import pytest

from asgi_router.core import classify as classify_module
from asgi_router.core.classify import (
    DEFAULT_FAILOVER,
    UnrecognisedFailure,
    classify_exception,
    classify_status,
    parse_retry_after,
)
from asgi_router.transports.aiohttp_transport import translate as translate_aiohttp
from asgi_router.transports.httpx_transport import translate as translate_httpx

_REQUEST = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
_KEY = aiohttp.client_reqrep.ConnectionKey("127.0.0.1", 9, False, True, None, None, None)


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (200, "served"),
        (201, "served"),
        (204, "served"),
        (401, "auth_error"),
        (403, "auth_error"),
        (402, "billing"),
        (404, "model_not_found"),
        (408, "timeout"),
        (429, "rate_limited"),
        (400, "client_error"),
        (409, "client_error"),
        (413, "client_error"),
        (422, "client_error"),
        (500, "upstream_5xx"),
        (502, "upstream_5xx"),
        (503, "upstream_5xx"),
        (504, "upstream_5xx"),
        (301, "upstream_5xx"),
        (302, "upstream_5xx"),
    ],
)
def test_classify_status_maps_each_table_row_to_its_reason(status: int, reason: str) -> None:
    assert classify_status(status) == reason


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (httpx2.ConnectError("refused", request=_REQUEST), "connect_error"),
        (httpx2.ConnectTimeout("connect timed out", request=_REQUEST), "timeout"),
        (httpx2.ReadTimeout("read timed out", request=_REQUEST), "timeout"),
        (httpx2.PoolTimeout("pool exhausted", request=_REQUEST), "timeout"),
        (httpx2.ReadError("reset by peer", request=_REQUEST), "connect_error"),
        (httpx2.RemoteProtocolError("peer closed", request=_REQUEST), "connect_error"),
        (TimeoutError(), "timeout"),
        (aiohttp.ClientConnectorError(_KEY, OSError(111, "refused")), "connect_error"),
        (aiohttp.ConnectionTimeoutError("connect timed out"), "timeout"),
        (aiohttp.SocketTimeoutError("read timed out"), "timeout"),
        (aiohttp.ServerTimeoutError("timed out"), "timeout"),
        (aiohttp.ServerDisconnectedError(), "connect_error"),
        (aiohttp.ClientOSError(104, "reset by peer"), "connect_error"),
        (aiohttp.ClientPayloadError("Response payload is not completed"), "connect_error"),
        (aiohttp.ClientResponseError(None, (), status=400, message="Invalid status line"), "connect_error"),  # type: ignore[arg-type]
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else value,
)
def test_classify_exception_maps_transport_failures(exc: BaseException, reason: str) -> None:
    assert classify_exception(_through_its_transport(exc)) == reason


def _through_its_transport(exc: BaseException) -> BaseException:
    """What the transport whose library raised ``exc`` hands on: the router's own exception."""
    if isinstance(exc, httpx2.HTTPError):
        translated = translate_httpx(exc)
    elif isinstance(exc, aiohttp.ClientError):
        translated = translate_aiohttp(exc)
    else:
        return exc
    assert translated is not None, f"{type(exc).__name__} is not translated"
    assert translated.__class__.__module__ == "asgi_router.core.upstream_errors"
    return translated


def test_connect_timeout_is_a_timeout_not_a_connect_error() -> None:
    # ConnectTimeout is also a TransportError: the more specific row must win.
    assert classify_exception(_through_its_transport(httpx2.ConnectTimeout("t", request=_REQUEST))) == "timeout"


def test_aiohttp_connect_timeout_is_a_timeout_not_a_connect_error() -> None:
    # ConnectionTimeoutError is also a ClientConnectionError: the timeout row must win.
    assert classify_exception(_through_its_transport(aiohttp.ConnectionTimeoutError("t"))) == "timeout"


@pytest.mark.parametrize("library", ["aiohttp", "httpx2", "httpcore2", "anyio"])
def test_classification_imports_no_http_library(library: str) -> None:
    # Transports translate their library's exceptions at their own boundary (upstream_errors).
    source = inspect.getsource(classify_module)
    assert f"import {library}" not in source and f"from {library}" not in source


def test_an_http_library_exception_no_transport_translated_is_the_routers_own_failure() -> None:
    with pytest.raises(UnrecognisedFailure):
        classify_exception(httpx2.ConnectError("refused", request=_REQUEST))


def test_unknown_exception_raises_unrecognised_failure_and_is_never_retried() -> None:
    original = ValueError("bug in the router")
    with pytest.raises(UnrecognisedFailure) as info:
        classify_exception(original)
    assert info.value.__cause__ is original
    assert "ValueError" in str(info.value)


def test_default_failover_excludes_client_error() -> None:
    assert "client_error" not in DEFAULT_FAILOVER


@pytest.mark.parametrize(
    "reason",
    ["connect_error", "timeout", "rate_limited", "upstream_5xx", "auth_error", "billing", "model_not_found"],
)
def test_default_failover_includes_every_fail_over_row_of_the_table(reason: str) -> None:
    assert reason in DEFAULT_FAILOVER


def test_default_failover_does_not_include_served() -> None:
    assert "served" not in DEFAULT_FAILOVER


# --- Retry-After --------------------------------------------------------------------------------

_NOW = datetime(2015, 10, 21, 7, 28, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("120", 120.0), ("0", 0.0), ("  7  ", 7.0), ("1.5", 1.5), ("0.25", 0.25)],
)
def test_retry_after_delta_seconds_are_parsed(value: str, seconds: float) -> None:
    assert parse_retry_after(value) == seconds


@pytest.mark.parametrize("value", ["-5", "+5", "1_000", "\u0663", "1e3"])
def test_retry_after_outside_rfc_delay_seconds_digits_is_ignored(value: str) -> None:
    assert parse_retry_after(value) is None


def test_retry_after_http_date_is_seconds_from_now() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:29:30 GMT", now=_NOW) == 90.0


def test_retry_after_http_date_uses_injected_now() -> None:
    later = _NOW + timedelta(seconds=60)
    assert parse_retry_after("Wed, 21 Oct 2015 07:29:30 GMT", now=later) == 30.0


def test_retry_after_http_date_in_the_past_is_zero() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now=_NOW) == 0.0


@pytest.mark.parametrize(
    "value",
    [None, "", "   ", "soon", "12abc", "Wed, 99 Foo 2015", "nan", "NaN", "inf", "-inf", "Infinity", "1e400"],
)
def test_retry_after_garbage_none_nan_and_infinity_give_none(value: str | None) -> None:
    assert parse_retry_after(value) is None


def test_retry_after_never_raises_on_random_header_values() -> None:
    rng = random.Random(7)
    alphabet = "0123456789 ,:+-.GMTWedOctJanMonDec_eEinfaxX\t\u0663"
    for _ in range(2000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 35)))
        result = parse_retry_after(value, now=_NOW)
        assert result is None or (isinstance(result, float) and 0.0 <= result < float("inf"))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"error":{"code":"insufficient_quota","type":"insufficient_quota","message":"x"}}', "billing"),
        (
            b'{"error":{"code":"rate_limit_exceeded","message":"slow down; insufficient_quota is not this"}}',
            "rate_limited",
        ),
        (b"not json insufficient_quota", "rate_limited"),
        (b"", "rate_limited"),
        (None, "rate_limited"),
    ],
)
def test_refine_rate_limited_reads_insufficient_quota_as_billing(body: bytes | None, reason: str) -> None:
    from asgi_router.core.classify import refine_rate_limited

    assert refine_rate_limited(body) == reason
