"""Rate-limit hints: every place a provider says how long to wait, read case by case."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asgi_router.attempts.hints import parse_duration, retry_hint

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)

DURATIONS = [
    ("1s", 1.0),
    ("20ms", 0.02),
    ("6m0s", 360.0),
    ("1h2m3.5s", 3723.5),
    ("2m59.56s", 179.56),
    ("7", 7.0),
    ("0.5", 0.5),
    (str(int(NOW.timestamp()) + 42), 42.0),  # epoch seconds
    (str(int(NOW.timestamp()) - 5), 0.0),  # a reset in the past: no wait
    ("soon", None),
    ("", None),
    ("-3", None),
    ("1 s", None),
]


@pytest.mark.parametrize(("text", "seconds"), DURATIONS)
def test_parse_duration_reads_go_durations_seconds_and_epochs(text: str, seconds: float | None) -> None:
    result = parse_duration(text, now=NOW)
    if seconds is None:
        assert result is None
    else:
        assert result == pytest.approx(seconds)


HINTS = [
    ("retry-after seconds", [(b"Retry-After", b"3")], b"", 3.0),
    ("retry-after fraction", [(b"retry-after", b"0.25")], b"", 0.25),
    ("retry-after http-date", [(b"retry-after", b"Wed, 01 Jan 2025 12:00:30 GMT")], b"", 30.0),
    ("retry-after-ms wins over retry-after", [(b"retry-after", b"9"), (b"retry-after-ms", b"1500")], b"", 1.5),
    ("unparseable retry-after falls through to the body", [(b"retry-after", b"later")], b"try again in 2s", 2.0),
    ("openai body seconds", [], b'{"error":{"message":"Please try again in 29.159s. Visit"}}', 29.159),
    ("openai body milliseconds", [], b"Rate limit reached. Please try again in 20ms.", 0.02),
    ("body go duration", [], b"Please try again in 6m0s.", 360.0),
    ("body words", [], b"Please retry after 3 seconds", 3.0),
    ("gemini body", [], b'"message": "Resource exhausted. Please retry in 37.5s."', 37.5),
    ("body hint is case-insensitive", [], b"TRY AGAIN IN 4S", 4.0),
    ("header beats the body", [(b"retry-after", b"1")], b"try again in 30s", 1.0),
    (
        "reset of the exhausted limit",
        [
            (b"x-ratelimit-reset-requests", b"1s"),
            (b"x-ratelimit-reset-tokens", b"6m0s"),
            (b"x-ratelimit-remaining-requests", b"0"),
            (b"x-ratelimit-remaining-tokens", b"1000"),
        ],
        b"",
        1.0,
    ),
    (
        "without remaining, the longest reset",
        [
            (b"x-ratelimit-reset-requests", b"1s"),
            (b"x-ratelimit-reset-tokens", b"2.5s"),
        ],
        b"",
        2.5,
    ),
    ("body beats reset headers", [(b"x-ratelimit-reset-requests", b"9s")], b"try again in 1s", 1.0),
    ("whitespace other than a space between number and unit", [], b"retry in 2\tseconds", 2.0),
    ("a newline between number and unit", [], b"try again in 3\nminutes", 180.0),
    ("nothing said", [(b"content-type", b"application/json")], b'{"error":{"message":"slow down"}}', None),
    ("a number without a unit is not a hint", [], b"try again in 5 apples", None),
]


@pytest.mark.parametrize(("headers", "body", "seconds"), [h[1:] for h in HINTS], ids=[h[0] for h in HINTS])
def test_retry_hint_reads_headers_then_body_then_reset_headers(
    headers: list[tuple[bytes, bytes]], body: bytes, seconds: float | None
) -> None:
    result = retry_hint(headers, body, now=NOW)
    if seconds is None:
        assert result is None
    else:
        assert result == pytest.approx(seconds)


def test_body_hint_is_only_looked_for_near_the_start() -> None:
    assert retry_hint([], b"x" * 9000 + b"try again in 2s") is None
    assert retry_hint([], b"x" * 100 + b"try again in 2s") == 2.0


def test_a_5xx_is_only_read_for_retry_after_not_for_resets_or_the_body() -> None:
    headers = [(b"x-ratelimit-reset-requests", b"6m0s"), (b"x-ratelimit-remaining-requests", b"0")]
    assert retry_hint(headers, b"try again in 2s", rate_limited=False) is None
    assert retry_hint([*headers, (b"retry-after", b"3")], b"", rate_limited=False) == 3.0


# Header names the hint parser reads, so that fuzzed values reach every branch.
_HINT_HEADERS = st.sampled_from(
    [
        b"retry-after",
        b"Retry-After-Ms",
        b"x-ratelimit-reset-requests",
        b"x-ratelimit-remaining-requests",
        b"x-ratelimit-reset-tokens",
        b"x-ratelimit-remaining-tokens",
    ]
)
# Bodies that look like hints, so that fuzzing reaches the unit parsing and not only the search.
_HINTISH_BODIES = st.builds(
    lambda lead, number, gap, unit, tail: lead + number + gap + unit + tail,
    st.sampled_from([b"retry in ", b"Try again in ", b"retry after ", b""]),
    st.from_regex(rb"\A[0-9]{1,12}(\.[0-9]{0,10})?\Z"),
    st.sampled_from([b"", b" ", b"\t", b"\n", b"\r", b"\x0b", b"\x0c", b"  "]),
    st.sampled_from(
        [b"s", b"ms", b"m", b"h", b"seconds", b"secs", b"minutes", b"mins", b"milliseconds", b"x", b"1h2m"]
    ),
    st.binary(max_size=8),
)


# Values shaped like HTTP-dates, durations and numbers, at and past their ranges' edges.
_HINTISH_VALUES = st.one_of(
    st.binary(max_size=40),
    st.builds(
        lambda day, year, hour, zone: f"Mon, {day:02d} Jan {year} {hour:02d}:00:00 {zone}".encode(),
        st.integers(0, 40),
        st.integers(0, 100_000),
        st.integers(0, 99),
        st.sampled_from(["GMT", "+9999", "-2359", "+0000", "XYZ"]),
    ),
    st.from_regex(rb"\A-?[0-9]{0,30}(\.[0-9]{0,12})?(ms|h|m|s|e9)*\Z"),
)


@settings(max_examples=300, deadline=None)
@given(
    headers=st.lists(st.tuples(_HINT_HEADERS | st.binary(max_size=30), _HINTISH_VALUES), max_size=6),
    body=st.none() | st.binary(max_size=200) | _HINTISH_BODIES,
    rate_limited=st.booleans(),
)
def test_retry_hint_never_raises_and_is_a_finite_wait_or_none(
    headers: list[tuple[bytes, bytes]], body: bytes | None, rate_limited: bool
) -> None:
    seconds = retry_hint(headers, body, rate_limited=rate_limited, now=NOW)
    assert seconds is None or (isinstance(seconds, float) and math.isfinite(seconds) and seconds >= 0)
