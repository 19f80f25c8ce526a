"""A clean Ctrl-C is a quiet shutdown: a real ``uvicorn --lifespan on`` process, stopped by SIGINT.

uvicorn ends its event loop as soon as the app has sent ``lifespan.shutdown.complete``, and the
loop's runner cancels whatever still runs: anything of the router's still winding down then
would be logged as "Exception in 'lifespan' protocol" with a ``CancelledError`` traceback.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx2
import pytest

from .mock_upstream import MockUpstream
from .waiting import polled

_APP = """
from fastapi import FastAPI

from asgi_router import ModelRouter, RouterSettings


async def collect(record):
    pass


app = FastAPI()
app.add_middleware(
    ModelRouter,
    sinks=[collect],
    settings=RouterSettings(
        allow_unauthenticated=True,
        providers={{"mock": {{"base_url": "{url}/v1", "health": {{"interval": 0.2, "path": "/health/ctrl-c"}}}}}},
    ),
)
"""


@pytest.fixture
def app_dir(tmp_path: Path, upstream: MockUpstream) -> Path:
    (tmp_path / "ctrl_c_app.py").write_text(_APP.format(url=upstream.url))  # type: ignore[attr-defined]
    return tmp_path


@pytest.mark.both_transports
def test_ctrl_c_under_uvicorn_lifespan_on_shuts_down_without_an_error_or_traceback(
    app_dir: Path, upstream: MockUpstream
) -> None:
    repository = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repository)}
    command = [sys.executable, "-m", "uvicorn", "ctrl_c_app:app", "--lifespan", "on", "--host", "127.0.0.1"]
    output: list[str] = []
    with subprocess.Popen(
        [*command, "--port", "0"], cwd=app_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as server:
        running = threading.Event()

        def read() -> None:  # its output, told when uvicorn says it listens (or the output ends)
            for line in server.stdout or ():
                output.append(line)
                if "Uvicorn running on" in line:
                    running.set()
            running.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert running.wait(30), "uvicorn did not start:\n" + "".join(output)
            port = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", "".join(output))
            assert port is not None and server.poll() is None, "".join(output)
            url = f"http://127.0.0.1:{port.group(1)}"
            probes = upstream.health_hits["ctrl-c"]
            answer = httpx2.post(f"{url}/v1/chat/completions", json={"model": "mock/ok", "messages": []})
            # a few health probes and sink deliveries in flight, as in a real service
            polled(lambda: upstream.health_hits["ctrl-c"] >= probes + 2, within=10, what="two health probes")
            server.send_signal(signal.SIGINT)
            returncode = server.wait(timeout=30)
        finally:
            if server.poll() is None:  # pragma: no cover - a hung server is a test failure
                server.kill()
        reader.join(timeout=10)
    log = "".join(output)
    assert answer.status_code == 200
    assert returncode == 0, log
    assert "Application shutdown complete." in log
    assert "Exception in 'lifespan' protocol" not in log, log
    assert "Traceback" not in log and "ERROR" not in log, log
