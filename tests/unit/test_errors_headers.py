"""Error bodies, header hygiene, inbound parsing and the wire body."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest

from asgi_router.attempts.wire_body import WireBody, wire_targets
from asgi_router.core.header_names import FORWARDED_REQUEST_HEADERS, client_retries
from asgi_router.core.router_errors import AttemptSummary, RouterError, error_body, exhausted_error, stream_error_event
from asgi_router.inbound.body import InboundRequest, fresh_request_id, parse_request, request_id_for
from asgi_router.responses.headers import response_headers_for_client
from asgi_router.transports.request_headers import request_headers_for_upstream

# --- exhausted_error ------------------------------------------------------------------------


def _decode(error: RouterError) -> dict[str, Any]:
    document = json.loads(error.body())
    assert set(document) == {"error"}
    inner: dict[str, Any] = document["error"]
    return inner


def test_all_rate_limited_is_429_with_the_smallest_retry_after() -> None:
    error = exhausted_error(
        [
            AttemptSummary("openai/gpt-4o", "rate_limited", 429, retry_after=30.0),
            AttemptSummary("local/qwen", "rate_limited", 429, retry_after=2.5),
            AttemptSummary("openrouter/x/y", "rate_limited", 429, retry_after=None),
        ]
    )
    assert error.status == 429
    assert error.retry_after == 2.5
    assert _decode(error)["type"] == "rate_limit_error"


def test_all_rate_limited_without_any_retry_after_is_429_with_none() -> None:
    error = exhausted_error([AttemptSummary("openai/gpt-4o", "rate_limited", 429)])
    assert (error.status, error.retry_after) == (429, None)


def test_all_timeout_is_504() -> None:
    error = exhausted_error([AttemptSummary("openai/a", "timeout"), AttemptSummary("local/b", "timeout", 408)])
    assert error.status == 504


@pytest.mark.parametrize(
    "reasons",
    [
        ("rate_limited", "timeout"),
        ("rate_limited", "upstream_5xx"),
        ("timeout", "connect_error"),
        ("upstream_5xx",),
        ("auth_error", "billing", "model_not_found"),
    ],
)
def test_mixed_or_other_failures_are_502(reasons: tuple[str, ...]) -> None:
    attempts = [AttemptSummary(f"p{i}/m", reason, 500) for i, reason in enumerate(reasons)]  # type: ignore[arg-type]
    error = exhausted_error(attempts)
    assert error.status == 502
    assert error.retry_after is None


def test_mixed_failure_does_not_advertise_a_retry_after() -> None:
    error = exhausted_error(
        [
            AttemptSummary("openai/a", "rate_limited", 429, retry_after=5.0),
            AttemptSummary("local/b", "upstream_5xx", 503),
        ]
    )
    assert error.status == 502
    assert error.retry_after is None


def test_skipped_unconfigured_providers_do_not_turn_a_rate_limit_into_502() -> None:
    error = exhausted_error(
        [
            AttemptSummary("openai/a", "provider_not_configured"),
            AttemptSummary("local/b", "rate_limited", 429, retry_after=3.0),
        ]
    )
    assert error.status == 429
    assert error.retry_after == 3.0


def test_exhausted_message_has_exactly_one_line_per_candidate() -> None:
    attempts = [
        AttemptSummary("openai/gpt-4o", "rate_limited", 429),
        AttemptSummary("openrouter/deepseek/deepseek-chat", "upstream_5xx", 503),
        AttemptSummary("local/qwen2.5-coder", "auth_error", 401),
    ]
    lines = exhausted_error(attempts).message.split("\n")
    assert lines == [
        "openai/gpt-4o: rate_limited (429)",
        "openrouter/deepseek/deepseek-chat: upstream_5xx (503)",
        "local/qwen2.5-coder: auth_error (401)",
    ]


def test_exhausted_message_line_without_status_has_candidate_and_reason() -> None:
    lines = exhausted_error([AttemptSummary("local/b", "connect_error")]).message.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("local/b: connect_error")


def test_exhausted_body_is_openai_shaped_with_attempt_objects() -> None:
    attempts = [AttemptSummary("openai/a", "upstream_5xx", 500), AttemptSummary("local/b", "connect_error")]
    error = exhausted_error(attempts)
    body = _decode(error)
    assert set(body) >= {"message", "type", "code", "param", "attempts"}
    assert body["message"] == error.message
    assert body["code"] == error.code
    assert isinstance(body["type"], str) and body["type"]
    assert body["param"] is None
    assert body["attempts"] == [
        {"candidate": "openai/a", "reason": "upstream_5xx", "status": 500},
        {"candidate": "local/b", "reason": "connect_error", "status": None},
    ]
    assert error.attempts == tuple(attempts)


def test_error_body_without_attempts_omits_the_attempts_key() -> None:
    body = json.loads(error_body(400, "invalid_model_reference", "bad model"))
    assert body == {
        "error": {
            "message": "bad model",
            "type": "invalid_request_error",
            "code": "invalid_model_reference",
            "param": None,
        }
    }


@pytest.mark.parametrize(
    ("status", "kind"), [(400, "invalid_request_error"), (429, "rate_limit_error"), (599, "server_error")]
)
def test_error_body_type_follows_the_status(status: int, kind: str) -> None:
    assert json.loads(error_body(status, "c", "m"))["error"]["type"] == kind


def test_stream_error_event_is_one_sse_data_event_with_an_error_object() -> None:
    event = stream_error_event("openai/gpt-4o", "stream_interrupted", "connection reset")
    assert event.startswith(b"data: ")
    assert event.endswith(b"\n\n")
    assert event.count(b"\n") == 2  # one event: no stray newline inside the payload
    payload = json.loads(event[len(b"data: ") : -2])
    assert set(payload) == {"error"}
    error = payload["error"]
    assert "openai/gpt-4o" in error["message"]
    assert error["code"] == "stream_interrupted"
    assert "param" in error and "type" in error
    assert b"[DONE]" not in event


def test_stream_error_event_escapes_newlines_in_the_detail() -> None:
    event = stream_error_event("openai/a", "timeout", "line one\nline two\r\n")
    assert event.count(b"\n") == 2
    assert "line one\nline two" in json.loads(event[6:-2])["error"]["message"]


# --- request headers to the upstream --------------------------------------------------------

_BASE = {
    "content-type": "application/json",
    "accept-encoding": "identity",
    "authorization": "Bearer sk-provider",
    "user-agent": "provider-configured-agent",
}

_HOSTILE_INBOUND = [
    (b"authorization", b"Bearer sk-client-secret"),
    (b"cookie", b"session=abc"),
    (b"x-api-key", b"client-key"),
    (b"proxy-authorization", b"Basic Zm9vOmJhcg=="),
    (b"connection", b"keep-alive, x-custom"),
    (b"keep-alive", b"timeout=5"),
    (b"te", b"trailers"),
    (b"upgrade", b"websocket"),
    (b"transfer-encoding", b"chunked"),
    (b"trailer", b"x-checksum"),
    (b"proxy-connection", b"keep-alive"),
    (b"host", b"router.example"),
    (b"content-length", b"123"),
    (b"x-forwarded-for", b"10.0.0.1"),
    (b"x-custom", b"1"),
    (b"x-request-id", b"client-chosen"),
    (b"accept", b"text/event-stream"),
    (b"user-agent", b"OpenAI/Python 1.0"),
]


@pytest.mark.parametrize(
    "name",
    [
        "authorization-client",
        "cookie",
        "x-api-key",
        "proxy-authorization",
        "connection",
        "keep-alive",
        "te",
        "upgrade",
        "transfer-encoding",
        "trailer",
        "proxy-connection",
        "host",
        "content-length",
        "x-forwarded-for",
        "x-custom",
    ],
)
def test_request_headers_never_copy_credentials_or_hop_by_hop(name: str) -> None:
    headers = request_headers_for_upstream(_HOSTILE_INBOUND, _BASE, "rid-1")
    if name == "authorization-client":
        assert headers["authorization"] == "Bearer sk-provider"
        assert "sk-client-secret" not in json.dumps(headers)
    else:
        assert name not in headers


def test_request_headers_without_provider_key_do_not_forward_client_authorization() -> None:
    headers = request_headers_for_upstream(_HOSTILE_INBOUND, {"content-type": "application/json"}, "rid-1")
    assert "authorization" not in headers
    assert "x-api-key" not in headers


def test_request_headers_copy_accept_and_user_agent() -> None:
    headers = request_headers_for_upstream(_HOSTILE_INBOUND, {"content-type": "application/json"}, "rid-1")
    assert headers["accept"] == "text/event-stream"
    assert headers["user-agent"] == "OpenAI/Python 1.0"


def test_request_headers_provider_base_wins_over_inbound() -> None:
    headers = request_headers_for_upstream(_HOSTILE_INBOUND, _BASE, "rid-1")
    assert headers["user-agent"] == "provider-configured-agent"
    assert headers["content-type"] == "application/json"
    assert headers["accept-encoding"] == "identity"
    assert headers["accept"] == "text/event-stream"


def test_request_headers_set_x_request_id_from_the_router_not_the_client() -> None:
    headers = request_headers_for_upstream(_HOSTILE_INBOUND, _BASE, "rid-42")
    assert headers["x-request-id"] == "rid-42"


@pytest.mark.parametrize("connection_first", [True, False], ids=["connection-first", "connection-last"])
def test_an_allowed_header_the_client_names_in_connection_is_not_forwarded_but_the_base_is_kept(
    connection_first: bool,
) -> None:
    named = (b"connection", b"keep-alive, X-Team, user-agent")
    others = [(b"x-team", b"a"), (b"accept", b"*/*"), (b"user-agent", b"client")]
    inbound = [named, *others] if connection_first else [*others, named]
    headers = request_headers_for_upstream(inbound, _BASE, "rid-1", FORWARDED_REQUEST_HEADERS | {b"x-team"})
    assert "x-team" not in headers  # hop-by-hop for this message, allowlisted or not
    assert headers["accept"] == "*/*"
    assert headers["user-agent"] == "provider-configured-agent"  # the provider's own stays


def test_request_headers_do_not_mutate_the_provider_base() -> None:
    base = dict(_BASE)
    request_headers_for_upstream(_HOSTILE_INBOUND, base, "rid-1")
    assert base == _BASE


# --- response headers to the client ---------------------------------------------------------


def _relayed(upstream: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    pairs = response_headers_for_client(upstream)
    return dict(pairs)


_UPSTREAM_RESPONSE = [
    (b"Content-Type", b"text/event-stream; charset=utf-8"),
    (b"Cache-Control", b"no-cache"),
    (b"X-Ratelimit-Remaining-Requests", b"99"),
    (b"openai-processing-ms", b"12"),
    (b"Connection", b"keep-alive, X-Secret-Hop"),
    (b"X-Secret-Hop", b"1"),
    (b"Keep-Alive", b"timeout=5"),
    (b"Transfer-Encoding", b"chunked"),
    (b"Upgrade", b"h2c"),
    (b"Trailer", b"x-checksum"),
    (b"Proxy-Authenticate", b"Basic"),
    (b"Set-Cookie", b"__cf_bm=abc; Domain=.openai.com"),
    (b"set-cookie", b"second=1"),
    (b"Content-Length", b"999"),
    (b"Server", b"cloudflare"),
    (b"Date", b"Wed, 21 Oct 2015 07:28:00 GMT"),
    (b"x-request-id", b"upstream-id"),
]


@pytest.mark.parametrize(
    "name",
    [
        b"connection",
        b"x-secret-hop",
        b"keep-alive",
        b"transfer-encoding",
        b"upgrade",
        b"trailer",
        b"proxy-authenticate",
        b"set-cookie",
        b"content-length",
        b"server",
        b"date",
        b"x-request-id",
    ],
)
def test_response_headers_drop_hop_by_hop_cookies_framing_and_identity(name: bytes) -> None:
    assert name not in _relayed(_UPSTREAM_RESPONSE)


def test_response_headers_keep_content_type_and_provider_metadata_lowercased() -> None:
    relayed = _relayed(_UPSTREAM_RESPONSE)
    assert relayed[b"content-type"] == b"text/event-stream; charset=utf-8"
    assert relayed[b"cache-control"] == b"no-cache"
    assert relayed[b"x-ratelimit-remaining-requests"] == b"99"
    assert relayed[b"openai-processing-ms"] == b"12"
    assert all(name == name.lower() for name, _ in response_headers_for_client(_UPSTREAM_RESPONSE))


def test_response_headers_keep_order_and_repeated_values() -> None:
    pairs = response_headers_for_client([(b"x-a", b"1"), (b"x-b", b"2"), (b"x-a", b"3")])
    assert pairs == [(b"x-a", b"1"), (b"x-b", b"2"), (b"x-a", b"3")]


def test_response_header_named_in_connection_is_dropped_only_when_named() -> None:
    kept = _relayed([(b"x-hop", b"1"), (b"content-type", b"application/json")])
    assert b"x-hop" in kept
    dropped = _relayed([(b"connection", b" X-Hop ,close"), (b"x-hop", b"1"), (b"content-type", b"application/json")])
    assert b"x-hop" not in dropped
    assert b"content-type" in dropped


def test_the_providers_x_request_id_comes_back_as_x_upstream_request_id() -> None:
    relayed = response_headers_for_client(_UPSTREAM_RESPONSE)
    assert relayed[-1] == (b"x-upstream-request-id", b"upstream-id")
    assert b"x-request-id" not in dict(relayed)  # the router's own is added after this filter


def test_anthropics_request_id_is_used_only_without_an_x_request_id() -> None:
    anthropic = [(b"content-type", b"application/json"), (b"Request-Id", b"req_011CSHoEeqs5C35K2UUqR7Fy")]
    relayed = _relayed(anthropic)
    assert relayed[b"x-upstream-request-id"] == b"req_011CSHoEeqs5C35K2UUqR7Fy"
    assert relayed[b"request-id"] == b"req_011CSHoEeqs5C35K2UUqR7Fy"  # relayed as it came, too
    assert _relayed([*anthropic, (b"x-request-id", b"req_x")])[b"x-upstream-request-id"] == b"req_x"


@pytest.mark.parametrize(
    "value", [b"abc\r\nX-Injected: 1", b"abc\n", b"a" * 129, b"", b"has space", b"\x1b[31m", b"caf\xc3\xa9"]
)
def test_a_provider_request_id_that_is_not_a_sane_token_is_not_echoed(value: bytes) -> None:
    assert b"x-upstream-request-id" not in _relayed([(b"x-request-id", value)])
    assert b"x-upstream-request-id" not in _relayed([(b"request-id", value)])


def test_an_upstream_cannot_forge_x_upstream_request_id() -> None:
    assert _relayed([(b"x-upstream-request-id", b"forged")]) == {}
    assert response_headers_for_client([(b"X-Upstream-Request-Id", b"forged"), (b"x-request-id", b"real")]) == [
        (b"x-upstream-request-id", b"real")
    ]


# --- inbound.parse_request ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"", "invalid_json"),
        (b"{not json", "invalid_json"),
        (b'{"model": "openai/gpt-4o",}', "invalid_json"),
        (b'{"model": "openai/gpt-4o", "temperature": NaN}', "invalid_json"),
        (b'{"model": "openai/gpt-4o", "temperature": Infinity}', "invalid_json"),
        (b'{"model": "openai/gpt-4o", "temperature": -Infinity}', "invalid_json"),
        (b'{"model": "\xff\xfe"}', "invalid_json"),
        (b"[" * 100_000 + b"]" * 100_000, "invalid_json"),
        (b"[]", "invalid_request"),
        (b'"openai/gpt-4o"', "invalid_request"),
        (b"null", "invalid_request"),
        (b"42", "invalid_request"),
        (b"{}", "missing_model"),
        (b'{"messages": []}', "missing_model"),
        (b'{"model": null}', "invalid_model_reference"),
        (b'{"model": 4}', "invalid_model_reference"),
        (b'{"model": ["openai/gpt-4o"]}', "invalid_model_reference"),
        (b'{"model": {"name": "x"}}', "invalid_model_reference"),
    ],
    ids=lambda value: value[:40].decode("latin-1") if isinstance(value, bytes) else value,
)
def test_parse_request_refuses_bad_bodies_with_400_and_the_right_code(body: bytes, code: str) -> None:
    result = parse_request(body)
    assert isinstance(result, RouterError), result
    assert result.status == 400
    assert result.code == code
    assert json.loads(result.body())["error"]["code"] == code


def test_parse_request_accepts_a_chat_request_and_reads_the_stream_flag() -> None:
    result = parse_request(b'{"model": "openai/gpt-4o", "messages": [], "stream": true}')
    assert isinstance(result, InboundRequest)
    assert result.payload["model"] == "openai/gpt-4o"
    assert result.stream is True


@pytest.mark.parametrize("stream", ["false", '"true"', "1", "null"])
def test_parse_request_stream_is_true_only_for_json_true(stream: str) -> None:
    result = parse_request(b'{"model": "a/b", "stream": ' + stream.encode() + b"}")
    assert isinstance(result, InboundRequest)
    assert result.stream is False


# --- inbound.request_id_for -----------------------------------------------------------------


def _scope(*headers: tuple[bytes, bytes]) -> dict[str, Any]:
    return {"type": "http", "headers": list(headers)}


_GENERATED = re.compile(r"[0-9a-f]{32}")


@pytest.mark.parametrize("value", [b"abc-123", b"req_01HZX.9:x", b"a" * 128])
def test_request_id_for_echoes_a_sane_client_id(value: bytes) -> None:
    assert request_id_for(_scope((b"x-request-id", value))) == value.decode()


@pytest.mark.parametrize(
    "value",
    [b"abc\r\nX-Injected: 1", b"abc\n", b"abc\r", b"a" * 129, b"", b"has space", b"\x1b[31m", b"caf\xc3\xa9"],
)
def test_request_id_for_replaces_an_unsafe_client_id(value: bytes) -> None:
    request_id = request_id_for(_scope((b"x-request-id", value)))
    assert request_id != value.decode("latin-1")
    assert _GENERATED.fullmatch(request_id)


def test_request_id_for_generates_a_fresh_id_when_absent() -> None:
    first = request_id_for(_scope((b"accept", b"*/*")))
    second = request_id_for(_scope())
    assert _GENERATED.fullmatch(first) and _GENERATED.fullmatch(second)
    assert first != second


def test_fresh_request_ids_are_distinct_32_hex_digit_tokens() -> None:
    ids = [fresh_request_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert all(_GENERATED.fullmatch(request_id) for request_id in ids)


def test_a_forked_child_draws_request_ids_of_its_own_not_its_parents() -> None:
    fresh_request_id()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child process
        try:
            os.write(write_end, fresh_request_id().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    drawn_by_child = os.read(read_end, 64).decode()
    os.close(read_end)
    os.waitpid(child, 0)
    assert _GENERATED.fullmatch(drawn_by_child)
    assert drawn_by_child != fresh_request_id()


# --- WireBody / wire_targets --------------------------------------------------------------


def _first_key(wire: bytes) -> str:
    return next(iter(json.loads(wire)))


_PAYLOAD: dict[str, Any] = {
    "messages": [{"role": "user", "content": "hi", "model": "nested-is-not-the-target"}],
    "model": "group/coder",
    "stream": True,
    "temperature": 0.2,
    "tools": [],
    "metadata": {"a": None, "b": [1, 2.5, False]},
}


def test_wire_body_puts_model_first_with_the_candidate_id() -> None:
    wire = WireBody(_PAYLOAD).for_model("deepseek/deepseek-chat")
    assert wire.startswith(b'{"model":"deepseek/deepseek-chat",')
    assert _first_key(wire) == "model"
    assert json.loads(wire)["model"] == "deepseek/deepseek-chat"


def test_wire_body_round_trips_the_rest_of_the_payload() -> None:
    wire = WireBody(_PAYLOAD).for_model("gpt-4o")
    assert json.loads(wire) == {**_PAYLOAD, "model": "gpt-4o"}


def test_wire_body_is_reusable_across_candidates() -> None:
    body = WireBody(_PAYLOAD)
    first, second = body.for_model("a"), body.for_model("b:7b")
    assert json.loads(first) == {**_PAYLOAD, "model": "a"}
    assert json.loads(second) == {**_PAYLOAD, "model": "b:7b"}


def test_wire_body_with_only_model_is_a_one_member_object() -> None:
    wire = WireBody({"model": "group/x"}).for_model("gpt-4o")
    assert wire == b'{"model":"gpt-4o"}'
    assert json.loads(wire) == {"model": "gpt-4o"}


def test_wire_body_keeps_non_ascii_text_as_utf8() -> None:
    text = "héllo 日本語 🙂"
    wire = WireBody({"model": "x", "messages": [{"role": "user", "content": text}]}).for_model("m")
    assert text.encode("utf-8") in wire
    assert json.loads(wire)["messages"][0]["content"] == text


def test_wire_body_survives_lone_surrogate_escapes() -> None:
    payload = json.loads(b'{"model": "x", "messages": [{"content": "bad \\ud800 pair \\udfff and \xc3\xa9"}]}')
    wire = WireBody(payload).for_model("gpt-4o")
    wire.decode("utf-8")  # the wire is valid UTF-8 ...
    assert json.loads(wire) == {**payload, "model": "gpt-4o"}  # ... and still carries the same text
    assert wire_targets(wire, "gpt-4o")


def test_wire_targets_accepts_the_body_built_for_that_candidate() -> None:
    assert wire_targets(WireBody(_PAYLOAD).for_model("gpt-4o"), "gpt-4o")
    assert wire_targets(WireBody({"model": "x"}).for_model("gpt-4o"), "gpt-4o")


def test_wire_targets_rejects_a_different_id() -> None:
    assert not wire_targets(WireBody(_PAYLOAD).for_model("gpt-4o"), "claude-3")


@pytest.mark.parametrize(("built_for", "checked"), [("gpt-4o", "gpt-4"), ("gpt-4", "gpt-4o"), ("a/b", "a")])
def test_wire_targets_rejects_prefix_and_extension_ids(built_for: str, checked: str) -> None:
    assert not wire_targets(WireBody(_PAYLOAD).for_model(built_for), checked)
    assert not wire_targets(WireBody({"model": "x"}).for_model(built_for), checked)


def test_wire_targets_rejects_a_body_whose_first_member_is_not_model() -> None:
    assert not wire_targets(b'{"stream":true,"model":"gpt-4o"}', "gpt-4o")
    assert not wire_targets(b"", "gpt-4o")


@pytest.mark.parametrize("count", [b"0", b"2", b""])
def test_a_client_sending_x_stainless_retry_count_retries_on_its_own_whatever_the_count(count: bytes) -> None:
    assert client_retries([(b"accept", b"*/*"), (b"x-stainless-retry-count", count)])


def test_a_client_without_x_stainless_retry_count_does_not_say_it_retries() -> None:
    assert not client_retries([(b"accept", b"*/*"), (b"x-stainless-lang", b"python")])
