"""Request screening and bounded JSON: what is refused before routing, and with which status."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from asgi_router.inbound.body import parse_request
from asgi_router.inbound.safejson import MAX_JSON_DEPTH, MAX_NUMBER_CHARS, JsonRefused, loads
from asgi_router.inbound.screen import FORBIDDEN_FIELDS, forbidden_field, screen_headers


def _scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "headers": list(headers)}


# --- content-type and content-encoding --------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [b"application/json", b"application/json; charset=utf-8", b"Application/JSON", b" application/json ;x=1"],
)
def test_json_content_type_with_any_parameters_passes_the_screen(content_type: bytes) -> None:
    assert screen_headers(_scope((b"content-type", content_type))) is None


@pytest.mark.parametrize(
    "headers",
    [
        [],
        [(b"content-type", b"text/plain")],
        [(b"content-type", b"application/x-www-form-urlencoded")],
        [(b"content-type", b"multipart/form-data; boundary=x")],
        [(b"content-type", b"application/jsonx")],
        [(b"content-type", b"")],
    ],
    ids=["missing", "text", "form", "multipart", "lookalike", "empty"],
)
def test_missing_or_non_json_content_type_is_415(headers: list[tuple[bytes, bytes]]) -> None:
    refused = screen_headers(_scope(*headers))
    assert refused is not None
    assert (refused.status, refused.code) == (415, "unsupported_media_type")


@pytest.mark.parametrize("encoding", [b"gzip", b"deflate", b"br", b"zstd", b"gzip, identity", b"x-custom"])
def test_compressed_body_is_415_even_with_a_json_content_type(encoding: bytes) -> None:
    refused = screen_headers(_scope((b"content-type", b"application/json"), (b"content-encoding", encoding)))
    assert refused is not None
    assert (refused.status, refused.code) == (415, "unsupported_content_encoding")


@pytest.mark.parametrize("encoding", [b"identity", b"IDENTITY", b""])
def test_identity_content_encoding_passes_the_screen(encoding: bytes) -> None:
    assert screen_headers(_scope((b"content-type", b"application/json"), (b"content-encoding", encoding))) is None


# --- fields that redirect traffic or swap credentials ----------------------------------------


@pytest.mark.parametrize("field", FORBIDDEN_FIELDS)
def test_every_forbidden_field_is_refused_with_400_naming_it(field: str) -> None:
    refused = forbidden_field({"model": "openai/gpt-4o", field: "https://attacker.example"})
    assert refused is not None
    assert (refused.status, refused.code) == (400, "forbidden_parameter")
    assert repr(field) in refused.message


@pytest.mark.parametrize(
    ("spelled", "canonical"),
    [("API_BASE", "api_base"), ("apiBase", "api_base"), ("api-key", "api_key"), ("baseURL", "base_url")],
)
def test_forbidden_field_spelling_variants_are_refused_and_named_canonically(spelled: str, canonical: str) -> None:
    refused = forbidden_field({spelled: "x"})
    assert refused is not None
    assert repr(canonical) in refused.message
    assert repr(spelled) not in refused.message or spelled == canonical


@pytest.mark.parametrize(
    "payload",
    [
        {"model": "a/b", "messages": [{"role": "user", "content": "api_base"}]},
        {"model": "a/b", "metadata": {"api_key": "mine", "base_url": "x"}},
        {"model": "a/b", "user": "api_key", "temperature": 0.2, "stream_options": {"include_usage": True}},
        {"model": "a/b", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"headers": {}}}}]},
    ],
    ids=["in-content", "nested-metadata", "as-values", "in-tool-schema"],
)
def test_forbidden_names_below_the_top_level_or_as_values_are_the_callers_data(payload: dict[str, Any]) -> None:
    assert forbidden_field(payload) is None


def test_parse_request_refuses_a_forbidden_field_before_looking_at_model() -> None:
    refused = parse_request(b'{"api_base": "https://attacker.example", "model": "openai/gpt-4o"}')
    assert not hasattr(refused, "payload")
    assert getattr(refused, "code", None) == "forbidden_parameter"


# --- bounded JSON -------------------------------------------------------------------------


def _nested(depth: int) -> bytes:
    """An object nested exactly ``depth`` levels deep (the outer object is level 1)."""
    return b'{"a":' * (depth - 1) + b"{}" + b"}" * (depth - 1)


def test_json_nested_exactly_to_the_cap_is_accepted() -> None:
    assert not isinstance(loads(_nested(MAX_JSON_DEPTH)), JsonRefused)


def test_json_nested_one_deeper_than_the_cap_is_refused() -> None:
    refused = loads(_nested(MAX_JSON_DEPTH + 1))
    assert isinstance(refused, JsonRefused)
    assert str(MAX_JSON_DEPTH) in refused.message


def test_wide_json_with_many_brackets_but_little_depth_is_accepted() -> None:
    body = json.dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}] * 500}).encode()
    assert not isinstance(loads(body), JsonRefused)


@pytest.mark.parametrize("depth", [2_000, 200_000])
def test_json_nested_past_the_recursion_limit_is_refused_not_raised(depth: int) -> None:
    assert isinstance(loads(b"[" * depth + b"]" * depth), JsonRefused)


def test_integer_at_the_length_cap_is_accepted_and_one_longer_is_refused() -> None:
    assert loads(b'{"n":' + b"9" * MAX_NUMBER_CHARS + b"}") == {"n": int("9" * MAX_NUMBER_CHARS)}
    assert loads(b'{"n":-' + b"9" * (MAX_NUMBER_CHARS - 1) + b"}") == {"n": -int("9" * (MAX_NUMBER_CHARS - 1))}
    assert isinstance(loads(b'{"n":' + b"9" * (MAX_NUMBER_CHARS + 1) + b"}"), JsonRefused)


@pytest.fixture
def unlimited_int_digits() -> Iterator[None]:
    """A host app that lifted Python's own int-parsing limit."""
    saved = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    yield
    sys.set_int_max_str_digits(saved)


@pytest.mark.usefixtures("unlimited_int_digits")
def test_huge_integer_is_refused_even_when_python_would_parse_it() -> None:
    refused = loads(b'{"n":' + b"1" * 100_000 + b"}")
    assert isinstance(refused, JsonRefused)
    assert "digits" in refused.message


@pytest.mark.parametrize("body", [b'{"t":1e999}', b'{"t":-1e400}', b'{"t":NaN}', b'{"t":Infinity}', b'{"t":-Infinity}'])
def test_non_finite_numbers_are_refused_so_the_upstream_never_gets_invalid_json(body: bytes) -> None:
    assert isinstance(loads(body), JsonRefused)


def test_ordinary_floats_and_small_integers_parse_as_usual() -> None:
    assert loads(b'{"temperature":0.7,"max_tokens":256,"top_p":1e-3}') == {
        "temperature": 0.7,
        "max_tokens": 256,
        "top_p": 0.001,
    }


@pytest.mark.parametrize("body", [b"", b"{", b'{"a":1}x', b"\x00", '{"a":1}'.encode("utf-16-le")])
def test_invalid_json_is_refused_with_a_message_and_no_exception(body: bytes) -> None:
    refused = loads(body)
    assert isinstance(refused, JsonRefused)
    assert refused.message == "request body is not valid JSON"


@pytest.mark.parametrize("body", [b"\xff\xfe\x00", '{"a":1}'.encode("utf-16"), b'{"a":"\xed\xa0\x80"}'])
def test_a_body_that_is_not_utf8_is_refused_as_such(body: bytes) -> None:
    assert loads(body) == JsonRefused("request body is not valid UTF-8")


def test_a_leading_byte_order_mark_is_tolerated() -> None:
    assert loads(b'\xef\xbb\xbf{"a":"\xc3\xa9"}') == {"a": "\u00e9"}
