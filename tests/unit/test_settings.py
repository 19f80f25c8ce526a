"""RouterSettings: keywords, TOML and environment build one validated object."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr, ValidationError

from asgi_router.config.config_error import ConfigError, describe_refusal
from asgi_router.config.group_settings import MAX_GROUP_DEPTH
from asgi_router.config.provider_settings import ProviderSettings
from asgi_router.config.settings import RouterSettings, load_settings

SECRET = "sk-TEST-SECRET-0123456789abcdef"

_PROVIDERS: dict[str, Any] = {
    "openai": {"base_url": "https://api.openai.com/v1"},
    "local": {"base_url": "http://127.0.0.1:11434/v1"},
}

_TOML = """
[providers.openai]
base_url = "https://api.openai.com/v1"
api_key_env = "OPENAI_API_KEY"

[providers.local]
base_url = "http://127.0.0.1:11434/v1"

[groups.coder]
strategy = "order"
members = ["openai/gpt-4o-mini", "local/qwen2.5-coder"]
"""


@pytest.fixture(autouse=True)
def _clean_router_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No ASGI_ROUTER_* variable from the outer environment may leak into these tests.

    Inbound auth (required of every settings object) comes from the environment here, as
    ``allow_unauthenticated``: these tests are about the other keys, in every spelling.
    """
    for name in list(os.environ):
        if name.upper().startswith("ASGI_ROUTER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("ASGI_ROUTER_ALLOW_UNAUTHENTICATED", "true")


def _write(tmp_path: Path, text: str, name: str = "router.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _error_text(**kwargs: Any) -> str:
    """The refusal as an operator reads it (``ConfigError``'s text: keys as ``a.b[0]``)."""
    with pytest.raises(ValidationError) as info:
        RouterSettings(**kwargs)
    return describe_refusal(info.value, RouterSettings, None, kwargs)


# --- the three spellings ------------------------------------------------------------------------


def test_keyword_construction_builds_providers_groups_and_aliases() -> None:
    settings = RouterSettings(
        providers=_PROVIDERS,
        groups={"coder": {"strategy": "rotate", "members": ["openai/gpt-4o", "local/qwen"]}},
        aliases={"fast": "group/coder"},
    )
    assert settings.providers["openai"].base_url == "https://api.openai.com/v1"
    assert settings.groups["coder"].strategy == "rotate"
    assert settings.groups["coder"].members == ["openai/gpt-4o", "local/qwen"]
    assert settings.aliases == {"fast": "group/coder"}
    assert settings.routes == ["/v1/chat/completions", "/v1/responses"]  # the default routes


def test_base_url_trailing_slash_is_stripped() -> None:
    settings = RouterSettings(providers={"openai": {"base_url": "https://api.openai.com/v1/"}})
    assert settings.providers["openai"].base_url == "https://api.openai.com/v1"


def test_from_toml_reads_the_design_example(tmp_path: Path) -> None:
    settings = RouterSettings.from_toml(_write(tmp_path, _TOML))
    assert set(settings.providers) == {"openai", "local"}
    assert settings.providers["openai"].api_key_env == "OPENAI_API_KEY"
    assert settings.providers["local"].base_url == "http://127.0.0.1:11434/v1"
    assert settings.groups["coder"].members == ["openai/gpt-4o-mini", "local/qwen2.5-coder"]


def test_load_settings_with_config_path_matches_from_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, _TOML)
    assert load_settings(config=path) == RouterSettings.from_toml(path)
    assert load_settings(config=str(path)).groups["coder"].strategy == "order"


def test_load_settings_returns_given_settings_object_unchanged() -> None:
    settings = RouterSettings(providers=_PROVIDERS)
    assert load_settings(settings=settings) is settings


def test_load_settings_refuses_both_settings_and_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="either"):
        load_settings(settings=RouterSettings(), config=_write(tmp_path, _TOML))


def test_from_toml_missing_file_is_a_config_error_naming_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError, match=r"nope\.toml"):
        RouterSettings.from_toml(missing)


def test_from_toml_syntax_error_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "[providers.openai\nbase_url = 1\n", name="broken.toml")
    with pytest.raises(ConfigError, match=r"broken\.toml.*invalid TOML"):
        RouterSettings.from_toml(path)


def test_environment_variables_nested_with_double_underscore_build_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__OPENAI__BASE_URL", "https://env.example/v1")
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__OPENAI__TIMEOUTS__CONNECT", "2.5")
    monkeypatch.setenv("ASGI_ROUTER_GROUPS__CODER__MEMBERS", '["openai/gpt-4o"]')
    monkeypatch.setenv("ASGI_ROUTER_MAX_BODY_BYTES", "4096")
    settings = RouterSettings()
    assert settings.providers["openai"].base_url == "https://env.example/v1"
    assert settings.providers["openai"].timeouts.connect == 2.5
    assert settings.groups["coder"].members == ["openai/gpt-4o"]
    assert settings.max_body_bytes == 4096


def test_environment_overrides_toml_and_keeps_the_other_toml_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__OPENAI__BASE_URL", "https://env.example/v1")
    monkeypatch.setenv("ASGI_ROUTER_MAX_BODY_BYTES", "4096")
    settings = RouterSettings.from_toml(_write(tmp_path, "max_body_bytes = 1000\n" + _TOML))
    assert settings.providers["openai"].base_url == "https://env.example/v1"
    assert settings.max_body_bytes == 4096
    # Deep merge: the TOML's other keys survive the env override.
    assert settings.providers["openai"].api_key_env == "OPENAI_API_KEY"
    assert settings.providers["local"].base_url == "http://127.0.0.1:11434/v1"


def test_environment_overrides_toml_through_load_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__LOCAL__BASE_URL", "http://10.0.0.1:8000/v1")
    settings = load_settings(config=_write(tmp_path, _TOML))
    assert settings.providers["local"].base_url == "http://10.0.0.1:8000/v1"


def test_keywords_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_MAX_BODY_BYTES", "4096")
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__OPENAI__BASE_URL", "https://env.example/v1")
    settings = RouterSettings(max_body_bytes=7, providers={"openai": {"base_url": "https://kw.example/v1"}})
    assert settings.max_body_bytes == 7
    assert settings.providers["openai"].base_url == "https://kw.example/v1"


def test_keyword_overrides_to_from_toml_beat_environment_and_toml(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASGI_ROUTER_MAX_BODY_BYTES", "4096")
    settings = RouterSettings.from_toml(_write(tmp_path, "max_body_bytes = 1000\n" + _TOML), max_body_bytes=7)
    assert settings.max_body_bytes == 7


def test_toml_source_does_not_leak_into_later_plain_construction(tmp_path: Path) -> None:
    RouterSettings.from_toml(_write(tmp_path, _TOML))
    assert RouterSettings().providers == {}


# --- validation errors name the offending key ------------------------------------------------


def test_provider_named_group_is_refused_naming_the_key() -> None:
    text = _error_text(providers={"group": {"base_url": "https://x.example/v1"}})
    assert "providers.group" in text
    assert "reserved" in text


def test_group_member_naming_unknown_provider_is_refused_naming_the_member() -> None:
    text = _error_text(providers=_PROVIDERS, groups={"coder": {"members": ["openai/gpt-4o", "nope/model"]}})
    assert "groups.coder.members[1]" in text
    assert "'nope'" in text


def test_group_member_naming_unknown_group_is_refused_naming_the_member() -> None:
    text = _error_text(providers=_PROVIDERS, groups={"coder": {"members": ["group/missing"]}})
    assert "groups.coder.members[0]" in text
    assert "'missing'" in text


def test_group_member_that_is_a_bare_alias_is_refused() -> None:
    text = _error_text(providers=_PROVIDERS, aliases={"fast": "openai/gpt-4o"}, groups={"g": {"members": ["fast"]}})
    assert "groups.g.members[0]" in text


def test_empty_group_is_refused_naming_the_group() -> None:
    text = _error_text(providers=_PROVIDERS, groups={"empty": {"members": []}})
    assert "groups.empty" in text


def test_nesting_cycle_is_refused_and_spelled_out() -> None:
    text = _error_text(
        providers=_PROVIDERS,
        groups={"a": {"members": ["group/b"]}, "b": {"members": ["group/a"]}},
    )
    assert "groups.a" in text
    assert "group/a -> group/b -> group/a" in text


def test_self_referencing_group_is_a_cycle() -> None:
    text = _error_text(providers=_PROVIDERS, groups={"a": {"members": ["openai/x", "group/a"]}})
    assert "group/a -> group/a" in text


def _chain(length: int) -> dict[str, Any]:
    """Groups g0 -> g1 -> ... -> g{length-1}; the last holds a direct member."""
    groups: dict[str, Any] = {f"g{i}": {"members": [f"group/g{i + 1}"]} for i in range(length - 1)}
    groups[f"g{length - 1}"] = {"members": ["openai/gpt-4o"]}
    return groups


def test_nesting_up_to_the_maximum_depth_is_accepted() -> None:
    settings = RouterSettings(providers=_PROVIDERS, groups=_chain(MAX_GROUP_DEPTH))
    assert settings.flat_members("g0") == ("openai/gpt-4o",)


def test_nesting_deeper_than_eight_is_refused_naming_the_group() -> None:
    assert MAX_GROUP_DEPTH == 8
    text = _error_text(providers=_PROVIDERS, groups=_chain(MAX_GROUP_DEPTH + 1))
    assert "groups.g0" in text
    assert "deeper than 8" in text


def test_dangling_alias_is_refused_naming_the_alias() -> None:
    text = _error_text(providers=_PROVIDERS, aliases={"fast": "group/missing"})
    assert "aliases.fast" in text


def test_alias_to_unknown_provider_is_refused_naming_the_alias() -> None:
    text = _error_text(providers=_PROVIDERS, aliases={"cheap": "nope/model"})
    assert "aliases.cheap" in text


def test_alias_to_another_alias_is_refused() -> None:
    text = _error_text(providers=_PROVIDERS, aliases={"a": "openai/gpt-4o", "b": "a"})
    assert "aliases.b" in text


@pytest.mark.parametrize(
    "base_url",
    ["ftp://api.example/v1", "api.openai.com/v1", "https://x.example/v1?key=1", "https://x.example/v 1", ""],
)
def test_bad_base_url_is_refused_naming_the_key(base_url: str) -> None:
    text = _error_text(providers={"openai": {"base_url": base_url}})
    assert "providers.openai.base_url" in text


@pytest.mark.parametrize(
    "base_url",
    ["http://", "https:///v1", "https://x.example:notaport/v1", "http://[::1/v1", "http://api\x00.example/v1"],
)
def test_base_url_without_a_usable_host_or_port_is_refused_at_load(base_url: str) -> None:
    # Checkable without I/O, so it must fail start-up rather than every request to this provider.
    text = _error_text(providers={"openai": {"base_url": base_url}})
    assert "providers.openai.base_url" in text


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"bogus": 1}, "bogus"),
        ({"providers": {"openai": {"base_url": "https://x.example", "api_keyy": "k"}}}, "providers.openai.api_keyy"),
        ({"providers": {"openai": {"base_url": "https://x.example", "timeouts": {"read": 1}}}}, "timeouts.read"),
        (
            {"providers": _PROVIDERS, "groups": {"g": {"members": ["openai/x"], "strategy_": "order"}}},
            "groups.g.strategy_",
        ),
        ({"pool": {"max_conns": 1}}, "pool.max_conns"),
    ],
)
def test_unknown_keys_are_refused_naming_the_key(kwargs: dict[str, Any], key: str) -> None:
    text = _error_text(**kwargs)
    assert f"{key}: unknown key" in text


def test_unknown_key_in_toml_is_a_config_error_naming_key_and_file(tmp_path: Path) -> None:
    path = _write(tmp_path, _TOML + "\n[providers.local.timeouts]\nreed = 3\n")
    with pytest.raises(ConfigError) as info:
        load_settings(config=path)
    assert "providers.local.timeouts.reed" in str(info.value)
    assert str(path) in str(info.value)


def test_unknown_strategy_is_refused_naming_the_key() -> None:
    text = _error_text(providers=_PROVIDERS, groups={"g": {"strategy": "random", "members": ["openai/x"]}})
    assert "groups.g.strategy" in text


def test_load_settings_reports_malformed_env_json_as_config_error_naming_the_field(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS", '{"openai": {"base_url": "https://x.example"')
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "providers" in str(info.value)


def test_malformed_env_json_never_echoes_the_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS", '{"openai": {"base_url": "https://x.example", "api_key": "' + SECRET)
    with pytest.raises(ValueError) as info:
        load_settings()
    assert SECRET not in str(info.value)


def test_route_without_leading_slash_is_refused() -> None:
    assert "routes" in _error_text(routes=["v1/chat/completions"])


# --- flattening -------------------------------------------------------------------------------


def test_flat_members_expands_nested_groups_in_place_keeping_first_occurrence() -> None:
    settings = RouterSettings(
        providers=_PROVIDERS,
        groups={
            "outer": {"members": ["openai/a", "group/inner", "local/y", "openai/z"]},
            "inner": {"members": ["local/y", "openai/z", "openai/a", "local/w"]},
        },
    )
    assert settings.flat_members("outer") == ("openai/a", "local/y", "openai/z", "local/w")
    assert settings.flat_members("inner") == ("local/y", "openai/z", "openai/a", "local/w")


def test_flat_members_of_a_diamond_lists_the_shared_group_once() -> None:
    settings = RouterSettings(
        providers=_PROVIDERS,
        groups={
            "top": {"members": ["group/left", "group/right"]},
            "left": {"members": ["group/base", "openai/l"]},
            "right": {"members": ["group/base", "openai/r"]},
            "base": {"members": ["local/b"]},
        },
    )
    assert settings.flat_members("top") == ("local/b", "openai/l", "openai/r")


def test_flat_members_drops_duplicate_direct_members() -> None:
    settings = RouterSettings(providers=_PROVIDERS, groups={"g": {"members": ["openai/a", "local/b", "openai/a"]}})
    assert settings.flat_members("g") == ("openai/a", "local/b")


# --- api keys -------------------------------------------------------------------------------


def test_api_key_env_set_resolves_to_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_TEST_KEY", SECRET)
    provider = ProviderSettings(base_url="https://x.example/v1", api_key_env="ASGI_ROUTER_TEST_KEY")
    key = provider.key()
    assert isinstance(key, SecretStr)
    assert key.get_secret_value() == SECRET
    assert provider.is_configured is True


def test_api_key_env_unset_means_not_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASGI_ROUTER_TEST_KEY", raising=False)
    provider = ProviderSettings(base_url="https://x.example/v1", api_key_env="ASGI_ROUTER_TEST_KEY")
    assert provider.key() is None
    assert provider.is_configured is False


def test_api_key_env_set_to_empty_string_means_not_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_TEST_KEY", "")
    provider = ProviderSettings(base_url="https://x.example/v1", api_key_env="ASGI_ROUTER_TEST_KEY")
    assert provider.key() is None
    assert provider.is_configured is False


def test_explicit_api_key_wins_over_api_key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_TEST_KEY", "from-env")
    provider = ProviderSettings(base_url="https://x.example/v1", api_key=SECRET, api_key_env="ASGI_ROUTER_TEST_KEY")
    key = provider.key()
    assert key is not None and key.get_secret_value() == SECRET
    assert provider.is_configured is True


def test_provider_without_any_key_is_configured_and_sends_none() -> None:
    provider = ProviderSettings(base_url="http://127.0.0.1:11434/v1")
    assert provider.key() is None
    assert provider.is_configured is True


def test_api_key_env_is_read_at_call_time_not_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASGI_ROUTER_TEST_KEY", raising=False)
    provider = ProviderSettings(base_url="https://x.example/v1", api_key_env="ASGI_ROUTER_TEST_KEY")
    assert provider.is_configured is False
    monkeypatch.setenv("ASGI_ROUTER_TEST_KEY", SECRET)
    assert provider.is_configured is True


def test_api_key_from_toml_is_a_secret_not_shown_in_repr(tmp_path: Path) -> None:
    path = _write(tmp_path, f'[providers.openai]\nbase_url = "https://x.example/v1"\napi_key = "{SECRET}"\n')
    settings = RouterSettings.from_toml(path)
    key = settings.providers["openai"].key()
    assert key is not None and key.get_secret_value() == SECRET
    assert SECRET not in repr(settings)
    assert SECRET not in str(settings)


# --- no validation error ever echoes an api key ---------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"providers": {"openai": {"base_url": "ftp://x", "api_key": SECRET}}}, id="bad-base-url"),
        pytest.param(
            {"providers": {"openai": {"base_url": "https://x.example", "api_key": SECRET, "extra": SECRET}}},
            id="extra-key",
        ),
        pytest.param({"providers": {"group": {"base_url": "https://x.example", "api_key": SECRET}}}, id="reserved"),
        pytest.param(
            {
                "providers": {"openai": {"base_url": "https://x.example", "api_key": SECRET}},
                "groups": {"g": {"members": ["nope/model"]}},
            },
            id="unknown-provider",
        ),
        pytest.param({"providers": {"openai": {"base_url": "https://x.example", "api_key": [SECRET]}}}, id="bad-type"),
        pytest.param(
            {"providers": {"openai": {"base_url": "https://x.example", "headers": {"authorization": SECRET + "\n"}}}},
            id="header-value",
        ),
    ],
)
def test_validation_error_text_never_contains_the_api_key(kwargs: dict[str, Any]) -> None:
    text = _error_text(**kwargs)
    assert SECRET not in text


def test_env_api_key_never_appears_in_validation_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__OPENAI__API_KEY", SECRET)
    monkeypatch.setenv("ASGI_ROUTER_PROVIDERS__OPENAI__BASE_URL", "not-a-url")
    text = _error_text()
    assert "providers.openai.base_url" in text
    assert SECRET not in text


def test_config_error_from_toml_never_contains_the_api_key(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"""
        [providers.openai]
        base_url = "https://x.example/v1"
        api_key = "{SECRET}"
        unknown = "{SECRET}"

        [groups.g]
        members = ["missing/model"]
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_settings(config=path)
    assert "providers.openai" in str(info.value)
    assert SECRET not in str(info.value)
    assert SECRET not in repr(info.value)


def test_transport_defaults_to_aiohttp_and_accepts_httpx() -> None:
    assert RouterSettings().transport == "aiohttp"
    assert RouterSettings(transport="httpx").transport == "httpx"
    with pytest.raises(ValidationError):
        RouterSettings(transport="requests")  # type: ignore[arg-type]
