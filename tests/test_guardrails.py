"""Guardrails end to end: checks on the prompt before any upstream sees it and on the answer
before the client does, through real fake upstreams on loopback, the router on a real socket, and
the official ``openai`` and ``anthropic`` SDKs as clients; what a recording upstream received
is the proof that a mask held (on every candidate, a failover's and a resumed stream's too)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anthropic as anthropic_sdk
import httpx2
import openai
import pytest

from asgi_router import Allow, Block, ConfigError, GuardrailRequest, Mask, ModelRouter, RouterSettings
from asgi_router.testing import FakeUpstream, reply

from .conftest import host_app
from .doubles import RecordSink
from .servers import ServerThread
from .waiting import eventually

pytestmark = pytest.mark.anyio

_FAST = {"connect": 1, "first_byte": 5, "idle": 5, "total": 10}
EMAIL = "jane.doe@example.com"
CARD = "4111 1111 1111 1111"
KEY = "sk-proj-" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2"
PROMPT = f"Mail {EMAIL} my card {CARD}; my key is ```{KEY}```, a task-based plan."
PII = {"kind": "pii", "action": "mask"}
SECRETS = {"kind": "secrets", "action": "mask"}
_SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}
_FORMAT = {"type": "json_schema", "json_schema": {"name": "count", "schema": _SCHEMA, "strict": True}}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as upstream:
        yield upstream


@pytest.fixture(autouse=True)
def _forget(fake: FakeUpstream) -> None:
    fake.reset()


def _settings(fake: FakeUpstream, **overrides: Any) -> RouterSettings:
    providers = {name: fake.provider(timeouts=_FAST, resume="prefill") for name in ("a", "b")}
    providers.update(overrides.pop("providers", {}))
    overrides.setdefault("breaker", {"enabled": False})
    return RouterSettings(allow_unauthenticated=True, providers=providers, **overrides)


@asynccontextmanager
async def _served(
    settings: RouterSettings, **router: Any
) -> AsyncIterator[tuple[openai.AsyncOpenAI, ServerThread, RecordSink]]:
    records = RecordSink()
    app = ModelRouter(host_app(), settings=settings, sinks=[records], **router)
    with ServerThread(app) as server:
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0) as client:
            yield client, server, records


async def _one(records: RecordSink) -> Any:
    await eventually(lambda: len(records) == 1)
    return records[0]


def _sent(fake: FakeUpstream) -> str:
    """Every request body the upstream received, as one text."""
    return "\n".join(json.dumps(hit.body) for hit in fake.hits)


# --- input: mask, block, flag ----------------------------------------------------------------------


async def test_masked_spans_reach_the_upstream_as_labels_and_never_as_the_original_text(fake: FakeUpstream) -> None:
    fake.script("m", reply.ok("done"))
    settings = _settings(fake, guardrails={"pii": PII, "secrets": SECRETS}, guardrails_default=["pii", "secrets"])
    async with _served(settings) as (client, _, records):
        answer = await client.chat.completions.create(
            model="a/m",
            messages=[{"role": "system", "content": f"Agent mail: {EMAIL}"}, {"role": "user", "content": PROMPT}],
        )
    assert answer.choices[0].message.content == "done"
    [hit] = fake.hits
    assert hit.body["messages"][0]["content"] == "Agent mail: [EMAIL]"
    assert hit.body["messages"][1]["content"] == (
        "Mail [EMAIL] my card [PAYMENT_CARD]; my key is ```[SECRET]```, a task-based plan."
    )
    sent = _sent(fake)
    assert EMAIL not in sent and "4111" not in sent and KEY not in sent
    record = await _one(records)
    assert record.guardrails == (("pii", "mask"), ("secrets", "mask"))


async def test_a_block_on_input_is_an_openai_400_naming_the_guardrail_and_no_upstream_is_called(
    fake: FakeUpstream,
) -> None:
    settings = _settings(
        fake,
        guardrails={"secrets": {"kind": "secrets", "action": "block"}},
        groups={"g": {"members": ["a/m"], "guardrails": ["secrets"]}},
    )
    async with _served(settings) as (client, _, records):
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model="group/g", messages=[{"role": "user", "content": PROMPT}])
        allowed = await client.chat.completions.create(model="a/m", messages=[{"role": "user", "content": PROMPT}])
    assert refused.value.status_code == 400
    assert refused.value.response.json() == {
        "error": {
            "message": "blocked by guardrail secrets (input)",
            "type": "invalid_request_error",
            "code": "guardrail_blocked",
            "param": None,
            "guardrail": "secrets",
        }
    }
    assert KEY not in refused.value.response.text
    assert [hit.model for hit in fake.hits] == ["m"]  # only the direct ref, which has no guardrail
    assert allowed.choices[0].message.content
    await eventually(lambda: len(records) == 2)
    assert records[0].guardrails == (("secrets", "block"),) and records[0].status == 400
    assert records[1].guardrails == ()


async def test_a_block_on_the_messages_route_is_anthropic_shaped_for_the_anthropic_sdk(
    fake_anthropic_upstream: FakeUpstream,
) -> None:
    settings = RouterSettings(
        allow_unauthenticated=True,
        routes=["/v1/chat/completions", "/v1/messages"],
        providers={"claude": fake_anthropic_upstream.provider(timeouts=_FAST)},
        guardrails={"deny": {"kind": "deny", "terms": ["project zeus"]}},
        guardrails_default=["deny"],
    )
    with ServerThread(ModelRouter(host_app(), settings=settings)) as server:
        async with anthropic_sdk.AsyncAnthropic(base_url=server.url, api_key="k", max_retries=0) as client:
            with pytest.raises(anthropic_sdk.BadRequestError) as refused:
                await client.messages.create(
                    model="claude/c", max_tokens=10, messages=[{"role": "user", "content": "About Project Zeus?"}]
                )
            answer = await client.messages.create(
                model="claude/c", max_tokens=10, messages=[{"role": "user", "content": "About Zeus?"}]
            )
    body = refused.value.response.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] == "guardrail_blocked: blocked by guardrail deny (input)"
    assert "Zeus" not in refused.value.response.text
    assert len(fake_anthropic_upstream.hits) == 1 and answer.content


async def test_a_flag_changes_nothing_for_the_client_and_is_recorded_logged_and_counted(fake: FakeUpstream) -> None:
    fake.script("m", reply.ok("fine"))
    settings = _settings(
        fake,
        guardrails={"pii": {"kind": "pii", "action": "flag"}},
        guardrails_default=["pii"],
        metrics_route="/metrics",
        status_route="/status",
    )
    with RecordSink.logged() as logged:
        async with _served(settings) as (client, server, records):
            answer = await client.chat.completions.create(model="a/m", messages=[{"role": "user", "content": PROMPT}])
            record = await _one(records)
            async with httpx2.AsyncClient(base_url=server.url) as http:
                metrics = (await http.get("/metrics")).text
                status = (await http.get("/status.json")).json()
    assert answer.choices[0].message.content == "fine"
    assert fake.hits[0].body["messages"][0]["content"] == PROMPT  # flagged, not changed
    assert record.guardrails == (("pii", "flag"),) and record.guardrail_stages == ("input",)
    assert 'asgi_router_guardrail_total{guardrail="pii",outcome="flag",stage="input"} 1.0' in metrics
    assert status["guardrails"] == {"blocks": {}}
    await eventually(lambda: len(logged) == 1)


async def test_the_status_page_counts_blocks_per_guardrail(fake: FakeUpstream) -> None:
    settings = _settings(
        fake, guardrails={"secrets": {"kind": "secrets"}}, guardrails_default=["secrets"], status_route="/status"
    )
    async with _served(settings) as (client, server, _):
        for _ in range(2):
            with pytest.raises(openai.BadRequestError):
                await client.chat.completions.create(model="a/m", messages=[{"role": "user", "content": KEY}])
        async with httpx2.AsyncClient(base_url=server.url) as http:
            status = (await http.get("/status.json")).json()
            page = (await http.get("/status")).text
    assert status["guardrails"] == {"blocks": {"secrets": 2}}
    assert "guardrails-section" in page
    assert fake.hits == []


# --- output: json_schema failover, mask, buffered streams -----------------------------------------


async def test_an_invalid_json_answer_fails_over_to_the_member_that_answers_valid_json(fake: FakeUpstream) -> None:
    fake.script("bad", reply.ok('{"n": "three"}'))
    fake.script("good", reply.ok('{"n": 3}'))
    settings = _settings(
        fake,
        guardrails={"shape": {"kind": "json_schema", "stage": "output", "action": "fail_over"}},
        groups={"g": {"members": ["a/bad", "b/good"], "guardrails": ["shape"]}},
    )
    async with _served(settings) as (client, _, records):
        raw = await client.chat.completions.with_raw_response.create(
            model="group/g", messages=[{"role": "user", "content": "count"}], response_format=_FORMAT
        )
    answer = raw.parse()
    assert json.loads(answer.choices[0].message.content or "") == {"n": 3}
    assert raw.headers["x-router-model"] == "b/good"
    record = await _one(records)
    assert [(e.candidate, e.outcome, e.reason) for e in record.events] == [
        ("a/bad", "failed", "guardrail_failed"),
        ("b/good", "served", "served"),
    ]
    assert record.guardrails == (("shape", "fail_over"), ("shape", "pass"))
    assert record.guardrail_stages == ("output", "output")


async def test_an_answer_is_masked_before_the_client_sees_it_and_an_output_block_is_a_400(fake: FakeUpstream) -> None:
    fake.script("leaky", reply.ok(f"Reach me at {EMAIL}."))
    fake.script("secret", reply.ok(f"Use {KEY}"))
    settings = _settings(
        fake,
        guardrails={"pii": {**PII, "stage": "output"}, "secrets": {"kind": "secrets", "stage": "output"}},
        guardrails_default=["pii", "secrets"],
    )
    async with _served(settings) as (client, _, _):
        answer = await client.chat.completions.create(model="a/leaky", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.BadRequestError) as refused:
            await client.chat.completions.create(model="a/secret", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "Reach me at [EMAIL]."
    assert refused.value.response.json()["error"]["message"] == "blocked by guardrail secrets (output)"
    assert KEY not in refused.value.response.text


async def test_a_buffered_stream_is_checked_and_masked_before_its_first_byte_and_an_unbuffered_one_is_not(
    fake: FakeUpstream,
) -> None:
    text = f"Reach me at {EMAIL} any time"
    settings = _settings(
        fake,
        guardrails={"pii": {**PII, "stage": "output"}},
        groups={
            "held": {"members": ["a/m"], "guardrails": ["pii"], "output_stream": "buffer"},
            "live": {"members": ["a/m"], "guardrails": ["pii"]},
        },
    )
    async with _served(settings) as (client, _, records):
        streams = []
        for group in ("held", "live"):
            fake.script("m", reply.ok(text))
            stream = await client.chat.completions.create(
                model=f"group/{group}", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            streams.append("".join([c.choices[0].delta.content or "" async for c in stream if c.choices]))
        await eventually(lambda: len(records) == 2)
    assert streams == ["Reach me at [EMAIL] any time", text]
    assert records[0].guardrails == (("pii", "mask"),) and records[1].guardrails == ()


async def test_a_buffered_stream_that_fails_its_schema_fails_over_before_a_byte_is_sent(fake: FakeUpstream) -> None:
    fake.script("bad", reply.ok("not json at all"))
    fake.script("good", reply.ok('{"n": 7}'))
    settings = _settings(
        fake,
        guardrails={"shape": {"kind": "json_schema", "stage": "output", "action": "fail_over"}},
        groups={"g": {"members": ["a/bad", "b/good"], "guardrails": ["shape"], "output_stream": "buffer"}},
    )
    async with _served(settings) as (client, _, records):
        stream = await client.chat.completions.create(
            model="group/g", messages=[{"role": "user", "content": "n?"}], response_format=_FORMAT, stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert json.loads(text) == {"n": 7}
    record = await _one(records)
    assert [(e.candidate, e.reason) for e in record.events] == [("a/bad", "guardrail_failed"), ("b/good", "served")]


# --- your own checks -------------------------------------------------------------------------------


def _mask_acme(request: GuardrailRequest) -> Mask | Allow:
    if not any("Acme" in text for text in request.texts):
        return Allow()
    return Mask(tuple(text.replace("Acme", "[CLIENT]") for text in request.texts))


async def _mask_acme_async(request: GuardrailRequest) -> Mask | Allow:
    return _mask_acme(request)


@pytest.mark.parametrize("check", [_mask_acme, _mask_acme_async], ids=["sync", "async"])
async def test_your_own_check_masks_what_it_is_given(fake: FakeUpstream, check: Any) -> None:
    fake.script("m", reply.ok("Acme is a client"))
    seen: list[GuardrailRequest] = []

    def recording(request: GuardrailRequest) -> Any:
        seen.append(request)
        return check(request)

    settings = _settings(fake, guardrails_default=["clients"])
    async with _served(settings, guardrails={"clients": recording}) as (client, _, _):
        answer = await client.chat.completions.create(
            model="a/m", messages=[{"role": "user", "content": "Tell Acme hello"}]
        )
    assert fake.hits[0].body["messages"][0]["content"] == "Tell [CLIENT] hello"
    assert answer.choices[0].message.content == "[CLIENT] is a client"
    assert [(r.stage, r.texts, r.route, r.model) for r in seen] == [
        ("input", ("Tell Acme hello",), "/v1/chat/completions", "a/m"),
        ("output", ("Acme is a client",), "/v1/chat/completions", "a/m"),
    ]


async def test_a_check_that_raises_is_a_500_guardrail_error_logged_once_and_the_app_goes_on(
    fake: FakeUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(request: GuardrailRequest) -> Block:
        raise RuntimeError("the classifier is down")

    settings = _settings(fake, guardrails_default=["broken"])
    caplog.set_level(logging.ERROR, logger="asgi_router")
    async with _served(settings, guardrails={"broken": broken}) as (client, server, _):
        with pytest.raises(openai.InternalServerError) as failed:
            await client.chat.completions.create(model="a/m", messages=[{"role": "user", "content": "hi"}])
        async with httpx2.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/hello")).json() == {"hello": "host"}
    error = failed.value.response.json()["error"]
    assert (error["code"], error["guardrail"]) == ("guardrail_error", "broken")
    logged = [r for r in caplog.records if "guardrail broken failed" in r.getMessage()]
    assert len(logged) == 1 and logged[0].exc_info is not None
    assert fake.hits == []


async def test_a_mask_of_the_wrong_length_is_a_guardrail_error(fake: FakeUpstream) -> None:
    settings = _settings(fake, guardrails_default=["short"])
    async with _served(settings, guardrails={"short": lambda request: Mask(())}) as (client, _, _):
        with pytest.raises(openai.InternalServerError) as failed:
            await client.chat.completions.create(model="a/m", messages=[{"role": "user", "content": "hi"}])
    assert failed.value.response.json()["error"]["code"] == "guardrail_error"


def test_a_group_naming_an_unknown_guardrail_is_refused_when_the_router_is_built(fake: FakeUpstream) -> None:
    settings = _settings(fake, groups={"g": {"members": ["a/m"], "guardrails": ["pii", "nope"]}})
    with pytest.raises(ConfigError) as refused:
        ModelRouter(host_app(), settings=settings, guardrails={"pii": _mask_acme})
    assert "groups.g.guardrails: 'nope' names no guardrail" in str(refused.value)


def test_a_toml_callable_is_imported_by_name(fake: FakeUpstream) -> None:
    settings = _settings(
        fake,
        guardrails={"mine": {"kind": "callable", "function": "tests.test_guardrails:_mask_acme"}},
        guardrails_default=["mine"],
    )
    ModelRouter(host_app(), settings=settings)  # built: the function was found
    broken = _settings(fake, guardrails={"mine": {"kind": "callable", "function": "tests.nowhere:fn"}})
    with pytest.raises(ConfigError) as refused:
        ModelRouter(host_app(), settings=broken)
    assert "guardrails.mine.function: cannot import tests.nowhere:fn" in str(refused.value)


# --- the same checks across a failover and a resume ------------------------------------------------


async def test_every_candidate_and_every_resumed_continuation_is_sent_the_masked_prompt(fake: FakeUpstream) -> None:
    words = " ".join(f"w{index}" for index in range(1, 31))
    fake.script("down", reply.status(503))
    fake.script("m", reply.broken_stream(11, text=words), reply.ok(words))
    settings = _settings(
        fake,
        guardrails={"pii": PII, "secrets": SECRETS},
        groups={"g": {"members": ["a/down", "b/m"], "guardrails": ["pii", "secrets"]}},
    )
    async with _served(settings) as (client, _, records):
        stream = await client.chat.completions.create(
            model="group/g", messages=[{"role": "user", "content": PROMPT}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == words
    assert [hit.model for hit in fake.hits] == ["down", "m", "m"]  # a failover, then a resume
    for hit in fake.hits:
        assert "[EMAIL]" in hit.body["messages"][0]["content"]
    sent = _sent(fake)
    assert EMAIL not in sent and "4111" not in sent and KEY not in sent
    record = await _one(records)
    assert record.resumes == (("b/m", "served"),)
    assert record.guardrails == (("pii", "mask"), ("secrets", "mask"))


async def test_the_responses_routes_input_and_instructions_are_masked_before_the_upstream_sees_them(
    fake: FakeUpstream,
) -> None:
    settings = _settings(fake, guardrails={"pii": PII, "secrets": SECRETS}, guardrails_default=["pii", "secrets"])
    async with _served(settings) as (client, _, records):
        answer = await client.responses.create(
            model="a/m",
            instructions=f"Reply to {EMAIL}",
            input=[{"role": "user", "content": [{"type": "input_text", "text": PROMPT}]}],
        )
    assert answer.output_text
    [hit] = fake.hits
    assert hit.path == "/v1/responses"
    assert hit.body["instructions"] == "Reply to [EMAIL]"
    assert hit.body["input"][0]["content"][0]["text"] == (
        "Mail [EMAIL] my card [PAYMENT_CARD]; my key is ```[SECRET]```, a task-based plan."
    )
    sent = _sent(fake)
    assert EMAIL not in sent and "4111" not in sent and KEY not in sent
    record = await _one(records)
    assert record.guardrails == (("pii", "mask"), ("secrets", "mask"))
