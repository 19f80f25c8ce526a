"""parse_model_ref: one string with two meanings (``provider/model-id``, ``group/<id>``), parsed totally."""

from __future__ import annotations

import random

import pytest

from asgi_router.core.refs import MAX_MODEL_ID_LENGTH, InvalidRef, ModelRef, RefKind, parse_model_ref


def _ok(value: object) -> ModelRef:
    ref = parse_model_ref(value)
    assert isinstance(ref, ModelRef), f"{value!r} -> {ref!r}"
    return ref


def _invalid(value: object) -> InvalidRef:
    ref = parse_model_ref(value)
    assert isinstance(ref, InvalidRef), f"{value!r} -> {ref!r}"
    assert ref.message
    return ref


# --- the rows of the §2 table --------------------------------------------------------------


def test_provider_slash_model_is_a_direct_ref() -> None:
    assert _ok("openai/gpt-4o") == ModelRef(RefKind.DIRECT, "openai", "gpt-4o")


def test_split_is_at_the_first_slash_so_multi_segment_ids_are_kept_whole() -> None:
    ref = _ok("openrouter/deepseek/deepseek-chat")
    assert ref.kind is RefKind.DIRECT
    assert ref.name == "openrouter"
    assert ref.model_id == "deepseek/deepseek-chat"


def test_three_slash_model_id_is_kept_whole() -> None:
    assert _ok("hf/org/family/model-7b").model_id == "org/family/model-7b"


def test_group_prefix_is_reserved_for_routing_groups() -> None:
    ref = _ok("group/coder")
    assert ref == ModelRef(RefKind.GROUP, "coder")
    assert ref.model_id == ""


def test_bare_name_without_slash_is_an_alias() -> None:
    assert _ok("gpt-4o") == ModelRef(RefKind.ALIAS, "gpt-4o")


def test_bare_word_group_is_an_alias_not_a_group() -> None:
    assert _ok("group") == ModelRef(RefKind.ALIAS, "group")


@pytest.mark.parametrize(
    "model_id",
    ["qwen2.5-coder:7b", "gpt-4o@2024-05-13", "ft:gpt-4o:org::id", "llama+3~beta", "a_b.c-d"],
)
def test_punctuation_used_by_real_model_ids_is_accepted(model_id: str) -> None:
    assert _ok(f"local/{model_id}").model_id == model_id


def test_model_id_of_maximum_length_is_accepted() -> None:
    model_id = "m" * MAX_MODEL_ID_LENGTH
    assert _ok(f"p/{model_id}").model_id == model_id


# --- invalid inputs: InvalidRef, never an exception ------------------------------------------


@pytest.mark.parametrize("value", [None, 42, 4.2, True, b"openai/gpt-4o", ["openai/gpt-4o"], {"m": 1}])
def test_non_string_model_is_an_invalid_ref(value: object) -> None:
    assert "string" in _invalid(value).message


def test_empty_string_is_an_invalid_ref() -> None:
    _invalid("")


def test_invalid_ref_message_states_both_legal_spellings() -> None:
    message = _invalid("gpt 4o").message
    assert "provider/model-id" in message
    assert "group/" in message


@pytest.mark.parametrize(
    "value",
    [
        "openai/gpt-4o\r\nX-Injected: 1",
        "openai/gpt-4o\n",
        "openai\n/gpt-4o",
        "gpt-4o\r",
        "openai/gpt\x00-4o",
        "openai/\x1b[31mred",
        "\x1b[2Jgpt",
        "group/co\x1bder",
        "openai/gpt 4o",
        " openai/gpt-4o",
        "gpt 4o",
        "openai/gpt-4o\t",
        "openai/gpt-4ö",
        "öpenai/gpt-4o",
        'openai/gpt"4o',
    ],
)
def test_control_space_and_non_ascii_characters_are_rejected(value: str) -> None:
    _invalid(value)


@pytest.mark.parametrize(
    "value",
    [
        "p/" + "m" * (MAX_MODEL_ID_LENGTH + 1),  # model id over the cap
        "x" * 10_000,  # bare name far over any cap
        "openai/" + "a" * 10_000,
        "p" * 65 + "/gpt",  # provider name over 64 characters
        "a" * 65,  # alias name over 64 characters
    ],
)
def test_over_long_inputs_are_rejected(value: str) -> None:
    _invalid(value)


@pytest.mark.parametrize("value", ["/gpt-4o", "/", "//x"])
def test_empty_provider_is_rejected(value: str) -> None:
    _invalid(value)


@pytest.mark.parametrize("value", ["openai/", "openai//gpt", "openai/gpt/", "openai//"])
def test_empty_model_id_or_empty_segment_is_rejected(value: str) -> None:
    _invalid(value)


def test_trailing_slash_on_multi_segment_id_is_rejected() -> None:
    _invalid("openrouter/deepseek/deepseek-chat/")


@pytest.mark.parametrize("value", ["group/", "group/a/b", "group/-x", "group/.x", "group/a b", "group/" + "g" * 65])
def test_group_prefix_with_invalid_group_id_is_rejected(value: str) -> None:
    assert "group" in _invalid(value).message


@pytest.mark.parametrize("value", ["-openai/gpt-4o", ".hidden/gpt", "_x", "-alias"])
def test_names_must_start_with_a_letter_or_digit(value: str) -> None:
    _invalid(value)


# --- totality and round-trip over many random strings ---------------------------------------

_ALPHABET = (
    "abcxyzABC019" * 4  # legal name characters, weighted up so that many samples parse
    + "/" * 6
    + "._-:@+~"
    + " \t\r\n\x00\x1b\x7f\"'\\{}%#?ö日\ud800"
)


def _random_strings(seed: int, count: int) -> list[object]:
    rng = random.Random(seed)
    samples: list[object] = []
    for _ in range(count):
        length = rng.choice([0, 1, 2, 5, 10, 20, 70, 330])
        text = "".join(rng.choice(_ALPHABET) for _ in range(length))
        if rng.random() < 0.2:
            text = "group/" + text
        samples.append(text)
    return samples


def test_parse_is_total_and_every_model_ref_round_trips_through_str() -> None:
    samples = _random_strings(seed=20240611, count=3000)
    parsed = 0
    for value in samples:
        ref = parse_model_ref(value)  # must never raise
        assert isinstance(ref, ModelRef | InvalidRef), (value, ref)
        if isinstance(ref, ModelRef):
            parsed += 1
            assert parse_model_ref(str(ref)) == ref, (value, ref)
            assert str(ref) == value
            assert not any(ch in str(ref) for ch in "\r\n\x00\x1b ")
        else:
            assert isinstance(ref.message, str) and ref.message
    # The generator must actually exercise both outcomes, or the loop proves nothing.
    assert parsed > 100
    assert len(samples) - parsed > 100
