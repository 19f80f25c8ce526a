"""How long an upstream asked us to wait, from every place providers put it.

Read in order, the first that says something wins:

1. ``retry-after-ms`` (OpenAI's, milliseconds; the official SDK reads it first too);
2. ``Retry-After`` (RFC 9110: delay-seconds or an HTTP-date);
3. the error body's "try again in 29.159s" / "retry in 20ms" / "try again in 6m0s"
   (OpenAI, Azure, Groq, Gemini phrase it so; read in the first few KiB only);
4. ``x-ratelimit-reset-<kind>`` (OpenAI, Groq: a duration such as ``1s`` or ``6m0s``; others:
   seconds, or epoch seconds). When ``x-ratelimit-remaining-<kind>`` says which limit is at
   zero, that limit's reset counts; otherwise the longest reset (the conservative reading).

Only failure responses are read here: never a byte of a relayed stream. 3 and 4 apply to a
429 only (see :func:`retry_hint`). Whatever bytes an upstream sends, the answer is a wait
(finite, never negative, at most ``longest``: the router's ``max_rate_limit_reset``) or ``None``,
never an exception: the tests fuzz it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Final

from asgi_router.core.classify import parse_retry_after

__all__ = ["parse_duration", "retry_hint"]

# "1h2m3.5s", "6m0s", "20ms", "1.5s": Go's time.Duration text, as OpenAI's headers use.
_GO_DURATION: Final = re.compile(r"(?:[0-9]{1,9}(?:\.[0-9]{1,9})?(?:ms|h|m|s))+")
_GO_PART: Final = re.compile(r"([0-9]{1,9}(?:\.[0-9]{1,9})?)(ms|h|m|s)")
_UNIT_SECONDS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_NUMBER: Final = re.compile(r"[0-9]{1,12}(?:\.[0-9]{1,9})?")
# Anything larger is a Unix timestamp, not a number of seconds to wait.
_EPOCH_FLOOR: Final = 1_000_000_000.0

_BODY_WINDOW: Final = 8 * 1024
# Each way of writing the wait has its own group, so that reading a match needs no second parse
# that could disagree with this one (a number and its unit word may be parted by any one
# whitespace character, a tab as well as a space).
_BODY_HINT: Final = re.compile(
    rb"(?:try again|retry)\s+(?:in|after)\s+"
    rb"(?:(?P<go>(?:[0-9]{1,9}(?:\.[0-9]{1,9})?(?:ms|h|m|s))+)"
    rb"|(?P<number>[0-9]{1,9}(?:\.[0-9]{1,9})?)\s?(?P<word>milliseconds?|seconds?|secs?|minutes?|mins?))"
    rb"(?![A-Za-z])",
    re.IGNORECASE,
)
# A unit word by its first three letters (every spelling the pattern accepts has one of these).
_WORD_UNITS: Final = {b"mil": 0.001, b"sec": 1.0, b"min": 60.0}

_RESET_PREFIX: Final = b"x-ratelimit-reset"
_REMAINING_PREFIX: Final = b"x-ratelimit-remaining"


def parse_duration(text: str, *, now: datetime | None = None) -> float | None:
    """Seconds from ``1s``/``6m0s``/``20ms``, plain seconds, or epoch seconds; else ``None``."""
    text = text.strip()
    if _GO_DURATION.fullmatch(text):
        return sum(float(value) * _UNIT_SECONDS[unit] for value, unit in _GO_PART.findall(text))
    if _NUMBER.fullmatch(text):
        seconds = float(text)
        if seconds >= _EPOCH_FLOOR:
            seconds -= (now or datetime.now(UTC)).timestamp()
        return max(0.0, seconds)
    return None


def _body_hint(body: bytes) -> float | None:
    found = _BODY_HINT.search(body[:_BODY_WINDOW])
    if found is None:
        return None
    go = found.group("go")
    if go is not None:
        return sum(float(value) * _UNIT_SECONDS[unit] for value, unit in _GO_PART.findall(go.decode("ascii").lower()))
    return float(found.group("number")) * _WORD_UNITS[found.group("word")[:3].lower()]


def _reset_hint(headers: Iterable[tuple[bytes, bytes]], now: datetime | None) -> float | None:
    resets: dict[bytes, float] = {}
    exhausted: set[bytes] = set()
    for name, value in headers:
        name = name.lower()
        if name.startswith(_RESET_PREFIX):
            seconds = parse_duration(value.decode("latin-1"), now=now)
            if seconds is not None:
                resets[name[len(_RESET_PREFIX) :]] = seconds
        elif name.startswith(_REMAINING_PREFIX) and value.strip() == b"0":
            exhausted.add(name[len(_REMAINING_PREFIX) :])
    if not resets:
        return None
    relevant = [seconds for kind, seconds in resets.items() if kind in exhausted]
    return max(relevant or resets.values())


def retry_hint(
    headers: Iterable[tuple[bytes, bytes]],
    body: bytes | None = None,
    *,
    rate_limited: bool = True,
    now: datetime | None = None,
    longest: float = math.inf,
) -> float | None:
    """Seconds the upstream asked to wait before trying again, or ``None`` if it did not say.

    Only a rate-limited answer (429) is read past the ``Retry-After`` headers: providers send
    ``x-ratelimit-reset-*`` on every response, and on a 5xx they say nothing about the outage.
    A wait longer than ``longest`` is cut to it: no upstream benches a member for years.
    """
    seconds = _hint(headers, body, rate_limited, now)
    return min(seconds, longest) if seconds is not None else None


def _hint(
    headers: Iterable[tuple[bytes, bytes]], body: bytes | None, rate_limited: bool, now: datetime | None
) -> float | None:
    headers = list(headers)
    retry_after: str | None = None
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"retry-after-ms":
            text = value.decode("latin-1").strip()
            if _NUMBER.fullmatch(text):
                return float(text) / 1000
        elif lowered == b"retry-after" and retry_after is None:
            retry_after = value.decode("latin-1")
    if retry_after is not None:
        seconds = parse_retry_after(retry_after, now=now)
        if seconds is not None:
            return seconds
    if not rate_limited:
        return None
    if body:
        seconds = _body_hint(body)
        if seconds is not None:
            return seconds
    return _reset_hint(headers, now)
