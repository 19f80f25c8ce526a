"""The demo a newcomer runs first: failover must be visible, and the command must start and stop."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import httpx2
import openai
import pytest
from asgi_lifespan import LifespanManager

from demo_app.app import running_demo

from .fleet import REDIS_PASSWORD, RedisServer

pytestmark = pytest.mark.anyio


async def test_demo_group_fails_over_from_flaky_to_steady_every_other_request() -> None:
    async with running_demo(word_delay=0.0) as demo, LifespanManager(demo.app) as manager:
        transport = httpx2.ASGITransport(app=manager.app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://demo") as client:
            responses = [
                await client.post(
                    "/v1/chat/completions",
                    json={"model": "group/demo", "messages": [{"role": "user", "content": "hi"}]},
                )
                for _ in range(4)
            ]
            models = await client.get("/v1/models")
            status = await client.get("/router/status.json")
    assert [r.status_code for r in responses] == [200] * 4
    winners = [(r.headers["x-router-model"], r.headers["x-router-attempts"]) for r in responses]
    assert ("steady/mock-1", "2") in winners  # the flaky mock failed and the router moved on
    assert ("flaky/mock-1", "1") in winners
    assert "group/demo" in {entry["id"] for entry in models.json()["data"]}
    # The status page shows the same story: every request, and the flaky mock's failures.
    recent = status.json()["recent"]
    assert [request["status"] for request in recent] == [200] * 4
    assert ("flaky/mock-1", "failed") in {(a["candidate"], a["outcome"]) for r in recent for a in r["attempts"]}


async def test_demo_slow_first_group_fails_over_on_the_first_byte_timeout() -> None:
    async with running_demo(word_delay=0.0, slow_delay=2.0, first_byte_timeout=0.3) as demo:
        async with LifespanManager(demo.app) as manager:
            transport = httpx2.ASGITransport(app=manager.app)
            async with httpx2.AsyncClient(transport=transport, base_url="http://demo") as client:
                response = await client.post(
                    "/v1/chat/completions",
                    json={"model": "group/slow-first", "messages": [{"role": "user", "content": "hi"}]},
                )
    assert response.status_code == 200
    assert response.headers["x-router-model"] == "steady/mock-1"
    assert response.headers["x-router-attempts"] == "2"


def test_python_m_demo_app_serves_the_sdk_and_stops_cleanly_on_sigterm() -> None:
    """README's first command, minus the install: start, answer through group/demo, exit 0."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    for name in ("OPENAI_API_KEY", "OPENROUTER_API_KEY"):
        env.pop(name, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "demo_app", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        base = None
        output: list[str] = []
        deadline = time.monotonic() + 20
        while base is None and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            output.append(line)
            found = re.search(r"host app with ModelRouter on (http://127\.0\.0\.1:\d+)", line)
            base = found.group(1) if found else None
        assert base is not None, "".join(output)
        while not output[-1].startswith("Press Ctrl-C") and time.monotonic() < deadline:  # the rest of the banner
            line = process.stdout.readline()
            if not line:
                break
            output.append(line)
        assert f"Watch the breakers and the requests live: {base}/router/status\n" in output
        client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model="group/demo", messages=[{"role": "user", "content": "hello demo"}]
        )
        assert raw.headers["x-router-model"] in ("flaky/mock-1", "steady/mock-1")
        assert "hello demo" in (raw.parse().choices[0].message.content or "")
        stream = client.chat.completions.create(
            model="group/demo", messages=[{"role": "user", "content": "stream please"}], stream=True
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert text
        client.close()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def test_python_m_demo_app_help_lists_every_mock_including_down_and_the_models() -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "demo_app", "--help"], capture_output=True, text=True, timeout=60, check=True
    )
    mocks = finished.stdout.split("mock upstreams", 1)[1]
    for name, what in [
        ("steady", "answers"),
        ("flaky", "503"),
        ("slow", "waits"),
        ("down", "connection refused"),
    ]:
        assert re.search(rf"^  {name} +.*{what}", mocks, re.MULTILINE), (name, finished.stdout)
    assert "group/unreachable" in finished.stdout


@pytest.mark.fleet
def test_python_m_demo_app_with_two_workers_sharing_redis_keeps_one_rotation(redis_server: RedisServer) -> None:
    """The way to watch a fleet: two workers on one socket, one rotate sequence between them."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "demo_app", "--port", "0", "--workers", "2", "--state-url", redis_server.url]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        assert process.stdout is not None
        output: list[str] = []
        base = None
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            output.append(line)
            found = re.search(r"host app with ModelRouter on (http://127\.0\.0\.1:\d+)", line)
            base = base or (found.group(1) if found else None)
            if "Press Ctrl-C to stop." in line:
                break
        text = "".join(output)
        assert base is not None, text
        assert "2 workers share breakers, rotation and budgets through" in text
        assert REDIS_PASSWORD not in text
        body = {"model": "group/rotate", "messages": [{"role": "user", "content": "hi"}]}
        winners = []
        for _ in range(6):  # fresh connections: the kernel hands them to either worker
            response = httpx2.post(f"{base}/v1/chat/completions", json=body, timeout=10)
            winners.append(response.headers["x-router-model"])
        assert all(winners[i] != winners[i + 1] for i in range(5)), winners  # wherever the counter stood
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
