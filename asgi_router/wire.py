"""Parse the request once and remember where its ``model`` value sits, so it is never re-serialised.

The attempt loop sends each candidate the client's body with one change: the ``model`` value.
Re-serialising the parsed payload for that (``json.dumps``) costs as much as parsing it: ~80 µs
for a 100 KB long-context request, a third of the router's CPU there. Instead, the top-level
object is parsed member by member with the standard library's C scanner (the same work as
``json.loads``) while the byte span of the ``model`` value is recorded; each candidate's body
is then the client's bytes with that span replaced (:class:`SplicedBody`). As a bonus the
upstream sees every other byte exactly as the client sent it (key order, number spellings).

When the body is not plain UTF-8 JSON, or names ``model`` more than once (an upstream might
read the first where we routed on the last), there is no span and the attempt loop falls back
to serialising the payload (:class:`~asgi_router.attempts.WireBody`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from json.decoder import scanstring  # type: ignore[attr-defined]
from json.scanner import make_scanner
from typing import Any, Final, cast

__all__ = ["SplicedBody", "parse_json_body"]

_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")


def _ws(text: str, index: int) -> int:
    """The index of the first non-whitespace character at or after ``index``."""
    return _WHITESPACE.match(text, index).end()  # type: ignore[union-attr]  # always matches


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


# Built once: ``json.loads`` with a hook builds a new decoder on every call.
_DECODER: Final = json.JSONDecoder(parse_constant=_reject_constant)
# The C scanner ``json.loads`` itself uses, bound to that decoder (typeshed types it oddly).
_SCAN: Final = cast(Callable[[str, int], tuple[Any, int]], make_scanner(_DECODER))  # type: ignore[arg-type]


def _object_with_model_span(text: str) -> tuple[dict[str, Any], tuple[int, int] | None]:
    """Parse a top-level JSON object; also the character span of its only ``model`` value."""
    end = _ws(text, 0)
    if text[end : end + 1] != "{":
        raise ValueError("not an object")
    end = _ws(text, end + 1)
    payload: dict[str, Any] = {}
    span: tuple[int, int] | None = None
    models = 0
    if text[end : end + 1] == "}":
        end += 1
    else:
        while True:
            if text[end : end + 1] != '"':
                raise ValueError("expected a member name")
            key, end = scanstring(text, end + 1, True)
            end = _ws(text, end)
            if text[end : end + 1] != ":":
                raise ValueError("expected ':'")
            start = end = _ws(text, end + 1)
            try:
                value, end = _SCAN(text, start)
            except StopIteration as stop:
                raise ValueError(f"invalid value at {stop.value}") from None
            if key == "model":
                models += 1
                span = (start, end)
            payload[key] = value
            end = _ws(text, end)
            separator = text[end : end + 1]
            end += 1
            if separator == "}":
                break
            if separator != ",":
                raise ValueError("expected ',' or '}'")
            end = _ws(text, end)
    if _ws(text, end) != len(text):
        raise ValueError("extra data after the object")
    return payload, (span if models == 1 else None)


def parse_json_body(body: bytes) -> tuple[Any, tuple[int, int] | None]:
    """Parse ``body`` as ``json.loads`` would; for a UTF-8 object, also its ``model`` byte span.

    Raises ``ValueError`` (or ``RecursionError``) on invalid JSON, as ``json.loads`` does.
    """
    encoding = json.detect_encoding(body)
    text = body.decode(encoding, "surrogatepass")
    if encoding != "utf-8":
        return _DECODER.decode(text), None
    try:
        payload, span = _object_with_model_span(text)
    except ValueError:
        # Not an object, or invalid: let the standard decoder say so (or parse a non-object).
        return _DECODER.decode(text), None
    if span is None:
        return payload, None
    start, end = span
    if not text.isascii():  # character offsets are not byte offsets: count the bytes before
        start = len(text[:start].encode("utf-8", "surrogatepass"))
        end = start + len(text[span[0] : span[1]].encode("utf-8", "surrogatepass"))
    return payload, (start, end)


class SplicedBody:
    """The client's body bytes with the ``model`` value replaced per candidate.

    Model ids are restricted (``refs.py``) to characters that need no JSON escaping, so the
    value is written as ``"<id>"`` verbatim.
    """

    __slots__ = ("_head", "_tail")

    def __init__(self, body: bytes, span: tuple[int, int]) -> None:
        self._head = body[: span[0]]
        self._tail = body[span[1] :]

    def for_model(self, model_id: str) -> bytes:
        return b"".join((self._head, b'"', model_id.encode(), b'"', self._tail))

    def targets(self, wire: bytes, model_id: str) -> bool:
        """Target guard: is ``model_id`` the (only) ``model`` value in ``wire``?"""
        expected = b'"' + model_id.encode() + b'"'
        at = len(self._head)
        return (
            len(wire) == at + len(expected) + len(self._tail)
            and wire.startswith(self._head)
            and wire[at : at + len(expected)] == expected
        )
