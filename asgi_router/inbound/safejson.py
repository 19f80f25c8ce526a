"""Parse a client's JSON body with bounds, so that no body can cost more than its size.

``json.loads`` alone accepts four things a gateway must not:

* **text that is not UTF-8**: it reads bytes as UTF-16 or -32 too, and lets encoded lone
  surrogates (``\\xed\\xa0\\x80``) through (``surrogatepass``). Such a body cannot be re-serialised
  as UTF-8 and would be spliced on unchanged, so only strict UTF-8 is accepted (RFC 8259 §8.1),
  a leading byte order mark tolerated. A ``\\ud800`` *escape* is another matter: it is valid
  JSON in valid UTF-8 and parses to a lone surrogate; it stays an escape on the wire (the splice
  leaves the client's bytes alone, :mod:`asgi_router.attempts.wire_body` re-serialises it escaped), and the
  upstream decides what it makes of it.

* **huge integers**: parsing and re-serialising a number is quadratic in its digits. Python's
  own limit (4,300 digits) still lets a 10 MB body of such numbers block the event loop for
  about half a second, and a host app may lift it (``sys.set_int_max_str_digits(0)``). Integer
  literals longer than :data:`MAX_NUMBER_CHARS` are refused here, independently of that setting.
* **non-finite floats**: ``1e999`` parses to ``inf``, which ``json.dumps`` then writes as
  ``Infinity``: not JSON, so the upstream would get a body it cannot parse.
  ``NaN``/``Infinity`` literals are refused too.
* **deep nesting**: anything deeper than :data:`MAX_JSON_DEPTH` is refused. The C parser's
  recursion guard stops pathological depth before Python's stack is at risk; an iterative
  walk then enforces the cap, visiting each value once.

Every refusal is a :class:`JsonRefused` carrying a client-safe message; nothing here raises.

:func:`loads_with_span` is the same parse that also says where one top-level member's value
sits in the bytes, so that the router can splice each candidate's model id into the client's
body instead of re-serialising it (:mod:`asgi_router.attempts.wire_body`). It walks the top-level object
member by member with the standard library's C scanner, bound to the same bounded decoder:
the same work as ``json.loads``, the same refusals.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from json.decoder import scanstring  # type: ignore[attr-defined]
from json.scanner import make_scanner
from typing import Any, Final, cast

__all__ = ["JsonRefused", "MAX_JSON_DEPTH", "MAX_NUMBER_CHARS", "Span", "loads", "loads_with_span"]

#: Deepest nesting accepted (the top-level object is depth 1). Chat requests nest about 6 deep;
#: tool JSON schemas add two levels per nested object, and providers cap those at 5 to 10.
MAX_JSON_DEPTH: Final = 64
#: Longest integer literal accepted, sign included (a 64-bit integer has at most 20 characters).
MAX_NUMBER_CHARS: Final = 64


@dataclass(frozen=True, slots=True)
class JsonRefused:
    """Why a body was not accepted as JSON; ``message`` is safe to show the client."""

    message: str


class _Refusal(ValueError):
    """Raised inside the parser's hooks to stop parsing; turned into :class:`JsonRefused`."""


def _reject_constant(name: str) -> None:
    raise _Refusal("NaN and Infinity are not JSON")


def _bounded_int(literal: str) -> int:
    if len(literal) > MAX_NUMBER_CHARS:
        raise _Refusal(f"an integer is longer than {MAX_NUMBER_CHARS} digits")
    return int(literal)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise _Refusal("a number is too large to be a finite float")
    return value


def _too_deep(root: Any, cap: int) -> bool:
    """Whether ``root`` nests deeper than ``cap``: level by level, so it cannot itself recurse.

    One ``isinstance`` per value: a text-heavy chat body has few values and long strings, so this
    beats counting its brackets (short bodies count brackets instead, below).
    """
    level: list[Any] = [root]
    depth = 1
    while level:
        if depth > cap:
            return True
        below: list[Any] = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, (dict, list)):
                    below.append(child)
        level = below
        depth += 1
    return False


# Up to this many characters, counting brackets (a C loop) is cheaper than walking the values: a
# small body (most chat requests) with too few brackets to nest past :data:`MAX_JSON_DEPTH` skips
# the walk of :func:`_too_deep`.
_COUNT_BELOW: Final = 16 * 1024


# One decoder for every request: ``json.loads`` with hooks would build a new one per call.
_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant, parse_int=_bounded_int, parse_float=_finite_float)
# The C scanner ``json.loads`` itself uses, bound to that decoder's hooks (typeshed types it oddly).
_SCAN: Final = cast(Callable[[str, int], tuple[Any, int]], make_scanner(_DECODER))  # type: ignore[arg-type]
_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")
_BOM: Final = codecs.BOM_UTF8
_SPACE: Final = " \t\n\r"

#: A ``(start, end)`` byte range of a body.
Span = tuple[int, int]


class _NotSpannable(ValueError):
    """The walk cannot vouch for a span (not an object, or a syntax error): decode it plainly."""


def _object_with_span(text: str, key: str) -> tuple[dict[str, Any], Span | None]:
    """Parse a top-level JSON object; also the character span of ``key``'s value.

    ``None`` for the span when ``key`` is absent or when *any* member name repeats: an upstream
    might read the first of two where the router read the last, so such a body is re-serialised
    from what the router read. Hook refusals (:class:`_Refusal`) propagate as they are.

    Member names and values are read by the C scanners; the Python around them is kept to a
    character test per separator (compact JSON, what SDKs send, has no whitespace to skip).
    """
    skip = _WHITESPACE.match
    payload: dict[str, Any] = {}
    span: Span | None = None
    members = 0
    try:
        end = 0 if text[0] not in _SPACE else skip(text, 0).end()  # type: ignore[union-attr]
        if text[end] != "{":
            raise _NotSpannable("not an object")
        end += 1
        if text[end] in _SPACE:
            end = skip(text, end).end()  # type: ignore[union-attr]
        if text[end] == "}":
            end += 1
        else:
            while True:
                if text[end] != '"':
                    raise _NotSpannable("expected a member name")
                name, end = scanstring(text, end + 1, True)
                char = text[end]
                if char in _SPACE:
                    end = skip(text, end).end()  # type: ignore[union-attr]
                    char = text[end]
                if char != ":":
                    raise _NotSpannable("expected ':'")
                start = end + 1
                if text[start] in _SPACE:
                    start = skip(text, start).end()  # type: ignore[union-attr]
                try:
                    value, end = _SCAN(text, start)
                except StopIteration:
                    raise _NotSpannable("expected a value") from None
                if name == key:
                    span = (start, end)
                payload[name] = value
                members += 1
                char = text[end]
                if char in _SPACE:
                    end = skip(text, end).end()  # type: ignore[union-attr]
                    char = text[end]
                end += 1
                if char == "}":
                    break
                if char != ",":
                    raise _NotSpannable("expected ',' or '}'")
                if text[end] in _SPACE:
                    end = skip(text, end).end()  # type: ignore[union-attr]
    except IndexError:  # ran off the end: the decoder says what is wrong
        raise _NotSpannable("truncated") from None
    if end != len(text) and skip(text, end).end() != len(text):  # type: ignore[union-attr]
        raise _NotSpannable("extra data after the object")
    return payload, (span if members == len(payload) else None)


def loads_with_span(body: bytes, key: str | None) -> tuple[Any, Span | None] | JsonRefused:
    """:func:`loads`, and for a UTF-8 object the byte span of its member ``key``'s value.

    The span is ``None`` when ``key`` is ``None``, there is no such member, the body starts with
    a byte order mark, or any top-level member name is repeated. The one function both entry
    points run (every chat request's parse goes through it): no wrapper frame per request.
    """
    try:
        # JSON text is UTF-8 (RFC 8259 §8.1), and only UTF-8 can be spliced and relayed as it
        # came: the strict decode (the one pass over the bytes the parse needs anyway) refuses
        # anything else, encoded surrogates included. A leading BOM is tolerated, as the RFC
        # allows, and dropped (such a body is re-serialised, not spliced).
        if body[:3] == _BOM:
            text = body.decode("utf-8-sig")
            key = None
        else:
            text = body.decode()
        value: Any
        span: Span | None = None
        if key is None:
            value = _DECODER.decode(text)
        else:
            try:
                value, span = _object_with_span(text, key)
            except _NotSpannable:  # not an object, or invalid: the decoder says which
                value = _DECODER.decode(text)
    except _Refusal as exc:
        return JsonRefused(f"request body is not acceptable JSON: {exc}")
    except RecursionError:
        return JsonRefused(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
    except UnicodeDecodeError:
        return JsonRefused("request body is not valid UTF-8")
    except ValueError:  # JSONDecodeError, int digit limits
        return JsonRefused("request body is not valid JSON")
    # A small body with too few brackets to nest past the cap skips the walk (_COUNT_BELOW).
    if (
        isinstance(value, (dict, list))
        and (len(text) >= _COUNT_BELOW or text.count("{") + text.count("[") > MAX_JSON_DEPTH)
        and _too_deep(value, MAX_JSON_DEPTH)
    ):
        return JsonRefused(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
    if span is not None and not text.isascii():  # character offsets are not byte offsets
        start = len(text[: span[0]].encode())
        span = (start, start + len(text[span[0] : span[1]].encode()))
    return value, span


def loads(body: bytes) -> Any | JsonRefused:
    """The parsed body, or why it was refused (invalid, unbounded, or nested too deep)."""
    parsed = loads_with_span(body, None)
    return parsed if isinstance(parsed, JsonRefused) else parsed[0]
