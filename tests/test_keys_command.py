"""``asgi-router keys`` on the ledger directly: keys made, listed, shown, disabled, rotated and
revoked with no server, and a running router on the same SQLite file following each change."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import httpx2

from asgi_router import ModelRouter, RouterSettings

from .commands import COMMAND
from .conftest import host_app
from .mock_upstream import MockUpstream
from .servers import ServerThread
from .waiting import polled

ADMIN_KEY = "admin-key-0123456789abcdef"
CHAT = {"model": "mock/ok", "messages": [{"role": "user", "content": "hi"}]}


def _config(tmp_path: Path, upstream: MockUpstream) -> Path:
    config = tmp_path / "router.toml"
    config.write_text(
        # spend rows are not what these tests read: written when the router stops, not every second
        f'admin_keys = ["{ADMIN_KEY}"]\nledger_url = "sqlite:///{tmp_path}/ledger.db"\nledger_flush_interval = 3600\n'
        f'[providers.mock]\nbase_url = "{upstream.url}/v1"\napi_key = "sk-upstream-0123456789"\n'  # type: ignore[attr-defined]
    )
    return config


def _keys(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COMMAND, "keys", *args], capture_output=True, text=True, timeout=60)


def _json(*args: str) -> Any:
    result = _keys(*args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _chat(url: str, secret: str) -> int:
    with httpx2.Client() as client:
        return client.post(
            f"{url}/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {secret}"}
        ).status_code


def test_keys_made_and_changed_from_the_command_line_hold_in_a_running_router(
    tmp_path: Path, upstream: MockUpstream
) -> None:
    config = str(_config(tmp_path, upstream))
    created = _json("create", config, "--caller", "team-a", "--name", "ci", "--rpm", "100", "--groups", "mock/ok")
    assert created["secret"].startswith("sk-ar-") and created["groups"] == ["mock/ok"] and created["rpm"] == 100
    key_id = created["id"]
    listed = _keys("list", config)
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [key_id]
    assert created["secret"] not in listed.stdout
    assert _json("show", config, key_id)["name"] == "ci"
    with ServerThread(ModelRouter(host_app(), settings=RouterSettings.from_toml(config))) as server:
        assert _chat(server.url, created["secret"]) == 200
        assert _json("disable", config, key_id)["disabled"] is True
        polled(lambda: _chat(server.url, created["secret"]) == 401, within=3, every=0.02, what="disabled")
        _json("enable", config, key_id)
        rotated = _json("rotate", config, key_id, "--grace", "0")
        polled(lambda: _chat(server.url, rotated["secret"]) == 200, within=3, every=0.02, what="rotated")
        assert _chat(server.url, created["secret"]) == 401
        assert _json("revoke", config, key_id)["revoked"] is True
        polled(lambda: _chat(server.url, rotated["secret"]) == 401, within=3, every=0.02, what="revoked")


def test_the_keys_command_refuses_bad_input_and_unknown_ids_naming_them(tmp_path: Path, upstream: MockUpstream) -> None:
    config = str(_config(tmp_path, upstream))
    bad = _keys("create", config, "--caller", "team a")
    assert bad.returncode == 1 and "caller" in bad.stderr
    missing = _keys("revoke", config, "vk_nothing")
    assert missing.returncode == 1 and "vk_nothing" in missing.stderr
    _json("create", config, "--caller", "team-a", "--name", "ci")
    taken = _keys("create", config, "--caller", "team-a", "--name", "ci")
    assert taken.returncode == 1 and "name" in taken.stderr
