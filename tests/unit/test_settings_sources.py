"""Refusals at settings build: inbound auth chosen exactly once, and errors that name their source.

Settings are built before the app serves anything, so what they refuse stops the app's import
(``settings = RouterSettings.from_toml(...)`` at module level) instead of a first request. A bad
value is blamed on where it came from, the environment variable or the TOML file, and never
shown (it may be a key).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.datastructures import Headers

from asgi_router import ConfigError, ModelRouter, RouterSettings
from asgi_router.config.settings import load_settings

KEY = "inbound-key-0123456789abcdef"
KEY_2 = "inbound-key-fedcba9876543210"
_PROVIDERS_TOML = '[providers.local]\nbase_url = "http://127.0.0.1:11434/v1"\n'
_PYDANTIC_INTERNALS = ("lax-or-strict", "json-or-python", "function-after", "errors.pydantic.dev")


@pytest.fixture(autouse=True)
def _clean_router_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ASGI_ROUTER_"):
            monkeypatch.delenv(name)


def _toml(tmp_path: Path, text: str = "") -> Path:
    path = tmp_path / "router.toml"
    path.write_text(text + _PROVIDERS_TOML, encoding="utf-8")
    return path


def _authorize(scope: Any, headers: Headers) -> bool:
    return True


def _refusal(path: Path, **overrides: Any) -> str:
    """The message of the :class:`ConfigError` that ``from_toml(path, **overrides)`` raises."""
    with pytest.raises(ConfigError) as caught:
        RouterSettings.from_toml(path, **overrides)
    return str(caught.value)


# --- inbound auth is chosen when the settings are built -------------------------------------


def test_from_toml_without_inbound_auth_is_a_config_error_naming_the_three_choices(tmp_path: Path) -> None:
    message = _refusal(_toml(tmp_path))
    for choice in ("authorize=", "api_keys", "allow_unauthenticated=True", "package.module:function"):
        assert choice in message
    assert not any(noise in message for noise in _PYDANTIC_INTERNALS)


def test_settings_from_the_environment_alone_without_auth_are_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__LOCAL__BASE_URL", "http://127.0.0.1:11434/v1")
    with pytest.raises(ConfigError, match="inbound auth is required"):
        load_settings()


def test_authorize_named_in_toml_by_its_import_string_is_imported(tmp_path: Path) -> None:
    settings = RouterSettings.from_toml(_toml(tmp_path, 'authorize = "tests.unit.test_settings_sources:_authorize"\n'))
    assert settings.authorize is _authorize


def test_authorize_import_string_that_names_nothing_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = _toml(tmp_path, 'authorize = "tests.unit.test_settings_sources:no_such_function"\n')
    assert f"authorize (in {path})" in _refusal(path)


def test_model_routers_authorize_keyword_completes_the_settings_it_builds_from_a_file(tmp_path: Path) -> None:
    router = ModelRouter(Starlette(), config=_toml(tmp_path), authorize=_authorize)
    assert router.settings.authorize is _authorize


def test_model_routers_authorize_keyword_completes_the_settings_it_builds_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__LOCAL__BASE_URL", "http://127.0.0.1:11434/v1")
    assert ModelRouter(Starlette(), authorize=_authorize).settings.authorize is _authorize


def test_model_routers_authorize_keyword_beside_settings_built_already_says_what_to_do() -> None:
    settings = RouterSettings(api_keys=[KEY])
    with pytest.raises(ConfigError, match=r"RouterSettings\(authorize=fn\)"):
        ModelRouter(Starlette(), settings=settings, authorize=_authorize)


def test_authorize_keyword_and_api_keys_from_the_environment_are_auth_configured_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASGI_ROUTER_API_KEYS", KEY)
    with pytest.raises(ConfigError, match="configured twice"):
        ModelRouter(Starlette(), config=_toml(tmp_path), authorize=_authorize)


@pytest.mark.parametrize("value", [KEY, f'{{"web": "{KEY}"}}'], ids=["list", "named"])
def test_settings_built_with_keywords_name_the_variable_the_contradicting_keys_came_from(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASGI_ROUTER_API_KEYS", value)
    with pytest.raises(ValidationError) as caught:
        RouterSettings(allow_unauthenticated=True)
    message = str(caught.value)
    assert "contradicts api_keys" in message
    assert "api_keys from the environment variable ASGI_ROUTER_API_KEYS" in message
    assert KEY not in message


def test_keyword_keys_contradicting_allow_unauthenticated_name_no_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_API_KEYS", KEY_2)  # the keyword's keys win over it
    with pytest.raises(ValidationError) as caught:
        RouterSettings(allow_unauthenticated=True, api_keys=[KEY])
    assert "contradicts api_keys" in str(caught.value) and "ASGI_ROUTER_API_KEYS" not in str(caught.value)


# --- ASGI_ROUTER_API_KEYS: comma-separated or JSON ---------------------------------------------


@pytest.mark.parametrize(
    "value", [f"{KEY},{KEY_2}", f" {KEY} , {KEY_2} ,", f'["{KEY}", "{KEY_2}"]'], ids=["commas", "padded", "json"]
)
def test_api_keys_from_the_environment_are_comma_separated_or_a_json_list(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASGI_ROUTER_API_KEYS", value)
    keys = RouterSettings().api_keys
    assert isinstance(keys, list)
    assert [key.get_secret_value() for key in keys] == [KEY, KEY_2]


def test_one_api_key_from_the_environment_needs_no_brackets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_API_KEYS", KEY)
    keys = RouterSettings().api_keys
    assert isinstance(keys, list) and [key.get_secret_value() for key in keys] == [KEY]


def test_named_api_keys_from_the_environment_are_a_json_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_API_KEYS", f'{{"web": "{KEY}", "batch": "{KEY_2}"}}')
    keys = RouterSettings().api_keys
    assert isinstance(keys, dict) and keys["batch"].get_secret_value() == KEY_2


def test_an_invalid_key_from_the_environment_names_the_variable_not_the_file_nor_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASGI_ROUTER_API_KEYS", f"{KEY},short-key-1")
    path = _toml(tmp_path)
    message = _refusal(path)
    assert "ASGI_ROUTER_API_KEYS" in message
    assert "shorter than 16" in message
    assert str(path) not in message
    assert "short-key-1" not in message and KEY not in message
    assert not any(noise in message for noise in _PYDANTIC_INTERNALS)


def test_malformed_json_keys_from_the_environment_name_the_variable_and_hide_the_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ASGI_ROUTER_API_KEYS", f'["{KEY}"')
    with pytest.raises(ConfigError) as caught:
        load_settings()
    message = str(caught.value)
    assert "ASGI_ROUTER_API_KEYS" in message and "JSON" in message
    assert KEY not in message and KEY not in repr(caught.value)


def test_a_bad_nested_value_from_the_environment_names_that_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__LOCAL__TIMEOUTS__CONNECT", "-1")
    path = _toml(tmp_path, "allow_unauthenticated = true\n")
    message = _refusal(path)
    assert "providers.local.timeouts.connect" in message
    assert "ASGI_ROUTER_PROVIDERS__LOCAL__TIMEOUTS__CONNECT" in message
    assert str(path) not in message


def test_a_bad_value_from_the_file_names_the_file_and_the_key(tmp_path: Path) -> None:
    path = tmp_path / "router.toml"
    path.write_text('allow_unauthenticated = true\n[providers.local]\nbase_url = "ftp://x"\n', encoding="utf-8")
    message = _refusal(path)
    assert f"providers.local.base_url (in {path})" in message
    assert "http://" in message  # what is wrong: the scheme
    assert not any(noise in message for noise in _PYDANTIC_INTERNALS)


def test_a_keyword_override_is_blamed_neither_on_the_environment_nor_on_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASGI_ROUTER_MAX_BODY_BYTES", "4096")
    path = _toml(tmp_path, "allow_unauthenticated = true\nmax_body_bytes = 1000\n")
    message = _refusal(path, max_body_bytes=0)
    assert "max_body_bytes: " in message
    assert "ASGI_ROUTER_MAX_BODY_BYTES" not in message and str(path) not in message
