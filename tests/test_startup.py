"""A broken configuration stops a real ``uvicorn`` at start-up, with its message, not a 500 later.

Each test writes an app module and a ``router.toml`` without inbound auth into a temporary
directory and runs ``python -m uvicorn`` there, as an operator would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_BROKEN_TOML = '[providers.local]\nbase_url = "http://127.0.0.1:11434/v1"\n'  # no inbound auth chosen


def _uvicorn(directory: Path, app_module: str, *options: str) -> subprocess.CompletedProcess[str]:
    (directory / "router.toml").write_text(_BROKEN_TOML, encoding="utf-8")
    (directory / "app.py").write_text(app_module, encoding="utf-8")
    env = {name: value for name, value in os.environ.items() if not name.upper().startswith("ASGI_ROUTER_")}
    command = [sys.executable, "-m", "uvicorn", "app:app", "--host", "127.0.0.1", "--port", "0", *options]
    # A server that starts despite the config would run until the timeout: the test then fails.
    return subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True, timeout=60)


def test_uvicorn_lifespan_on_with_a_broken_config_exits_non_zero_with_the_message(tmp_path: Path) -> None:
    app_module = (
        "from fastapi import FastAPI\n"
        "from asgi_router import ModelRouter\n"
        "app = FastAPI()\n"
        'app.add_middleware(ModelRouter, config="router.toml")\n'
    )
    finished = _uvicorn(tmp_path, app_module, "--lifespan", "on")
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0, output
    assert "Application startup failed" in output
    # The router's own ERROR line, as well as the server's traceback.
    assert "ModelRouter could not start: invalid router configuration" in output
    assert "inbound auth is required" in output


def test_module_level_settings_with_a_broken_config_stop_the_import(tmp_path: Path) -> None:
    app_module = (
        "from fastapi import FastAPI\n"
        "from asgi_router import ModelRouter, RouterSettings\n"
        'settings = RouterSettings.from_toml("router.toml")\n'
        "app = FastAPI()\n"
        "app.add_middleware(ModelRouter, settings=settings)\n"
    )
    finished = _uvicorn(tmp_path, app_module)  # uvicorn's default lifespan ("auto") is enough
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0, output
    assert "ConfigError: invalid router configuration" in output
    assert "inbound auth is required" in output
    assert "lax-or-strict" not in output and "errors.pydantic.dev" not in output


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_admin_keys_with_a_working_directory_no_file_can_be_made_in_stop_the_start_naming_the_path(
    tmp_path: Path,
) -> None:
    # With admin_keys and no ledger_url the ledger is a file in the working directory: started
    # in /proc (where even root creates no file), uvicorn must not serve.
    app_module = (
        "from fastapi import FastAPI\n"
        "from asgi_router import ModelRouter, RouterSettings\n"
        "settings = RouterSettings(providers={'local': {'base_url': 'http://127.0.0.1:9/v1'}},\n"
        "                          admin_keys=['admin-key-0123456789abcdef'])\n"
        "app = FastAPI()\n"
        "app.add_middleware(ModelRouter, settings=settings)\n"
    )
    (tmp_path / "app.py").write_text(app_module, encoding="utf-8")
    env = {name: value for name, value in os.environ.items() if not name.upper().startswith("ASGI_ROUTER_")}
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "app:app",
        "--app-dir",
        str(tmp_path),
        "--port",
        "0",
        "--lifespan",
        "on",
    ]
    finished = subprocess.run(command, cwd="/proc", env=env, capture_output=True, text=True, timeout=60)
    output = finished.stdout + finished.stderr
    assert finished.returncode != 0, output
    assert "Application startup failed" in output
    assert "ledger_url: asgi_router.sqlite3: the router cannot create a file in /proc" in output
