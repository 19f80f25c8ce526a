"""The configuration reference is generated from the settings models: every key documented, named
as TOML and the environment spell it.

The models are the one source of the reference (``docs/hooks/config_reference.py`` renders it when
the site is built), so a field without a ``description`` would ship undocumented: it fails here
first. The environment variable names the reference gives are set for real and read back.
"""

from __future__ import annotations

import inspect
import os
import typing
from typing import Any

import pytest
from pydantic import BaseModel

from asgi_router import RouterSettings

from .docs_site import config_reference


def _models_reachable_from(model: type[BaseModel]) -> list[type[BaseModel]]:
    """``model`` and every model its fields can hold, at any depth (first seen first)."""
    found: list[type[BaseModel]] = []
    stack: list[Any] = [model]
    while stack:
        kind = stack.pop(0)
        if inspect.isclass(kind) and issubclass(kind, BaseModel):
            if kind not in found:
                found.append(kind)
                stack += [field.annotation for field in kind.model_fields.values()]
        else:
            stack += typing.get_args(kind)
    return found


_MODELS = _models_reachable_from(RouterSettings)


@pytest.fixture(autouse=True)
def _clean_router_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ASGI_ROUTER_"):
            monkeypatch.delenv(name)


def test_the_committed_reference_is_the_one_the_models_generate() -> None:
    module = config_reference()
    page = module.PATH.read_text(encoding="utf-8")
    assert module.committed(page) == module.render(), f"docs/configuration.md is stale: run {module.REGENERATE}"


def test_the_regeneration_command_rewrites_only_the_reference_between_its_markers() -> None:
    module = config_reference()
    page = "# Title\n\nprose\n\n" + module.MARKER + "\n\nold text\n" + module.END + "\n\nafter\n"
    written = module.page_with(page, module.render())
    assert written.startswith("# Title\n\nprose\n\n") and written.endswith(module.END + "\n\nafter\n")
    assert module.committed(written) == module.render()
    assert module.page_with(written, module.render()) == written  # running it twice changes nothing
    with pytest.raises(ValueError, match="lost its marker lines"):
        module.committed("# no markers")


def test_every_settings_table_is_found() -> None:
    names = {model.__name__ for model in _MODELS}
    assert {"RouterSettings", "ProviderSettings", "Timeouts", "GroupSettings", "MemberSettings"} <= names
    assert {"PoolSettings", "BreakerSettings", "HealthSettings", "RuleSettings", "ModelInfo"} <= names
    assert len(_MODELS) >= 14


@pytest.mark.parametrize("model", _MODELS, ids=lambda model: model.__name__)
def test_every_settings_field_has_a_description(model: type[BaseModel]) -> None:
    undocumented = [name for name, field in model.model_fields.items() if not (field.description or "").strip()]
    assert not undocumented, f"{model.__name__}: give {undocumented} a Field(description=...)"


@pytest.mark.parametrize("model", _MODELS, ids=lambda model: model.__name__)
def test_every_settings_table_has_a_docstring_for_its_section(model: type[BaseModel]) -> None:
    assert (model.__doc__ or "").strip(), model.__name__


def test_the_reference_has_a_section_per_table_and_a_key_per_field() -> None:
    tables = config_reference().tables()
    assert tables[0].model is RouterSettings
    assert {table.model for table in tables} == set(_MODELS)
    for table in tables:
        keys = [key.toml.rsplit(".", 1)[-1] for key in table.keys]
        assert keys == list(table.model.model_fields), table.model.__name__
        assert all(key.description and key.type and key.default for key in table.keys), table.model.__name__


def _key(toml: str) -> Any:
    [key] = [key for table in config_reference().tables() for key in table.keys if key.toml == toml]
    return key


def test_the_rendered_reference_shows_path_type_default_variable_and_description() -> None:
    text = config_reference().render()
    assert "\n## ProviderSettings\n" in text  # its anchor, #providersettings, on the site as on GitHub
    assert "- **`providers.<name>.timeouts.first_byte`**: " in text
    first_byte = _key("providers.<name>.timeouts.first_byte")
    assert first_byte.env == "ASGI_ROUTER_PROVIDERS__<NAME>__TIMEOUTS__FIRST_BYTE"
    assert first_byte.default == "`60.0`" and first_byte.type == "number (> 0)"
    assert f"**: {first_byte.description}\n" in text
    assert _key("max_body_bytes").default == "`10485760` (10 MiB)"
    assert _key("groups.<name>.members").default == "*required*"
    assert _key("pool.max_keepalive_connections").default == "unset"


def test_keys_inside_lists_and_catalog_entries_are_set_through_their_variables_json() -> None:
    assert (_key("rules[].name").env, _key("rules[].name").env_json) == ("ASGI_ROUTER_RULES", True)
    member = _key("groups.<name>.members[].weight")
    assert (member.env, member.env_json) == ("ASGI_ROUTER_GROUPS__<NAME>__MEMBERS", True)
    window = _key('catalog."<provider/model-id>".context_window')
    assert (window.env, window.env_json) == ("ASGI_ROUTER_CATALOG", True)


_PROVIDER = {"providers": {"openai": {"base_url": "https://api.openai.com/v1"}}, "allow_unauthenticated": True}
_GROUP = {**_PROVIDER, "groups": {"coder": {"members": ["openai/gpt-4o"]}}}


@pytest.mark.parametrize(
    ("toml", "name", "value", "read"),
    [
        ("max_attempts", "", "3", lambda s: s.max_attempts == 3),
        ("breaker.open_for", "", "12.5", lambda s: s.breaker.open_for == 12.5),
        ("pool.keepalive_expiry", "", "7", lambda s: s.pool.keepalive_expiry == 7),
        (
            "providers.<name>.timeouts.first_byte",
            "OPENAI",
            "20",
            lambda s: s.providers["openai"].timeouts.first_byte == 20,
        ),
        ("providers.<name>.health.interval", "OPENAI", "9", lambda s: s.providers["openai"].health.interval == 9),
        ("groups.<name>.hedge_after", "CODER", "0.5", lambda s: s.groups["coder"].hedge_after == 0.5),
        (  # a group of its own, from the environment alone (a keyword would win over it)
            "groups.<name>.members",
            "OTHER",
            '["openai/gpt-4o-mini"]',
            lambda s: s.flat_members("other") == ("openai/gpt-4o-mini",),
        ),
    ],
)
def test_the_environment_variable_the_reference_names_sets_that_key(
    toml: str, name: str, value: str, read: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    variable = _key(toml).env.replace("<NAME>", name)
    monkeypatch.setenv(variable, value)
    settings = RouterSettings(**_GROUP)
    assert read(settings), variable
