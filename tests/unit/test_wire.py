"""wire.py and safejson's span: one parse that also finds the model's bytes, and the splice per candidate."""

from __future__ import annotations

import json

import pytest

from asgi_router.attempts.wire_body import SplicedBody, WireBody
from asgi_router.inbound.safejson import MAX_JSON_DEPTH, JsonRefused, loads, loads_with_span

VALID = [
    b'{"model":"group/a","messages":[]}',
    b'{ "messages" : [{"model": "nested", "content": "x"}] , "model" : "p/m" , "stream": true }',
    b'\n{"temperature": 1.0e0, "model": "p/m", "n": 12345678901234567890}\n',
    '{"messages":[{"content":"héllo 你好 🎉"}],"model":"p/m","x":"ü"}'.encode(),
    b'{"model":"p/m"}',
    b"{}",
    b'{"a":"\\u00e9\\ud83c\\udf89","model":"p/m"}',
    # long enough for the splice to read the body through a memoryview (wire.py, _COPY_UNDER)
    json.dumps({"messages": [{"content": "x" * 6000}], "model": "p/m", "tail": "y" * 5000}).encode(),
]


def _parsed(body: bytes) -> tuple[object, tuple[int, int] | None]:
    parsed = loads_with_span(body, "model")
    assert not isinstance(parsed, JsonRefused), parsed
    return parsed


@pytest.mark.parametrize("body", VALID)
def test_parse_matches_json_loads(body: bytes) -> None:
    payload, _ = _parsed(body)
    assert payload == json.loads(body)
    assert payload == loads(body)


@pytest.mark.parametrize("body", [b for b in VALID if b'"model"' in b])
def test_splice_replaces_only_the_top_level_model_and_keeps_every_other_byte(body: bytes) -> None:
    payload, span = _parsed(body)
    assert isinstance(payload, dict)
    assert span is not None
    spliced = SplicedBody(body, span)
    wire = spliced.for_model("qwen2.5-coder:7b")
    again = json.loads(wire)
    assert again == {**payload, "model": "qwen2.5-coder:7b"}
    assert wire[: span[0]] == body[: span[0]]
    assert spliced.targets(wire, "qwen2.5-coder:7b")
    assert not spliced.targets(wire, "qwen2.5-coder:7")
    assert not spliced.targets(spliced.for_model("other"), "qwen2.5-coder:7b")
    if len(wire) > 2:  # a byte changed on either side of the model is caught too
        tampered_head = b"!" + wire[1:] if span[0] > 0 else None
        tampered_tail = wire[:-1] + b"!"
        assert not spliced.targets(tampered_tail, "qwen2.5-coder:7b")
        if tampered_head is not None:
            assert not spliced.targets(tampered_head, "qwen2.5-coder:7b")


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"a/b","model":"c/d"}',  # duplicate: an upstream might read the other one
        b'{"model":"a/b","stream":false,"stream":true}',  # any duplicate: the router read the last
        b'{"messages":[]}',  # no model at all
        b'\xef\xbb\xbf{"model":"a/b"}',  # a byte order mark: tolerated, then re-serialised
        b"[1, 2]",  # not an object
    ],
)
def test_no_span_where_a_splice_would_be_unsafe(body: bytes) -> None:
    payload, span = _parsed(body)
    assert payload == json.loads(body)
    assert span is None


@pytest.mark.parametrize(
    "body",
    [b"{not json", b'{"model": NaN}', b'{"a":1,}', b'{"a":1} x', b'{"a" 1}', b"\xff\xfe", b"", b'{"a":[1,]}'],
)
def test_invalid_json_is_refused_like_loads(body: bytes) -> None:
    refused = loads_with_span(body, "model")
    assert isinstance(refused, JsonRefused)
    assert refused == loads(body)


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"p/m","n":' + b"9" * 100 + b"}",  # an unbounded integer
        b'{"model":"p/m","t":1e999}',  # not a finite float
        b'{"model":"p/m","m":' + b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH + b"}",  # too deep
    ],
)
def test_the_span_walk_keeps_safejsons_bounds(body: bytes) -> None:
    refused = loads_with_span(body, "model")
    assert isinstance(refused, JsonRefused)
    assert refused == loads(body)


def test_wire_body_fallback_has_the_same_guard_interface() -> None:
    wire = WireBody({"model": "x", "messages": []})
    body = wire.for_model("p-m")
    assert wire.targets(body, "p-m") and not wire.targets(body, "p")
