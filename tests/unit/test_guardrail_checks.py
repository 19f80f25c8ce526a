"""The built-in guardrails' finders, checksums and schema subset, each with true and false
positives, and the guardrail settings refused at load where they cannot mean anything."""

from __future__ import annotations

from typing import Any

import pytest

from asgi_router import RouterSettings
from asgi_router.config.guardrail_settings import PII_ENTITIES, GuardrailSettings
from asgi_router.guardrails.builtin_checks import Asked, build_check
from asgi_router.guardrails.deny_list import DenyList
from asgi_router.guardrails.pii import find_pii, iban_valid, luhn_valid
from asgi_router.guardrails.schema_subset import schema_of, violation
from asgi_router.guardrails.secret_shapes import find_secrets
from asgi_router.guardrails.stream_texts import HeldEvents
from asgi_router.guardrails.text_slots import answer_slots, prompt_slots, read_slots, write_slots

pytestmark = pytest.mark.anyio


def _labels(text: str, *entities: Any) -> list[str]:
    return [label for _, _, label in find_pii(text, entities or PII_ENTITIES)]


# --- pii -------------------------------------------------------------------------------------------


def test_a_valid_card_number_is_found_with_or_without_separators() -> None:
    assert _labels("pay with 4111 1111 1111 1111 today", "payment_card") == ["[PAYMENT_CARD]"]
    assert _labels("card 4111-1111-1111-1111.", "payment_card") == ["[PAYMENT_CARD]"]
    assert _labels("5500000000000004", "payment_card") == ["[PAYMENT_CARD]"]


def test_a_sixteen_digit_number_that_fails_luhn_is_not_a_card() -> None:
    assert not luhn_valid("4111111111111112")
    assert _labels("order 4111 1111 1111 1112 shipped", "payment_card") == []
    assert _labels("tracking 1234567890123456", "payment_card") == []


def test_an_iban_is_found_only_when_its_mod_97_checksum_holds() -> None:
    assert iban_valid("GB82 WEST 1234 5698 7654 32")
    assert _labels("send it to GB82 WEST 1234 5698 7654 32 please", "iban") == ["[IBAN]"]
    assert _labels("DE89370400440532013000", "iban") == ["[IBAN]"]
    assert not iban_valid("GB83 WEST 1234 5698 7654 32")
    assert _labels("send it to GB83 WEST 1234 5698 7654 32 please", "iban") == []


def test_emails_ssns_ips_and_phones_are_found_and_look_alikes_are_not() -> None:
    assert _labels("write to jane.doe+x@example.co.uk", "email") == ["[EMAIL]"]
    assert _labels("an @mention and user@localhost", "email") == []
    assert _labels("ssn 123-45-6789", "us_ssn") == ["[US_SSN]"]
    assert _labels("ssn 000-12-3456 and 666-12-3456", "us_ssn") == []
    assert _labels("from 192.168.10.1 now", "ip_address") == ["[IP_ADDRESS]"]
    assert _labels("version 1.2.3.4.5 and 300.1.1.1", "ip_address") == []
    assert _labels("call +44 20 7946 0958 or (415) 555-0100", "phone") == ["[PHONE]", "[PHONE]"]
    assert _labels("the year 2024 had 365 days and 1000000 users", "phone") == []


def test_names_and_addresses_are_not_found_patterns_are_not_understanding() -> None:
    assert _labels("Jane Doe lives at 221B Baker Street, London") == []


# --- secrets ---------------------------------------------------------------------------------------


def test_a_key_shaped_string_is_found_even_inside_a_code_block() -> None:
    key = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2"
    text = f'```python\nclient = OpenAI(api_key="{key}")\n```'
    assert [text[s:e] for s, e, _ in find_secrets(text)] == [key]
    assert list(find_secrets("AKIAIOSFODNN7EXAMPLE and ghp_" + "a" * 36))


def test_plain_words_and_short_prefixes_are_not_secrets() -> None:
    assert list(find_secrets("a task-based plan; ask-me-anything; sk-short; the desk-top")) == []


def test_pem_private_keys_and_jwts_are_secrets() -> None:
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    assert len(list(find_secrets(f"key: {pem} token: {jwt}"))) == 2


# --- deny ------------------------------------------------------------------------------------------


def test_deny_terms_match_whole_words_case_insensitively_and_patterns_as_written() -> None:
    deny = DenyList(["acme corp", "zap"], [r"PRJ-\d{4}"])
    found = [label for _, _, label in deny.find("ACME Corp asked about PRJ-1234 and zap!")]
    assert found == ["[DENIED]", "[DENIED]", "[DENIED]"]
    assert list(deny.find("zapping acme corporation PRJ-12")) == []


# --- json_schema -----------------------------------------------------------------------------------

_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/tag"}},
        "kind": {"anyOf": [{"type": "string", "enum": ["a", "b"]}, {"type": "null"}]},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
    "$defs": {"tag": {"type": "string"}},
}


def test_a_document_that_follows_the_schema_is_valid() -> None:
    assert violation({"name": "x", "age": 3, "tags": ["t"], "kind": None}, _SCHEMA) is None


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ({"age": 3}, "'name' is required"),
        ({"name": "x", "age": -1}, "$.age: minimum 0"),
        ({"name": "x", "age": 1.5}, "$.age: not of type integer"),
        ({"name": "x", "age": True}, "$.age: not of type integer"),
        ({"name": "x", "age": 1, "extra": 1}, "'extra' is not allowed"),
        ({"name": "x", "age": 1, "tags": [1]}, "$.tags[0]: not of type string"),
        ({"name": "x", "age": 1, "kind": "c"}, "$.kind: matches none of anyOf"),
    ],
)
def test_a_document_that_breaks_the_schema_says_where(document: dict[str, Any], where: str) -> None:
    found = violation(document, _SCHEMA)
    assert found is not None and where in found


def test_the_schema_is_read_from_response_format_or_the_responses_text_format() -> None:
    chat = {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": _SCHEMA}}}
    responses = {"text": {"format": {"type": "json_schema", "name": "x", "schema": _SCHEMA}}}
    assert schema_of(chat) == _SCHEMA and schema_of(responses) == _SCHEMA
    assert schema_of({"response_format": {"type": "json_object"}}) is None


async def test_the_json_schema_check_fails_over_on_invalid_json_and_passes_valid_json() -> None:
    check = build_check("shape", GuardrailSettings(kind="json_schema", stage="output", action="fail_over"), None)
    asked = Asked("output", None, "/v1/chat/completions", "p/m", schema=_SCHEMA)
    assert (await check.run(("not json",), asked)).outcome == "fail_over"
    assert (await check.run(('{"name": "x", "age": 2}',), asked)).outcome == "pass"
    no_schema = Asked("output", None, "/v1/chat/completions", "p/m")
    assert (await check.run(("not json",), no_schema)).outcome == "pass"  # nothing asked for


async def test_max_input_tokens_blocks_past_its_limit_on_the_estimate() -> None:
    check = build_check("size", GuardrailSettings(kind="max_input_tokens", limit=100), None)
    assert (await check.run((), Asked("input", None, "/", "m", tokens=lambda: 101))).outcome == "block"
    assert (await check.run((), Asked("input", None, "/", "m", tokens=lambda: 100))).outcome == "pass"


# --- the texts checked -----------------------------------------------------------------------------


def test_chat_texts_are_system_messages_parts_tool_results_and_tool_call_arguments() -> None:
    payload: dict[str, Any] = {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image_url", "image_url": {}}]},
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"a":1}'}}]},
            {"role": "tool", "content": "result"},
        ]
    }
    slots = prompt_slots(payload, "/v1/chat/completions")
    assert read_slots(slots) == ("sys", "part", '{"a":1}', "result")
    write_slots(slots, ("S", "P", "A", "R"))
    assert payload["messages"][1]["content"][0]["text"] == "P" and payload["messages"][3]["content"] == "R"


def test_messages_responses_and_embeddings_texts_are_read_per_route() -> None:
    messages = {
        "system": [{"type": "text", "text": "sys"}],
        "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "out"}]},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"q": "v"}}]},
        ],
    }
    assert read_slots(prompt_slots(messages, "/v1/messages")) == ("sys", "out", "v")
    responses = {"instructions": "be brief", "input": [{"role": "user", "content": "hello"}]}
    assert read_slots(prompt_slots(responses, "/v1/responses")) == ("be brief", "hello")
    assert read_slots(prompt_slots({"input": "just text"}, "/v1/responses")) == ("just text",)
    assert read_slots(prompt_slots({"input": ["a", "b"]}, "/v1/embeddings")) == ("a", "b")
    assert read_slots(prompt_slots({"input": "one"}, "/v1/embeddings")) == ("one",)


def test_an_answers_texts_are_its_content_and_tool_call_arguments_in_each_shape() -> None:
    chat = {"choices": [{"message": {"content": "hi", "tool_calls": [{"function": {"arguments": "{}"}}]}}]}
    message = {"type": "message", "content": [{"type": "text", "text": "hello"}]}
    responses = {"output": [{"type": "message", "content": [{"type": "output_text", "text": "out"}]}]}
    assert read_slots(answer_slots(chat)) == ("hi", "{}")
    assert read_slots(answer_slots(message)) == ("hello",)
    assert read_slots(answer_slots(responses)) == ("out",)


def test_a_held_stream_is_read_joined_per_part_and_masked_into_its_first_delta() -> None:
    chunks = [
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":"mail jane@"}}]}\n\n',
        b'data: {"choices":[{"index":0,"delta":{"content":"example.com now"}}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    held = HeldEvents(b"".join(chunks))
    assert held.texts() == ("mail jane@example.com now",)
    masked = held.masked(("mail [EMAIL] now",))
    assert b"jane" not in masked and masked.endswith(b"data: [DONE]\n\n")
    assert HeldEvents(masked).texts() == ("mail [EMAIL] now",)
    anthropic = (
        b"event: content_block_delta\n"
        b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}\n\n'
    )
    assert HeldEvents(anthropic).texts() == ("x",)
    assert HeldEvents(anthropic).masked(("y",)).startswith(b"event: content_block_delta\ndata: {")


# --- settings --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ({"kind": "json_schema", "stage": "input"}, 'kind "json_schema" checks answers only'),
        ({"kind": "max_input_tokens", "limit": 5, "stage": "output"}, 'kind "max_input_tokens" checks prompts only'),
        ({"kind": "max_input_tokens", "limit": 5, "action": "mask"}, "cannot mask"),
        ({"kind": "pii", "action": "fail_over"}, 'action "fail_over" applies to answers only'),
        ({"kind": "deny", "patterns": ["ok", "(unclosed"]}, "patterns[1] is not a valid regular expression"),
        ({"kind": "pii", "entities": ["name"]}, "entities"),
    ],
)
def test_a_guardrail_that_cannot_mean_anything_is_refused_at_load_naming_it(table: dict[str, Any], said: str) -> None:
    with pytest.raises(ValueError) as refused:
        RouterSettings(allow_unauthenticated=True, guardrails={"g1": table})
    assert said in str(refused.value) and "g1" in str(refused.value)
