"""Property tests (hypothesis): parsing is total, config validation is total, the relay is exact.

Each property runs a bounded number of examples (``_FAST``) so that the suite stays quick on a
small CI machine; ``deadline=None`` because a shared core makes single examples slow at random.
The router-level properties drive ``ModelRouter`` with hand-written ``receive``/``send`` over an
injected scripted transport (no sockets), so one router serves every example.
"""

from __future__ import annotations

import itertools
import json
import string
from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from asgi_router import ModelRouter, RouterSettings
from asgi_router.core.refs import MAX_MODEL_ID_LENGTH, InvalidRef, ModelRef, parse_model_ref
from asgi_router.inbound.safejson import JsonRefused, loads_with_span
from asgi_router.inbound.screen import FORBIDDEN_FIELDS
from asgi_router.routing.plan import Plan, Resolver
from asgi_router.transports.provider import ProviderRuntime
from bench.asgi_calls import receive_once

from .conftest import SentMessages, host_app, make_settings
from .fakes import FakeTransport

_FAST = settings(
    max_examples=150,
    deadline=None,
    # The suite's autouse leak check is function-scoped: running it once around all examples is intended.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# --- ModelRef parsing ------------------------------------------------------------------------

_REF_ALPHABET = string.ascii_letters + string.digits + "._:@+~/-" + " \t\r\n\x00\x1b\x7f\u00e9\u202e\uff4f%?#"
_SAFE = frozenset(string.ascii_letters + string.digits + "._:@+~/-")

model_strings = st.one_of(
    st.text(max_size=400),
    st.text(alphabet=_REF_ALPHABET, max_size=40),
    st.builds(
        lambda head, tail: f"{head}/{tail}",
        st.sampled_from(["openai", "group", "openrouter", "", "a b", "x" * 65]),
        st.text(alphabet=_REF_ALPHABET, max_size=MAX_MODEL_ID_LENGTH + 2),
    ),
)


@_FAST
@given(value=st.one_of(model_strings, st.none(), st.integers(), st.floats(), st.lists(st.text(max_size=3))))
def test_model_ref_parsing_is_total_and_whatever_it_accepts_is_header_safe(value: object) -> None:
    ref = parse_model_ref(value)
    assert isinstance(ref, (ModelRef, InvalidRef))
    if isinstance(ref, ModelRef):
        assert str(ref) == value  # the ref says exactly what the client wrote...
        assert set(str(ref)) <= _SAFE  # ...and that is safe in a header or a log line
        assert len(str(ref)) <= MAX_MODEL_ID_LENGTH + 65
    else:
        assert ref.message.isascii() and ref.message.isprintable()


# --- the request parse's span walk ------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_LAYOUTS = st.sampled_from(
    [
        {"separators": (",", ":")},
        {"separators": (", ", ": ")},
        {"separators": (" ,\t", " :\r\n ")},
        {"indent": 2},
    ]
)


def _chat_body(members: dict[str, Any], model: str, at: int, layout: dict[str, Any], ascii_only: bool) -> bytes:
    items = [(name, value) for name, value in members.items() if name != "model"]
    items.insert(min(at, len(items)), ("model", model))
    return json.dumps(dict(items), ensure_ascii=ascii_only, **layout).encode()


@_FAST
@given(
    members=st.dictionaries(st.text(max_size=6), json_values, max_size=5),
    model=st.text(max_size=10),
    at=st.integers(0, 5),
    layout=_LAYOUTS,
    ascii_only=st.booleans(),
)
def test_the_span_walk_reads_any_object_as_json_does_and_spans_exactly_its_model(
    members: dict[str, Any], model: str, at: int, layout: dict[str, Any], ascii_only: bool
) -> None:
    body = _chat_body(members, model, at, layout, ascii_only)
    parsed = loads_with_span(body, "model")
    assert not isinstance(parsed, JsonRefused)
    payload, span = parsed
    assert payload == json.loads(body)
    assert span is not None
    assert json.loads(body[span[0] : span[1]]) == model


@_FAST
@given(members=st.dictionaries(st.text(max_size=6), json_values, max_size=4), layout=_LAYOUTS, cut=st.data())
def test_any_truncated_object_is_refused_not_crashed_on(
    members: dict[str, Any], layout: dict[str, Any], cut: st.DataObject
) -> None:
    body = _chat_body(members, "group/x", 0, layout, True)
    end = cut.draw(st.integers(0, len(body.rstrip()) - 1))
    assert isinstance(loads_with_span(body[:end], "model"), JsonRefused)


# --- config validation -------------------------------------------------------------------------

SECRET_MARK = "sk-hypothesis-SECRET-0123456789"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
names = st.sampled_from(["openai", "local", "g1", "g2", "group", "bad name", "", "a/b", "x" * 70])
refs = st.sampled_from(["openai/gpt-4o", "local/q:7b", "group/g1", "group/g2", "group/zz", "nobody/x", "bare", ""])
providers = st.fixed_dictionaries(
    {
        "base_url": st.sampled_from(
            ["https://api.openai.com/v1", "http://127.0.0.1:11434/v1", "ftp://x", "http://", "http://h:99999", "x"]
        )
    },
    optional={
        "api_key": st.sampled_from([SECRET_MARK, "", " "]),
        "api_key_env": st.sampled_from(["OPENAI_API_KEY", ""]),
        "timeouts": st.dictionaries(st.sampled_from(["connect", "first_byte", "idle", "total", "x"]), json_values),
        "headers": st.dictionaries(st.sampled_from(["HTTP-Referer", "connection", "bad name", "x"]), json_values),
        "forward_headers": st.lists(st.sampled_from(["traceparent", "authorization", "proxy-x", "", "a b"])),
    },
)
groups = st.fixed_dictionaries(
    {"members": st.lists(refs, max_size=4)},
    optional={
        "strategy": st.sampled_from(["order", "rotate", "random"]),
        "failover_on": st.lists(st.sampled_from(["timeout", "client_error", "nonsense"])),
    },
)


@st.composite
def plausible_configs(draw: st.DrawFn) -> dict[str, Any]:
    """Configs that are often valid, so that cycles, depth and dangling refs get exercised too."""
    provider_names = draw(
        st.lists(st.sampled_from(["openai", "local", "or", "openrouter", "group"]), min_size=1, max_size=3, unique=True)
    )
    group_names = draw(st.lists(st.sampled_from(["g1", "g2", "g3", "g4"]), max_size=4, unique=True))
    good = [f"{name}/m-{index}" for name in provider_names for index in range(2)]
    member = st.sampled_from(good + [f"group/{name}" for name in group_names])

    def members() -> list[str]:
        chosen = draw(st.lists(member, min_size=1, max_size=3))
        if draw(st.integers(0, 9)) == 0:  # now and then, one bad reference
            chosen.append(draw(refs))
        return chosen

    return {
        "providers": {name: {"base_url": "https://x.example/v1", "api_key": SECRET_MARK} for name in provider_names},
        "groups": {
            name: {"members": members(), "strategy": draw(st.sampled_from(["order", "rotate"]))} for name in group_names
        },
        "aliases": draw(st.dictionaries(st.sampled_from(["fast", "cheap"]), member, max_size=2)),
        "allow_unauthenticated": True,  # settings are refused without an inbound auth choice
    }


configs = st.one_of(
    plausible_configs(),
    st.fixed_dictionaries(
        {},
        optional={
            "providers": st.dictionaries(names, providers | json_values, max_size=3),
            "groups": st.dictionaries(names, groups | json_values, max_size=3),
            "aliases": st.dictionaries(names, refs | json_values, max_size=2),
            "routes": st.lists(st.sampled_from(["/v1/chat/completions", "v1/x", ""]), max_size=2) | json_values,
            "max_body_bytes": json_values,
            "max_event_bytes": json_values,
            "state_url": json_values
            | st.sampled_from([f"redis://:{SECRET_MARK[:9]}#{SECRET_MARK[9:]}@h/0", "redis://h:x"]),
            "body_timeout": json_values,
            "api_keys": st.lists(st.sampled_from([SECRET_MARK, "short", ""]), max_size=2) | json_values,
            "allow_unauthenticated": json_values,
            "pool": st.dictionaries(st.sampled_from(["max_connections", "keepalive_expiry", "x"]), json_values),
        },
    ),
    st.dictionaries(st.text(alphabet=string.ascii_lowercase, min_size=1, max_size=10), json_values, max_size=4),
)


@_FAST
@given(config=configs)
def test_any_config_dict_gives_settings_or_a_validation_error_that_hides_secrets(config: dict[str, Any]) -> None:
    try:
        built = RouterSettings(**config)
    except ValidationError as exc:
        assert SECRET_MARK[:5] not in str(exc)
        return
    # Whatever validation let through resolves without surprises (defence in depth holds).
    resolver = Resolver(built)
    for name in built.groups:
        plan = resolver.resolve_string(f"group/{name}")
        assert isinstance(plan, Plan) and plan.candidates
        assert {candidate.provider for candidate in plan.candidates} <= set(built.providers)
    for alias in built.aliases:
        assert isinstance(resolver.resolve_string(alias), Plan)


# --- the router, driven by hand ----------------------------------------------------------------


class _Scripted:
    """An upstream response that yields exactly the given chunks."""

    def __init__(self, status: int, content_type: bytes, chunks: list[bytes]) -> None:
        self.status = status
        self.raw_headers = [(b"content-type", content_type)]
        self.drained = False
        self.chunks = self._chunks(chunks)
        self.closed = False

    @staticmethod
    async def _chunks(chunks: list[bytes]) -> AsyncIterator[bytes]:
        for chunk in chunks:
            await anyio.lowlevel.checkpoint()  # a real await between chunks, as from a socket
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


class _ScriptedTransport(FakeTransport):
    """Answers with the response of the example being run (:meth:`script`); keeps what was sent."""

    def __init__(self) -> None:
        self.response = _Scripted(200, b"application/json", [b"{}"])
        self.sent: list[bytes] = []

    def script(self, response: _Scripted) -> _ScriptedTransport:
        self.response, self.sent = response, []
        return self

    async def send(self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes) -> _Scripted:
        self.sent.append(body)
        return self.response


@pytest.fixture(scope="module")
def scripted() -> _ScriptedTransport:
    return _ScriptedTransport()


@pytest.fixture(scope="module")
def router(scripted: _ScriptedTransport) -> ModelRouter:
    """One router for every example, on a transport each example scripts anew."""
    return ModelRouter(host_app(), settings=make_settings("http://127.0.0.1:9"), transport=scripted)


async def _drive(router: ModelRouter, body: bytes, headers: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
    """One request through ``router``; the messages it sent."""
    sent = SentMessages()

    receive = receive_once(body, then=anyio.sleep_forever)

    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers, "query_string": b""}
    with anyio.fail_after(10):
        await router(scope, receive, sent)  # type: ignore[arg-type]
    return sent


_JSON = [(b"content-type", b"application/json")]


def _sse(texts: list[str]) -> bytes:
    events = [
        "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": t}}]}, ensure_ascii=False) + "\n\n"
        for t in texts
    ]
    finish = 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'  # shown even with no text
    return "".join(events).encode() + finish.encode() + b"data: [DONE]\n\n"


@st.composite
def split_streams(draw: st.DrawFn) -> tuple[bytes, list[bytes]]:
    """A random SSE stream (multi-byte UTF-8 included) and a random split of it into chunks."""
    stream = _sse(draw(st.lists(st.text(max_size=20), max_size=8)))
    cuts = sorted(draw(st.sets(st.integers(1, len(stream) - 1), max_size=min(30, len(stream) - 1))))
    bounds = [0, *cuts, len(stream)]
    return stream, [stream[a:b] for a, b in itertools.pairwise(bounds)]


@_FAST
@given(case=split_streams())
def test_relay_sends_any_split_of_any_sse_stream_byte_exact_and_unregrouped(
    router: ModelRouter, scripted: _ScriptedTransport, case: tuple[bytes, list[bytes]]
) -> None:
    stream, chunks = case
    transport = scripted.script(_Scripted(200, b"text/event-stream", chunks))
    request = json.dumps({"model": "mock/x", "stream": True, "messages": []}).encode()
    sent = anyio.run(_drive, router, request, _JSON)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    bodies = [message for message in sent[1:] if message["type"] == "http.response.body"]
    assert [message["body"] for message in bodies[:-1]] == chunks  # one message per upstream chunk
    assert b"".join(message["body"] for message in bodies) == stream
    assert bodies[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert transport.response.closed


chat_like = st.tuples(
    st.fixed_dictionaries(
        {"model": st.sampled_from(["mock/ok", "group/none", "bare", "mock/\r\n", "", "x" * 400]) | json_values},
        optional={"stream": json_values, "messages": json_values},
    ),
    st.dictionaries(st.sampled_from([*FORBIDDEN_FIELDS, "temperature", "user", "API-Base"]), json_values, max_size=2),
).map(lambda parts: json.dumps({**parts[0], **parts[1]}).encode())
request_bodies = st.one_of(
    st.binary(max_size=300),
    json_values.map(lambda value: json.dumps(value).encode()),
    chat_like,
)
content_types = st.sampled_from(
    [[(b"content-type", b"application/json")], [(b"content-type", b"text/plain")], [], [(b"content-encoding", b"gzip")]]
)


@_FAST
@given(body=request_bodies, headers=content_types)
def test_any_request_gets_an_openai_shaped_answer_never_a_500_or_a_traceback(
    router: ModelRouter, scripted: _ScriptedTransport, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    completion = json.dumps({"choices": [{"message": {"content": "ok"}}]}).encode()
    scripted.script(_Scripted(200, b"application/json", [completion]))
    sent = anyio.run(_drive, router, body, headers)
    status = sent[0]["status"]
    payload = b"".join(message.get("body", b"") for message in sent[1:])
    assert status in (200, 400, 404, 415), payload
    assert b"Traceback" not in payload
    if status != 200:
        error = json.loads(payload)["error"]
        assert set(error) == {"message", "type", "code", "param"}
        assert isinstance(error["message"], str) and error["message"].isprintable()


# --- request bodies that are not UTF-8 -----------------------------------------------------------

# Byte sequences that are never valid UTF-8 wherever they sit: an encoded surrogate, bytes UTF-8
# never uses, an overlong encoding, a lead byte cut short, a code point past U+10FFFF, a stray
# continuation byte.
_NOT_UTF8 = [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xff", b"\xfe", b"\xc0\xaf", b"\xe4\xbd", b"\xf4\x90\x80\x80", b"\x80"]


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@st.composite
def non_utf8_bodies(draw: st.DrawFn) -> bytes:
    """A chat body (or any bytes) with bytes that are not UTF-8 put in anywhere, strings included."""
    base = draw(
        st.one_of(
            chat_like,
            st.builds(
                lambda text: json.dumps(
                    {"model": "mock/x", "messages": [{"content": text}]}, ensure_ascii=False
                ).encode(),
                st.text(),
            ),
            st.binary(max_size=100),
        )
    )
    at = draw(st.integers(0, len(base)))
    body = base[:at] + draw(st.sampled_from(_NOT_UTF8)) + base[at:]
    assume(not _is_utf8(body))  # arbitrary bytes may complete what was put in (b"\xc3" + b"\x80")
    return body


def _drive_to_json_upstream(
    router: ModelRouter, scripted: _ScriptedTransport, body: bytes
) -> tuple[list[dict[str, Any]], _ScriptedTransport]:
    """One JSON request through ``router`` to an upstream answering ``{}``: what was sent back,
    and the transport (what reached the upstream)."""
    transport = scripted.script(_Scripted(200, b"application/json", [b"{}"]))
    return anyio.run(_drive, router, body, _JSON), transport


@_FAST
@given(body=non_utf8_bodies() | st.binary(min_size=1, max_size=300).filter(lambda data: not _is_utf8(data)))
def test_any_body_that_is_not_utf8_is_a_400_invalid_json_before_any_upstream_is_called(
    router: ModelRouter, scripted: _ScriptedTransport, body: bytes
) -> None:
    sent, transport = _drive_to_json_upstream(router, scripted, body)
    assert sent[0]["status"] == 400
    assert json.loads(b"".join(message.get("body", b"") for message in sent[1:]))["error"]["code"] == "invalid_json"
    assert transport.sent == []


@pytest.mark.parametrize(
    "body",
    [
        b'{"model":"mock/x","messages":[{"role":"user","content":"half a pair: \\ud800 and \\udfff"}]}',
        # A repeated member makes the router re-serialise the body instead of splicing it.
        b'{"model":"mock/x","user":"a","user":"\\ud83d","messages":[{"content":"\\ud800\xc3\xa9"}]}',
    ],
    ids=["spliced", "re-serialised"],
)
def test_lone_surrogate_escapes_are_valid_json_and_reach_the_upstream_as_escapes_in_utf8(
    router: ModelRouter, scripted: _ScriptedTransport, body: bytes
) -> None:
    sent, transport = _drive_to_json_upstream(router, scripted, body)
    assert sent[0]["status"] == 200
    (wire,) = transport.sent
    wire.decode("utf-8")  # what the upstream gets is UTF-8 ...
    assert json.loads(wire) == {**json.loads(body), "model": "x"}  # ... with the same (escaped) text
    assert b"\\ud800" in wire


# --- the OpenAI <-> Anthropic translation, over arbitrary JSON in every field it reads --------------

_hostile_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=10,
)
_ROLES_SEEN = st.sampled_from(["user", "assistant", "assistant", "system", "developer", "tool", "function", ""])
_tool_call_values = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "id": _hostile_json,
            "type": _hostile_json,
            "function": st.fixed_dictionaries({}, optional={"name": _hostile_json, "arguments": _hostile_json})
            | _hostile_json,
        },
    )
    | _hostile_json,
    max_size=3,
)
_part_values = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "image_url", "refusal", "input_audio"]) | _hostile_json},
        optional={"text": _hostile_json, "image_url": _hostile_json, "refusal": _hostile_json},
    )
    | _hostile_json,
    max_size=3,
)
_hostile_messages = st.lists(
    st.fixed_dictionaries(
        {"role": _ROLES_SEEN},
        optional={
            "content": st.text(max_size=8) | _part_values | _hostile_json,
            "tool_calls": _tool_call_values | st.integers() | st.booleans() | _hostile_json,
            "tool_call_id": _hostile_json,
            "function_call": _hostile_json,
            "audio": _hostile_json,
            "name": _hostile_json,
        },
    )
    | _hostile_json,
    max_size=4,
)
_hostile_tools = st.lists(
    st.fixed_dictionaries(
        {"type": st.just("function") | _hostile_json},
        optional={
            "function": st.fixed_dictionaries(
                {},
                optional={
                    "name": _hostile_json,
                    "description": _hostile_json,
                    "parameters": _hostile_json,
                    "strict": _hostile_json,
                },
            )
            | _hostile_json
        },
    )
    | _hostile_json,
    max_size=3,
)


def _translated_fields() -> dict[str, Any]:
    from asgi_router.protocols.to_anthropic import AT_DEFAULT_ONLY, IGNORED, TRANSLATED

    fields: dict[str, Any] = {name: _hostile_json for name in (*TRANSLATED, *AT_DEFAULT_ONLY, *IGNORED)}
    fields.pop("messages")  # always present: most of the translation reads it
    fields["tools"] = _hostile_tools | _hostile_json
    return fields


@_FAST
# The red-team pass's cases, always run: tool_calls a number or true was a TypeError (a 500).
@example(payload={"messages": [{"role": "assistant", "tool_calls": 5}]}, extra={})
@example(payload={"messages": [{"role": "assistant", "content": "x", "tool_calls": True}]}, extra={})
@example(
    payload={
        "messages": [{"role": "assistant", "tool_calls": [{"id": "a", "function": {"name": "f", "arguments": 7}}]}]
    },
    extra={},
)
@example(
    payload={"messages": [{"role": "tool", "tool_call_id": "a", "content": [{"type": "text", "text": 5}]}]}, extra={}
)
@given(
    payload=st.fixed_dictionaries({"messages": _hostile_messages | _hostile_json}, optional=_translated_fields()),
    extra=st.dictionaries(st.text(max_size=6), _hostile_json, max_size=2),
)
def test_the_translation_to_anthropic_answers_any_json_in_any_field_with_a_request_or_a_reason(
    payload: dict[str, Any], extra: dict[str, Any]
) -> None:
    from asgi_router.protocols.to_anthropic import Untranslatable, to_messages_request

    result = to_messages_request({**payload, **extra}, 4096)
    if isinstance(result, Untranslatable):
        assert result.detail.isprintable() and len(result.detail) < 400
    else:
        json.dumps(result)  # what goes on the wire is JSON
        assert isinstance(result["messages"], list) and isinstance(result["max_tokens"], int)


_anthropic_blocks = st.lists(
    st.fixed_dictionaries(
        {"type": st.sampled_from(["text", "thinking", "tool_use", "image"]) | _hostile_json},
        optional={
            "text": _hostile_json,
            "thinking": _hostile_json,
            "input": _hostile_json,
            "name": _hostile_json,
            "id": _hostile_json,
        },
    )
    | _hostile_json,
    max_size=3,
)
_anthropic_usage = st.fixed_dictionaries(
    {},
    optional={
        key: _hostile_json | st.sampled_from([10**300, -1, True])
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    },
)
_anthropic_messages = st.fixed_dictionaries(
    {"type": st.just("message") | _hostile_json, "content": _anthropic_blocks | _hostile_json},
    optional={
        "id": _hostile_json,
        "model": _hostile_json,
        "stop_reason": _hostile_json,
        "usage": _anthropic_usage | _hostile_json,
    },
)


@_FAST
@given(message=_anthropic_messages)
def test_an_anthropic_message_of_any_shape_becomes_a_completion_or_none_never_an_error(message: dict[str, Any]) -> None:
    from asgi_router.core.usage_bounds import MAX_PLAUSIBLE_TOKENS
    from asgi_router.protocols.from_anthropic import completion_from_message

    out = completion_from_message(json.dumps(message).encode())
    if out is not None:
        completion = json.loads(out)
        usage = completion["usage"]
        assert all(0 <= usage[key] <= 3 * MAX_PLAUSIBLE_TOKENS for key in ("prompt_tokens", "completion_tokens"))


_anthropic_events = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                [
                    "message_start",
                    "content_block_start",
                    "content_block_delta",
                    "message_delta",
                    "message_stop",
                    "error",
                    "ping",
                ]
            )
            | _hostile_json
        },
        optional={
            "message": _anthropic_messages | _hostile_json,
            "index": st.integers(-1, 3) | _hostile_json,
            "content_block": st.fixed_dictionaries(
                {"type": st.sampled_from(["text", "tool_use"]) | _hostile_json},
                optional={"text": _hostile_json, "id": _hostile_json, "name": _hostile_json},
            )
            | _hostile_json,
            "delta": st.fixed_dictionaries(
                {"type": st.sampled_from(["text_delta", "input_json_delta", "thinking_delta"]) | _hostile_json},
                optional={
                    "text": _hostile_json,
                    "partial_json": _hostile_json,
                    "thinking": _hostile_json,
                    "stop_reason": _hostile_json,
                },
            )
            | _hostile_json,
            "usage": _anthropic_usage | _hostile_json,
            "error": st.fixed_dictionaries({}, optional={"type": _hostile_json, "message": _hostile_json})
            | _hostile_json,
        },
    )
    | _hostile_json,
    max_size=6,
)


@_FAST
@given(events=_anthropic_events, cuts=st.lists(st.integers(1, 40), max_size=6), include_usage=st.booleans())
def test_an_anthropic_stream_of_any_events_cut_anywhere_translates_without_an_error(
    events: list[Any], cuts: list[int], include_usage: bool
) -> None:
    from asgi_router.protocols.from_anthropic import StreamTranslation

    stream = b"".join(b"event: x\ndata: " + json.dumps(event).encode() + b"\n\n" for event in events)
    translation = StreamTranslation(include_usage)
    out, at = b"", 0
    for size in [*cuts, len(stream)]:
        out += translation.feed(stream[at : at + size])
        at += size
    for line in out.split(b"\n"):
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            json.loads(line[6:])  # every chunk the client gets is JSON
    if translation.failure is not None:
        kind, message = translation.failure
        assert len(kind) <= 500 and len(message) <= 500


@_FAST
# The red-team pass's cases: a password with an unencoded '#', '/' or '?', a malformed Sentinel URL.
@example(url=f"redis://:{SECRET_MARK[:9]}#{SECRET_MARK[9:]}@h:6379/0")
@example(url=f"redis://u:{SECRET_MARK[:9]}/{SECRET_MARK[9:]}@h:6379/0")
@example(url=f"redis://u:{SECRET_MARK[:9]}?{SECRET_MARK[9:]}@h:6379/0")
@example(url=f"redis+sentinel://u:{SECRET_MARK}@h:x/primary")
@example(url=f"redis://{SECRET_MARK}@:@1")  # found by this test: a token, '@', then ':' before the last '@'
@example(url=f"u:{SECRET_MARK}@://h")  # found by this test: no scheme, so the user part stood before '://'
@example(url=f"unix:///run/redis.sock?password={SECRET_MARK}#{SECRET_MARK}")
@given(
    url=st.builds(
        # A secret in the user part is followed by its '@' (without one it would be the host).
        lambda scheme, user, at, rest: f"{scheme}{user}{'@' if SECRET_MARK[:5] in user else at}{rest}",
        st.sampled_from(["redis://", "rediss://", "unix://", "redis+sentinel://", "memory://", "http://", ""]),
        st.sampled_from(
            ["", ":", "u:", "u:" + SECRET_MARK, ":" + SECRET_MARK[:9] + "#" + SECRET_MARK[9:], SECRET_MARK]
        ),
        st.sampled_from(["", "@"]),
        st.text(alphabet="ab1:/?#@=&%,. ", max_size=20)
        | st.sampled_from(["h:6379/0", "h:x/p", "/tmp/s.sock?password=" + SECRET_MARK]),
    )
)
def test_any_state_url_is_accepted_and_masked_or_refused_without_the_secret(url: str) -> None:
    from asgi_router.core.store_url import mask_store_url
    from asgi_router.fleet.link import usable_url

    try:
        built = RouterSettings(allow_unauthenticated=True, state_url=url)
    except ValidationError as exc:
        assert SECRET_MARK[:9] not in str(exc)
        return
    if built.state_url is not None:
        accepted = built.state_url.get_secret_value()
        assert SECRET_MARK[:9] not in mask_store_url(accepted)
        assert usable_url(accepted)  # what the settings accept, redis-py (or Sentinel) can parse
