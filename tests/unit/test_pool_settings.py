"""A pool setting the chosen transport cannot honour is refused when the settings are built.

aiohttp's public API has no cap on idle connections (its connector keeps every released one
until ``keepalive_expiry``), so ``pool.max_keepalive_connections`` with the aiohttp transport
would be silently ignored: it is refused instead, saying why and what to use. Unset (the
default) means the transport's own behaviour on both transports.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from asgi_router import ConfigError, PoolSettings, RouterSettings

_BASE = {"providers": {"local": {"base_url": "http://127.0.0.1:11434/v1"}}, "allow_unauthenticated": True}


@pytest.fixture(autouse=True)
def _clean_router_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.upper().startswith("ASGI_ROUTER_"):
            monkeypatch.delenv(name)


def test_the_idle_connection_cap_is_unset_by_default_and_default_settings_build() -> None:
    assert PoolSettings().max_keepalive_connections is None
    settings = RouterSettings(**_BASE)
    assert settings.transport == "aiohttp"
    assert settings.pool.max_keepalive_connections is None


def test_an_idle_connection_cap_is_refused_on_aiohttp_saying_why_and_what_instead() -> None:
    with pytest.raises(ValidationError) as refused:
        RouterSettings(**_BASE, pool={"max_keepalive_connections": 8})
    message = str(refused.value)
    assert "pool.max_keepalive_connections" in message
    assert "aiohttp transport cannot honour an idle-connection cap" in message
    assert "keepalive_expiry" in message and 'transport = "httpx"' in message


def test_an_idle_connection_cap_from_a_file_or_the_environment_is_a_config_error_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "router.toml"
    path.write_text(
        'allow_unauthenticated = true\n[providers.local]\nbase_url = "http://127.0.0.1:11434/v1"\n'
        "[pool]\nmax_keepalive_connections = 8\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"pool\.max_keepalive_connections: the aiohttp transport"):
        RouterSettings.from_toml(path)
    path.write_text('allow_unauthenticated = true\n[providers.local]\nbase_url = "http://127.0.0.1:11434/v1"\n')
    monkeypatch.setenv("ASGI_ROUTER_POOL__MAX_KEEPALIVE_CONNECTIONS", "8")
    with pytest.raises(ConfigError, match=r"pool\.max_keepalive_connections: the aiohttp transport"):
        RouterSettings.from_toml(path)


def test_an_idle_connection_cap_is_kept_for_the_httpx_transport() -> None:
    settings = RouterSettings(**_BASE, transport="httpx", pool={"max_keepalive_connections": 8})
    assert settings.pool.max_keepalive_connections == 8
