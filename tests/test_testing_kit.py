"""The test kit users get (``asgi_router.testing``): each reply as a client sees it on the wire,
scripts, hits, the captured events, and the pytest plugin.

The fake upstream here is the plugin's own ``fake_upstream`` fixture (one server for the
session, reset before each test), as a user's suite has it. Clients talk to it directly, or
through a router served by the kit's ``AppServer``.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from starlette.applications import Starlette

import _asgi_router_pytest
from asgi_router import ModelRouter, RouterSettings
from asgi_router.config.ledger_settings import DEFAULT_LEDGER_VARIABLE
from asgi_router.testing import AppServer, CapturedEvents, FakeUpstream, Hit, reply

from .commands import free_port, serving
from .conftest import API_KEY, CLIENT_KEY

pytestmark = pytest.mark.anyio

_MESSAGES = [{"role": "user", "content": "two words"}]


def _post(upstream: FakeUpstream, model: str, *, timeout: float = 5, **body: Any) -> httpx2.Response:
    return httpx2.post(
        f"{upstream.base_url}/chat/completions",
        json={"model": model, "messages": _MESSAGES, **body},
        timeout=timeout,
    )


def _events(raw: bytes) -> list[bytes]:
    assert raw.endswith(b"\n\n") and b"\r" not in raw  # events end in a blank line, LF only
    return [event.removeprefix(b"data: ") for event in raw.split(b"\n\n")[:-1]]


def _sdk(upstream: FakeUpstream) -> openai.OpenAI:
    return openai.OpenAI(base_url=upstream.base_url, api_key=upstream.api_key, max_retries=0)


# --- replies, as a client sees them --------------------------------------------------------------


def test_an_unscripted_model_answers_ok_naming_it_in_json_and_as_openais_stream(fake_upstream: FakeUpstream) -> None:
    with _sdk(fake_upstream) as client:
        whole = client.chat.completions.create(model="any-model", messages=_MESSAGES)  # type: ignore[arg-type]
        streamed = client.chat.completions.create(model="any-model", messages=_MESSAGES, stream=True)  # type: ignore[arg-type]
        deltas = [chunk.choices[0].delta for chunk in streamed]
    assert whole.choices[0].message.content == "Hello from any-model"
    assert whole.usage is not None and (whole.usage.prompt_tokens, whole.usage.completion_tokens) == (2, 3)
    assert deltas[0].role == "assistant" and deltas[0].content == ""  # OpenAI opens with the role
    assert [delta.content for delta in deltas[1:-1]] == ["Hello", " from", " any-model"]
    assert deltas[-1].content is None  # the finish_reason chunk

    raw = _post(fake_upstream, "any-model", stream=True)
    assert raw.headers["content-type"] == "text/event-stream; charset=utf-8"
    events = _events(raw.content)
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    assert {(chunk["id"], chunk["object"]) for chunk in chunks} == {("chatcmpl-fake", "chat.completion.chunk")}
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert all("usage" not in chunk for chunk in chunks)  # not asked for


def test_a_stream_reports_usage_in_a_last_chunk_only_when_include_usage_is_asked(fake_upstream: FakeUpstream) -> None:
    raw = _post(fake_upstream, "m", stream=True, stream_options={"include_usage": True})
    chunks = [json.loads(event) for event in _events(raw.content)[:-1]]
    assert all(chunk["usage"] is None for chunk in chunks[:-1])  # as OpenAI: null until the last
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}


def test_ok_says_its_text_cut_into_the_chunks_asked_for_with_the_usage_and_headers_given(
    fake_upstream: FakeUpstream,
) -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 9, "total_tokens": 16}
    fake_upstream.script("m", reply.ok("abcdefgh", chunks=4, usage=usage, headers={"X-Request-Id": "req_1"}))
    whole = _post(fake_upstream, "m")
    streamed = _post(fake_upstream, "m", stream=True, stream_options={"include_usage": True})
    assert whole.json()["choices"][0]["message"]["content"] == "abcdefgh"
    assert whole.json()["usage"] == usage
    assert whole.headers["x-request-id"] == streamed.headers["x-request-id"] == "req_1"
    chunks = [json.loads(event) for event in _events(streamed.content)[:-1]]
    assert [chunk["choices"][0]["delta"]["content"] for chunk in chunks[1:5]] == ["ab", "cd", "ef", "gh"]
    assert chunks[-1]["usage"] == usage


def test_a_tool_call_is_openais_tool_calls_whole_and_streamed(fake_upstream: FakeUpstream) -> None:
    arguments = '{"location": "Paris, FR", "unit": "°C"}'
    fake_upstream.script("m", reply.tool_call("get_weather", arguments, text="Let me check."))
    fake_upstream.script("bare", reply.tool_call("lookup", {"q": "x"}, id="call_1"))
    with _sdk(fake_upstream) as client:
        whole = client.chat.completions.create(model="m", messages=_MESSAGES)  # type: ignore[arg-type]
        bare = client.chat.completions.create(model="bare", messages=_MESSAGES)  # type: ignore[arg-type]
        streamed = list(client.chat.completions.create(model="m", messages=_MESSAGES, stream=True))  # type: ignore[arg-type]
    assert whole.choices[0].finish_reason == "tool_calls"
    assert whole.choices[0].message.content == "Let me check."
    (call,) = whole.choices[0].message.tool_calls or []
    assert (call.id, call.type, call.function.name, call.function.arguments) == (  # type: ignore[union-attr]
        "call_fake",
        "function",
        "get_weather",
        arguments,
    )
    assert bare.choices[0].message.content is None  # no text: null content, as OpenAI sends it
    assert [(call.id, call.function.arguments) for call in bare.choices[0].message.tool_calls or []] == [  # type: ignore[union-attr]
        ("call_1", '{"q": "x"}')
    ]
    deltas = [chunk.choices[0].delta for chunk in streamed]
    assert "".join(delta.content or "" for delta in deltas) == "Let me check."
    calls = [call for delta in deltas for call in delta.tool_calls or []]
    assert (calls[0].index, calls[0].id, calls[0].type) == (0, "call_fake", "function")
    assert calls[0].function is not None and (calls[0].function.name, calls[0].function.arguments) == (
        "get_weather",
        "",
    )
    assert [call.function.arguments for call in calls[1:] if call.function] == [
        '{"location":',
        ' "Paris,',
        ' FR",',
        ' "unit":',
        ' "°C"}',
    ]
    assert streamed[-1].choices[0].finish_reason == "tool_calls"


def test_a_stream_error_is_an_in_band_error_event_that_the_openai_sdk_raises_on(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("m", reply.stream_error(2, 503, "The engine is currently overloaded."))
    raw = _post(fake_upstream, "m", stream=True)  # ends properly: no protocol error, no [DONE]
    events = _events(raw.content)
    assert len(events) == 3 and b"[DONE]" not in raw.content
    assert json.loads(events[-1]) == {
        "error": {"message": "The engine is currently overloaded.", "type": "server_error", "param": None, "code": None}
    }
    received: list[str | None] = []
    with _sdk(fake_upstream) as client, pytest.raises(openai.APIError, match="overloaded"):
        for chunk in client.chat.completions.create(model="m", messages=_MESSAGES, stream=True):  # type: ignore[arg-type]
            received.append(chunk.choices[0].delta.content)
    assert received == ["", "Hello"]
    assert _post(fake_upstream, "m").status_code == 503  # not streamed: the error is the status


def test_a_script_answers_in_turn_and_its_last_reply_repeats(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("m", reply.status(429, retry_after=2), reply.status(503), reply.ok("at last"))
    answers = [_post(fake_upstream, "m") for _ in range(5)]
    assert [answer.status_code for answer in answers] == [429, 503, 200, 200, 200]
    assert {answer.json()["choices"][0]["message"]["content"] for answer in answers[2:]} == {"at last"}
    assert _post(fake_upstream, "other").json()["choices"][0]["message"]["content"] == "Hello from other"


def test_status_answers_an_openai_shaped_error_or_the_body_given(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("limited", reply.status(429, retry_after=2))
    fake_upstream.script("dict", reply.status(400, body={"error": {"code": "context_length_exceeded"}}))
    fake_upstream.script("text", reply.status(502, body="Bad gateway\n"))
    fake_upstream.script("bytes", reply.status(200, body=b""))
    limited = _post(fake_upstream, "limited", stream=True)  # an error is JSON, streamed or not
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "2"
    assert limited.json()["error"]["type"] == "requests"
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"
    assert set(limited.json()["error"]) == {"message", "type", "param", "code"}
    assert _post(fake_upstream, "dict").json() == {"error": {"code": "context_length_exceeded"}}
    text = _post(fake_upstream, "text")
    assert (text.status_code, text.headers["content-type"], text.text) == (
        502,
        "text/plain; charset=utf-8",
        "Bad gateway\n",
    )
    empty = _post(fake_upstream, "bytes")
    assert (empty.status_code, empty.content, empty.headers["content-length"]) == (200, b"", "0")


def test_a_broken_stream_is_an_error_to_the_client_never_a_clean_end(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("broken", reply.broken_stream(2))
    received: list[bytes] = []
    with pytest.raises(httpx2.RemoteProtocolError):  # the chunked body never ends properly
        with httpx2.stream(
            "POST", f"{fake_upstream.base_url}/chat/completions", json={"model": "broken", "stream": True}
        ) as response:
            received.extend(response.iter_raw())
    events = _events(b"".join(received))
    assert len(events) == 2 and b"[DONE]" not in b"".join(received)
    with pytest.raises(httpx2.RemoteProtocolError):  # not streamed: half the JSON body arrives
        _post(fake_upstream, "broken")
    with _sdk(fake_upstream) as client, pytest.raises(openai.APIError):
        list(client.chat.completions.create(model="broken", messages=_MESSAGES, stream=True))  # type: ignore[arg-type]
    hit = fake_upstream.hits[0].wait()
    assert (hit.status, hit.completed, hit.disconnected) == (200, False, False)  # the fake broke it


def test_a_broken_stream_of_a_text_can_cut_inside_an_event(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("cut", reply.broken_stream(2, text="one two three", mid_event=True))
    received: list[bytes] = []
    with pytest.raises(httpx2.RemoteProtocolError):
        with httpx2.stream(
            "POST", f"{fake_upstream.base_url}/chat/completions", json={"model": "cut", "stream": True}
        ) as response:
            received.extend(response.iter_raw())
    raw = b"".join(received)
    whole, half = raw.rsplit(b"\n\n", 1)
    assert [json.loads(event)["choices"][0]["delta"].get("content") for event in _events(whole + b"\n\n")] == [
        "",
        "one",
    ]
    assert half.startswith(b"data: {") and b'" two"' not in half  # half of the next event, no more


def test_ok_continues_a_prefilled_assistant_message_that_is_a_prefix_of_its_text(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("m", reply.ok("one two three four"))
    messages = [*_MESSAGES, {"role": "assistant", "content": "one two"}]
    with _sdk(fake_upstream) as client:
        rest = client.chat.completions.create(model="m", messages=messages)  # type: ignore[arg-type]
        other = [*_MESSAGES, {"role": "assistant", "content": "something else"}]
        whole = client.chat.completions.create(model="m", messages=other)  # type: ignore[arg-type]
    assert rest.choices[0].message.content == " three four"
    assert whole.choices[0].message.content == "one two three four"  # not a prefix: the whole text


def test_rejects_prefill_answers_a_400_to_a_prefilled_request_only(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("picky", reply.rejects_prefill(reply.ok("fine")))
    with _sdk(fake_upstream) as client:
        assert client.chat.completions.create(model="picky", messages=_MESSAGES).choices[0].message.content == "fine"  # type: ignore[arg-type]
        prefilled = [*_MESSAGES, {"role": "assistant", "content": "Sure"}]
        with pytest.raises(openai.BadRequestError, match="prefill"):
            client.chat.completions.create(model="picky", messages=prefilled)  # type: ignore[arg-type]


def test_stall_sends_nothing_and_ends_when_the_client_gives_up(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("hung", reply.stall(30))
    with pytest.raises(httpx2.ReadTimeout):
        _post(fake_upstream, "hung", timeout=0.3)
    hit = fake_upstream.hits[0].wait(timeout=3)  # the fake heard the client leave, not 30 s later
    assert (hit.status, hit.completed, hit.disconnected) == (None, False, True)


def test_stall_for_a_moment_then_gives_up_with_a_504(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("hung", reply.stall(0.1))
    assert _post(fake_upstream, "hung").status_code == 504


def test_stall_after_headers_sends_the_headers_and_chunks_asked_for_then_nothing(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("quiet", reply.stall_after_headers(30, after_chunks=2))
    received: list[bytes] = []
    with pytest.raises(httpx2.ReadTimeout):
        with httpx2.stream(
            "POST",
            f"{fake_upstream.base_url}/chat/completions",
            json={"model": "quiet", "stream": True},
            timeout=httpx2.Timeout(5, read=0.5),
        ) as response:
            assert response.status_code == 200
            received.extend(response.iter_raw())
    assert len(_events(b"".join(received))) == 2
    assert fake_upstream.hits[0].wait().disconnected


def test_slow_waits_before_the_status_line_then_answers_its_reply(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("slow", reply.slow(0.3, reply.status(503)))
    started = time.monotonic()
    response = _post(fake_upstream, "slow")
    assert response.status_code == 503
    assert time.monotonic() - started >= 0.3


def test_raw_sends_exactly_its_writes(fake_upstream: FakeUpstream) -> None:
    writes = (b'data: {"x":"\xe4\xbd', b'\xa0"}\n\n', b"data: [DONE]\n\n")
    fake_upstream.script("raw", reply.raw(*writes))
    assert _post(fake_upstream, "raw", stream=True).content == b"".join(writes)


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda: reply.ok("ab", chunks=3), ValueError),
        (lambda: reply.ok(chunks=0), ValueError),
        (lambda: reply.status(99), ValueError),
        (lambda: reply.status(429, retry_after=-1), ValueError),
        (lambda: reply.status(500, body=[1]), TypeError),
        (lambda: reply.stall(float("inf")), ValueError),
        (lambda: reply.broken_stream(-1), ValueError),
        (lambda: reply.slow(1, then="ok"), TypeError),
        (lambda: reply.raw("text"), TypeError),
        (lambda: reply.tool_call("", {}), ValueError),
        (lambda: reply.tool_call("f", "[1]"), ValueError),
        (lambda: reply.tool_call("f", "{"), ValueError),
        (lambda: reply.tool_call("f", ["x"]), TypeError),
        (lambda: reply.tool_call("f", "{}", chunks=3), ValueError),
        (lambda: reply.stream_error(1, 200), ValueError),
        (lambda: reply.stream_error(-1), ValueError),
        (lambda: reply.split_writes("ok"), TypeError),
    ],
)
def test_replies_refuse_arguments_that_cannot_be_played(build: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        build()


def test_script_refuses_no_reply_or_something_else_than_a_reply(fake_upstream: FakeUpstream) -> None:
    with pytest.raises(ValueError):
        fake_upstream.script("m")
    with pytest.raises(TypeError):
        fake_upstream.script("m", "ok")  # type: ignore[arg-type]


# --- hits, reset, the provider entry ------------------------------------------------------------


def test_hits_keep_what_arrived_and_reset_forgets_scripts_and_hits(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("m", reply.status(500))
    httpx2.post(
        f"{fake_upstream.base_url}/chat/completions",
        json={"model": "m", "stream": True, "messages": _MESSAGES},
        headers={"Authorization": "Bearer k", "X-Custom": "1"},
    )
    (hit,) = fake_upstream.hits
    assert isinstance(hit, Hit)
    assert (hit.model, hit.path, hit.stream, hit.status) == ("m", "/v1/chat/completions", True, 500)
    assert hit.headers["authorization"] == "Bearer k" and hit.headers["x-custom"] == "1"
    assert hit.body == {"model": "m", "stream": True, "messages": _MESSAGES}
    fake_upstream.reset()
    assert fake_upstream.hits == []
    assert _post(fake_upstream, "m").status_code == 200  # the script is gone too


def test_models_lists_what_was_scripted_or_asked_for_and_other_routes_are_404(fake_upstream: FakeUpstream) -> None:
    fake_upstream.script("scripted", reply.ok())
    _post(fake_upstream, "asked")
    listed = httpx2.get(f"{fake_upstream.base_url}/models").json()
    assert [model["id"] for model in listed["data"]] == ["asked", "scripted"]
    assert httpx2.post(f"{fake_upstream.base_url}/embeddings", json={}).status_code == 404
    assert _post(fake_upstream, "").status_code == 400  # no model named


def test_the_provider_entry_points_a_router_at_the_fake_and_events_capture_the_failover(
    fake_upstream: FakeUpstream,
) -> None:
    fake_upstream.script("gpt-4o", reply.status(429, retry_after=1))
    captured = CapturedEvents()
    settings = RouterSettings(
        providers={"openai": fake_upstream.provider(), "backup": fake_upstream.provider(api_key=API_KEY)},
        groups={"chat": {"members": ["openai/gpt-4o", "backup/llama"]}},
        allow_unauthenticated=True,
    )
    with AppServer(ModelRouter(Starlette(), settings=settings, sinks=[captured])) as server:
        answer = httpx2.post(
            f"{server.url}/v1/chat/completions", json={"model": "group/chat", "messages": _MESSAGES}, timeout=5
        )
    assert answer.status_code == 200
    assert answer.json()["choices"][0]["message"]["content"] == "Hello from llama"
    assert [hit.headers["authorization"] for hit in fake_upstream.hits] == [
        f"Bearer {fake_upstream.api_key}",
        f"Bearer {API_KEY}",
    ]
    assert captured.attempts(answer.headers["x-request-id"]) == [
        ("openai/gpt-4o", "failed", "rate_limited"),
        ("backup/llama", "served", "served"),
    ]


async def test_a_fake_upstream_runs_as_an_async_context_manager_and_events_are_awaited_without_a_lifespan() -> None:
    captured = CapturedEvents()
    async with FakeUpstream() as upstream:
        upstream.script("m", reply.status(400))
        settings = RouterSettings(providers={"fake": upstream.provider()}, allow_unauthenticated=True)
        router = ModelRouter(Starlette(), settings=settings, sinks=[captured])
        transport = httpx2.ASGITransport(app=router)  # in process, no lifespan: the sink is direct
        async with httpx2.AsyncClient(transport=transport, base_url="http://app") as client:
            refused = await client.post(
                "/v1/chat/completions", json={"model": "fake/m"}, headers={"x-request-id": "r-1"}
            )
            served = await client.post(
                "/v1/chat/completions", json={"model": "fake/n"}, headers={"x-request-id": "r-2"}
            )
        await router.transport.aclose()
    assert (refused.status_code, served.status_code) == (400, 200)
    assert await captured.attempts_async("r-1") == [("fake/m", "failed", "client_error")]
    assert await captured.attempts_async("r-2") == [("fake/n", "served", "served")]
    assert [record.request_id for record in captured.records] == ["r-1", "r-2"]
    with pytest.raises(AssertionError, match="r-1, r-2"):
        captured.wait("never-sent", timeout=0.05)


def test_the_kits_public_names_and_reply_signatures_are_pinned() -> None:
    import asgi_router.testing as kit

    assert set(kit.__all__) == {"AppServer", "CapturedEvents", "FakeUpstream", "Hit", "TEST_KEY", "reply"}
    names = ("ok", "tool_call", "status", "stall", "stall_after_headers", "broken_stream", "stream_error", "slow")
    parameters = {
        name: list(inspect.signature(getattr(reply, name)).parameters)
        for name in (*names, "split_writes", "raw", "rejects_prefill")
    }
    assert parameters == {
        "ok": ["text", "chunks", "usage", "headers", "interval"],
        "tool_call": ["name", "arguments", "text", "id", "chunks", "usage", "headers", "interval"],
        "stream_error": ["after_chunks", "code", "message", "interval"],
        "split_writes": ["then", "interval"],
        "status": ["code", "retry_after", "body", "headers"],
        "stall": ["seconds"],
        "stall_after_headers": ["seconds", "after_chunks", "interval", "text"],
        "broken_stream": ["after_chunks", "interval", "text", "mid_event"],
        "rejects_prefill": ["then"],
        "slow": ["seconds", "then"],
        "raw": ["writes", "status", "headers", "interval"],
    }
    assert inspect.signature(reply.slow).parameters["then"].default == reply.ok()
    assert {"model", "path", "headers", "body", "stream"} <= set(inspect.signature(Hit).parameters)
    assert inspect.signature(reply.split_writes).parameters["then"].default == reply.ok()
    assert inspect.signature(reply.rejects_prefill).parameters["then"].default == reply.ok()
    assert list(inspect.signature(FakeUpstream).parameters) == ["kind", "api_key", "host", "port"]
    assert {"host", "port", "lifespan"} <= set(inspect.signature(AppServer).parameters)
    with pytest.raises(ValueError, match="anthropic, openai"):
        FakeUpstream(kind="smoke-signals")


# --- the pytest plugin ---------------------------------------------------------------------------

_HEAVY = ("asgi_router", "uvicorn", "starlette", "aiohttp", "httpx2", "pydantic", "anyio")


def test_the_plugin_names_the_libraries_default_ledger_variable() -> None:
    assert _asgi_router_pytest.DEFAULT_LEDGER_VARIABLE == DEFAULT_LEDGER_VARIABLE
    assert os.environ.get(DEFAULT_LEDGER_VARIABLE) == "memory://"  # this run's, set by the plugin


def test_loading_the_plugin_imports_nothing_heavy() -> None:
    probe = "import sys, _asgi_router_pytest; print(sorted({m.split('.')[0] for m in sys.modules}))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert not set(_HEAVY) & set(eval(loaded.stdout))  # our own repr of a list of names


_PLUGIN_TESTS = """
import httpx2
import pytest

from asgi_router.testing import reply

URLS = []


def test_a_first_test_scripts_and_hits(fake_upstream):
    URLS.append(fake_upstream.base_url)
    fake_upstream.script("m", reply.status(503))
    response = httpx2.post(fake_upstream.base_url + "/chat/completions", json={"model": "m"})
    assert response.status_code == 503
    assert len(fake_upstream.hits) == 1


@pytest.mark.anyio
async def test_the_next_one_finds_it_reset_in_an_anyio_test(fake_upstream):
    URLS.append(fake_upstream.base_url)
    assert fake_upstream.hits == []
    async with httpx2.AsyncClient() as client:
        response = await client.post(fake_upstream.base_url + "/chat/completions", json={"model": "m"})
    assert response.status_code == 200


def test_one_server_serves_the_session(fake_upstream):
    assert set(URLS) == {fake_upstream.base_url}


def test_the_anthropic_fixture_speaks_the_messages_api(fake_anthropic_upstream, fake_upstream):
    assert fake_anthropic_upstream.provider()["kind"] == "anthropic"
    assert fake_anthropic_upstream.base_url != fake_upstream.base_url
    fake_anthropic_upstream.script("claude", reply.status(529))
    response = httpx2.post(
        fake_anthropic_upstream.base_url + "/messages",
        json={"model": "claude", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        headers={"anthropic-version": "2023-06-01"},
    )
    assert (response.status_code, response.json()["error"]["type"]) == (529, "overloaded_error")
    assert fake_upstream.hits == [] and len(fake_anthropic_upstream.hits) == 1


def test_a_router_with_admin_keys_and_no_ledger_url_writes_no_file(fake_upstream, tmp_path, monkeypatch):
    from starlette.applications import Starlette

    from asgi_router import ModelRouter, RouterSettings
    from asgi_router.testing import AppServer

    monkeypatch.chdir(tmp_path)
    admin = "admin-key-0123456789abcdef"
    app = Starlette()
    app.add_middleware(
        ModelRouter, settings=RouterSettings(providers={"openai": fake_upstream.provider()}, admin_keys=[admin])
    )
    with AppServer(app) as server:
        admin_header = {"authorization": f"Bearer {admin}"}
        made = httpx2.post(f"{server.url}/admin/keys", json={"caller": "team"}, headers=admin_header)
        assert made.status_code == 201
        asked = httpx2.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "openai/m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {made.json()['secret']}"},
        )
        assert asked.status_code == 200
    assert list(tmp_path.iterdir()) == []
"""


# --- the docs page's example, as a user's test file -------------------------------------------

_PAGE = Path(__file__).resolve().parents[1] / "docs" / "testing.md"
_EXAMPLES = ("test_gateway.py", "test_mixed_group.py")
#: The page's app that builds its settings at import, with its own conftest: a directory of its own.
_IMPORTED_APP = ("gateway_app.py", "router.toml", "conftest.py", "test_imported_app.py")
#: Exported in the shell of the user running the examples: they must pass all the same.
_EXPORTED = {"ASGI_ROUTER_API_KEYS": "key-exported-in-the-users-shell-0123"}


def _page_example(name: str) -> str:
    """A complete file on the "Testing your app" page (the block that starts with its name)."""
    text = _PAGE.read_text(encoding="utf-8")
    blocks = re.findall(r"^```(?:python|toml)[^\n]*\n(.*?)^```$", text, re.MULTILINE | re.DOTALL)
    [example] = [block for block in blocks if block.startswith(f"# {name}\n")]
    return str(example)


@pytest.mark.parametrize("name", _EXAMPLES)
def test_the_testing_pages_examples_use_only_the_public_api(name: str) -> None:
    tree = ast.parse(_page_example(name))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert {module for module in imported if module.startswith("asgi_router")} == {"asgi_router", "asgi_router.testing"}


@pytest.fixture(scope="module")
def users_suite(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """The plugin's tests above and the page's examples, run once as a user runs them: a
    directory and configuration of their own, the kit from the installed package, the fixture
    from the plugin's entry point (CI also runs the example in a fresh venv)."""
    suite = tmp_path_factory.mktemp("users_suite")
    (suite / "pytest.ini").write_text("[pytest]\nfilterwarnings = error\n", encoding="utf-8")
    (suite / "test_plugin.py").write_text(textwrap.dedent(_PLUGIN_TESTS), encoding="utf-8")
    for name in _EXAMPLES:
        (suite / name).write_text(_page_example(name), encoding="utf-8")
    (suite / "imported").mkdir()
    for name in _IMPORTED_APP:
        (suite / "imported" / name).write_text(_page_example(name), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", str(suite)],
        cwd=suite,
        capture_output=True,
        text=True,
        timeout=180,
        # Not this run's default ledger (set by the plugin here): the users' run must set its own.
        env={**{k: v for k, v in os.environ.items() if k != DEFAULT_LEDGER_VARIABLE}, **_EXPORTED},
    )


def _passed(finished: subprocess.CompletedProcess[str], file: str) -> list[str]:
    return re.findall(rf"^PASSED {re.escape(file)}::(\w+)", finished.stdout, re.MULTILINE)


def test_the_fake_upstream_fixture_is_fresh_in_each_sync_and_anyio_test(
    users_suite: subprocess.CompletedProcess[str],
) -> None:
    assert len(_passed(users_suite, "test_plugin.py")) == 5, users_suite.stdout + users_suite.stderr


def test_the_testing_pages_example_passes_as_a_users_test_file(users_suite: subprocess.CompletedProcess[str]) -> None:
    assert len(_passed(users_suite, "test_gateway.py")) == 3, users_suite.stdout + users_suite.stderr
    assert users_suite.returncode == 0, users_suite.stdout + users_suite.stderr


def test_the_testing_pages_app_that_builds_its_settings_at_import_passes_with_keys_exported(
    users_suite: subprocess.CompletedProcess[str],
) -> None:
    assert _passed(users_suite, "imported/test_imported_app.py") == [
        "test_the_app_module_imports_with_the_test_environment",
        "test_the_deployed_groups_fail_over_on_the_fake",
    ], users_suite.stdout + users_suite.stderr


def test_the_testing_pages_anthropic_example_passes_as_a_users_test_file(
    users_suite: subprocess.CompletedProcess[str],
) -> None:
    assert _passed(users_suite, "test_mixed_group.py") == ["test_gpt_4o_down_fails_over_to_claude"], (
        users_suite.stdout + users_suite.stderr
    )


# --- n choices, fixed ports, the serve command ---------------------------------------------------


def test_n_asks_for_that_many_choices_whole_and_streamed(fake_upstream: FakeUpstream) -> None:
    client = _sdk(fake_upstream)
    whole = client.chat.completions.create(model="m", messages=_MESSAGES, n=3)  # type: ignore[arg-type]
    assert [choice.index for choice in whole.choices] == [0, 1, 2]
    assert {choice.message.content for choice in whole.choices} == {"Hello from m"}
    streamed = client.chat.completions.create(model="m", messages=_MESSAGES, n=2, stream=True)  # type: ignore[arg-type]
    texts: dict[int, str] = {}
    for chunk in streamed:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
    assert texts == {0: "Hello from m", 1: "Hello from m"}
    assert len(_sdk(fake_upstream).chat.completions.create(model="m", messages=_MESSAGES).choices) == 1  # type: ignore[arg-type]


def test_a_fake_upstream_and_an_app_server_listen_on_the_port_asked_for() -> None:
    port = free_port()
    with FakeUpstream(port=port) as upstream:
        assert upstream.base_url == f"http://127.0.0.1:{port}/v1"
        assert _post(upstream, "m").json()["choices"][0]["message"]["content"] == "Hello from m"
        with pytest.raises(RuntimeError, match=f"port {port} in use"), AppServer(Starlette(), port=port):
            pass  # pragma: no cover - the port is taken
    with AppServer(Starlette(), port=port) as server:
        assert server.url == f"http://127.0.0.1:{port}"
        assert httpx2.get(f"{server.url}/nothing").status_code == 404


@contextmanager
def _fake_command(*args: str) -> Iterator[tuple[str, list[str]]]:
    """``python -m asgi_router.testing serve`` on a free port, as a user starts it, until the block
    ends (Ctrl-C); the list yielded then holds its exit status and everything it printed."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "asgi_router.testing", "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first == f"serving a fake {'anthropic' if 'anthropic' in args else 'openai'} upstream at " + (
            f"http://127.0.0.1:{port}/v1 (Ctrl-C stops it)\n"
        ), first + process.stdout.read()
        finished: list[str] = []
        yield f"http://127.0.0.1:{port}/v1", finished
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    finished += [str(process.returncode), out]


def test_the_serve_command_answers_its_script_in_turn_the_last_reply_repeating() -> None:
    with _fake_command("--script", "gpt-4o=503,429:2,200", "--script", "slow=stall:0.2") as (url, finished):
        answers = [
            httpx2.post(f"{url}/chat/completions", json={"model": "gpt-4o", "messages": _MESSAGES}, timeout=10)
            for _ in range(4)
        ]
        stalled = httpx2.post(f"{url}/chat/completions", json={"model": "slow", "messages": _MESSAGES}, timeout=10)
        other = httpx2.post(f"{url}/chat/completions", json={"model": "x", "messages": _MESSAGES, "n": 2}, timeout=10)
    assert [answer.status_code for answer in answers] == [503, 429, 200, 200]
    assert answers[0].json()["error"]["type"] == "server_error"
    assert answers[1].headers["retry-after"] == "2"
    assert answers[3].json()["choices"][0]["message"]["content"] == "Hello from gpt-4o"
    assert stalled.status_code == 504
    assert [choice["index"] for choice in other.json()["choices"]] == [0, 1]
    status, log = finished
    assert status == "0"
    assert "POST /v1/chat/completions gpt-4o: 503\n" in log and "gpt-4o: 429:2\n" in log


def test_the_serve_command_escapes_a_clients_model_id_and_sends_whole_seconds_as_an_integer() -> None:
    with _fake_command("--script", "big=429:1000000", "--script", "later=slow:0.3") as (url, finished):
        refused = httpx2.post(f"{url}/chat/completions", json={"model": "big", "messages": _MESSAGES}, timeout=10)
        odd = httpx2.post(f"{url}/chat/completions", json={"model": "a\x1b[2Jb", "messages": _MESSAGES}, timeout=10)
        asked = time.monotonic()
        slow = httpx2.post(f"{url}/chat/completions", json={"model": "later", "messages": _MESSAGES}, timeout=10)
        waited = time.monotonic() - asked
    assert refused.headers["retry-after"] == "1000000"
    assert odd.status_code == 200
    assert slow.status_code == 200 and waited >= 0.3
    _, log = finished
    assert "\x1b" not in log and "a\\x1b[2Jb: 200\n" in log
    assert "big: 429:1000000\n" in log and "later: slow:0.3\n" in log


def test_the_serve_command_refuses_a_port_out_of_range_without_a_traceback() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "asgi_router.testing", "serve", "--port", "99999"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "'99999' is not a port: use 0 to 65535" in result.stderr and "Traceback" not in result.stderr


def test_the_serve_command_speaks_anthropic_and_breaks_a_stream_as_scripted() -> None:
    with _fake_command("--kind", "anthropic", "--script", "claude=broken:2") as (url, _):
        headers = {"anthropic-version": "2023-06-01", "x-api-key": "k"}
        body = {"model": "claude", "max_tokens": 10, "messages": _MESSAGES, "stream": True}
        with (
            pytest.raises(httpx2.RemoteProtocolError),
            httpx2.stream("POST", f"{url}/messages", json=body, headers=headers, timeout=10) as answer,
        ):
            assert answer.status_code == 200
            answer.read()
        whole = httpx2.post(f"{url}/messages", json={**body, "model": "other", "stream": False}, headers=headers)
    assert whole.json()["type"] == "message" and whole.json()["content"][0]["text"] == "Hello from other"


def test_the_serve_command_refuses_a_script_it_cannot_read() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "asgi_router.testing", "serve", "--script", "gpt-4o=503,sometimes"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert (
        "'sometimes' is not a reply: use a status (200, 503), 429:2, stall, stall:5, broken:3 or slow:2"
        in result.stderr
    )


def test_a_router_toml_with_fixed_urls_fails_over_across_two_served_fakes(tmp_path: Path) -> None:
    with _fake_command("--script", "gpt-4o=503") as (first, _), _fake_command() as (second, _):
        config = tmp_path / "router.toml"
        config.write_text(
            f'api_keys = ["{CLIENT_KEY}"]\n'
            f'[providers.primary]\nbase_url = "{first}"\n[providers.backup]\nbase_url = "{second}"\n'
            '[groups.chat]\nmembers = ["primary/gpt-4o", "backup/gpt-4o"]\n'
        )
        with serving(config) as (router, _):
            client = openai.OpenAI(base_url=f"{router}/v1", api_key=CLIENT_KEY, max_retries=0)
            answer = client.chat.completions.with_raw_response.create(model="group/chat", messages=_MESSAGES)  # type: ignore[arg-type]
    assert answer.headers["x-router-model"] == "backup/gpt-4o"
    assert answer.parse().choices[0].message.content == "Hello from gpt-4o"
