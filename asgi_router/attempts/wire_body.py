"""Each candidate's request body: the client's bytes with only the ``model`` value changed.

The attempt loop sends every candidate the client's body with one change, the ``model`` value,
and checks the result names the candidate (the target guard, ``docs/errors-and-headers.md``).
Re-serialising the parsed payload for that costs as much as parsing it, which for a long-context
request is a large share of the router's own work (docs/performance.md has the figures). So the
inbound parse (:func:`asgi_router.inbound.safejson.loads_with_span`) records the byte span of the
``model`` value, and :class:`SplicedBody` replaces just that span: the upstream also sees every
other byte exactly as the client sent it (key order, number spellings).

When there is no span (the body starts with a byte order mark, or a top-level member name
repeats, so an upstream might read another value than the router did), :class:`WireBody`
serialises the parsed payload once, ``model`` first, and splices the id in front of the rest.
(A body that is not UTF-8 never gets here: the parse refuses it.) Either way the wire body is
UTF-8: a ``\\ud800``-style escape the client sent stays an escape.

Model ids are restricted (``refs.py``) to characters that need no JSON escaping, so both write
the value as ``"<id>"`` verbatim.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from asgi_router.inbound.safejson import Span

__all__ = ["SplicedBody", "WireBody", "wire_targets"]

# Built once: ``json.dumps`` with keyword arguments builds a new encoder on every call.
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_COMPACT_ASCII: Final = json.JSONEncoder(separators=(",", ":"))


# Below this many bytes, slicing the body's two sides is cheaper than a memoryview of it.
_COPY_UNDER: Final = 4096


class SplicedBody:
    """The client's body bytes with the ``model`` value (at ``span``) replaced per candidate.

    It keeps the body itself and the span, not copies of the two sides: a long prompt is held
    once, not twice, while upstreams are tried (each candidate's bytes are built when asked for).
    """

    __slots__ = ("_body", "_end", "_start")

    def __init__(self, body: bytes, span: Span) -> None:
        self._body = body
        self._start, self._end = span

    def for_model(self, model_id: str) -> bytes:
        body: bytes | memoryview = self._body
        if len(body) > _COPY_UNDER:  # the join copies a long body's sides once, straight from it
            body = memoryview(body)
        return b"".join((body[: self._start], b'"', model_id.encode(), b'"', body[self._end :]))

    def targets(self, wire: bytes, model_id: str) -> bool:
        """Target guard: is ``model_id`` the ``model`` value in ``wire``, with nothing else changed around it?"""
        expected = b'"' + model_id.encode() + b'"'
        body, at, end = self._body, self._start, self._end
        after = at + len(expected)
        return (
            len(wire) == after + len(body) - end
            and wire[at:after] == expected
            and wire.startswith(body[:at])
            and wire.endswith(body[end:])
        )


class WireBody:
    """The request body, serialised once per request, with ``model`` spliced in per candidate.

    ``model`` is removed from the payload and the rest serialised a single time; each candidate
    then costs one concatenation instead of one serialisation. ``model`` is always the first
    member of the wire object, which is also what lets :func:`wire_targets` check it cheaply.
    """

    __slots__ = ("_rest",)

    def __init__(self, payload: Mapping[str, Any]) -> None:
        rest = {key: value for key, value in payload.items() if key != "model"}
        try:
            encoded = _COMPACT.encode(rest).encode()
        except UnicodeEncodeError:  # lone surrogates from \\ud800-style escapes: keep them escaped
            encoded = _COMPACT_ASCII.encode(rest).encode()
        self._rest = encoded[1:]  # drop "{": either b"}" or b'"key":...}'

    def for_model(self, model_id: str) -> bytes:
        head = b'{"model":"' + model_id.encode() + b'"'
        return head + (b"}" if self._rest == b"}" else b"," + self._rest)

    def targets(self, wire: bytes, model_id: str) -> bool:
        """Target guard (see :func:`wire_targets`)."""
        return wire_targets(wire, model_id)


def wire_targets(wire: bytes, model_id: str) -> bool:
    """Target guard for a :class:`WireBody`: does the wire body's ``model`` equal ``model_id``?

    Model ids are restricted to characters that need no JSON escaping, so the first member
    ``{"model":"<id>"`` can be compared as bytes; ``model`` appears once at top level.
    """
    expected = b'{"model":"' + model_id.encode() + b'"'
    end = len(expected)
    return wire.startswith(expected) and wire[end : end + 1] in (b",", b"}")
