"""Reading settings from a TOML file, and turning any refusal into one :class:`ConfigError`.

``pydantic-settings`` reads keywords and the environment by itself; the TOML file joins them as
the lowest-precedence source only while :func:`from_toml` builds the settings (a context
variable says which file, so one process may load several). A refusal is rendered for an
operator: one line per key, where its value came from, never the value itself.
"""

from __future__ import annotations

import os
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsError, TomlConfigSettingsSource

from asgi_router.config.config_error import ConfigError, describe_refusal, describe_undecodable

__all__ = ["build", "from_toml", "sources"]

Settings = TypeVar("Settings", bound=BaseSettings)

_toml_path: ContextVar[Path | None] = ContextVar("asgi_router_toml_path", default=None)


def sources(
    settings_cls: type[BaseSettings],
    init_settings: PydanticBaseSettingsSource,
    env_settings: PydanticBaseSettingsSource,
) -> tuple[PydanticBaseSettingsSource, ...]:
    """Keywords, then the environment, then the TOML file being loaded (if one is)."""
    path = _toml_path.get()
    if path is None:
        return (init_settings, env_settings)
    return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=path))


def from_toml(cls: type[Settings], path: str | os.PathLike[str], overrides: dict[str, Any]) -> Settings:
    """``cls`` from the file at ``path``, under the environment and ``overrides``."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file not found: {file}")
    try:
        with file.open("rb") as handle:
            tomllib.load(handle)  # surface syntax errors with the file's name
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: invalid TOML: {exc}") from exc
    token = _toml_path.set(file)
    try:
        return build(cls, file, overrides)
    finally:
        _toml_path.reset(token)


def build(cls: type[Settings], file: Path | None, overrides: dict[str, Any]) -> Settings:
    """``cls(**overrides)``, its refusals as one :class:`ConfigError` that says where each bad
    value came from."""
    # ``from None``: the message says it all, and pydantic's own rendering of the error (a page
    # of its schema's internals) would otherwise follow it in every traceback.
    try:
        return cls(**overrides)
    except ValidationError as exc:
        raise ConfigError(describe_refusal(exc, cls, file, overrides)) from None
    except SettingsError as exc:
        raise ConfigError(describe_undecodable(exc)) from None
