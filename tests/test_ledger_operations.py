"""The ledger as operators meet it: ``asgi-router serve`` with two workers on one SQLite file,
``asgi-router spend`` reading it directly, ``check``'s ledger line and warning, a file that is
no ledger refusing the start, the metrics and the status page."""

from __future__ import annotations

import csv
import io
import subprocess
from pathlib import Path

import httpx2
import pytest

from asgi_router.ledger.service import Ledger

from .commands import COMMAND, free_port, serving
from .conftest import API_KEY, CLIENT_KEY
from .metrics_helpers import Scrape
from .mock_upstream import MockUpstream
from .routing_helpers import chat_body, router_client

pytestmark = pytest.mark.anyio


def _config(tmp_path: Path, upstream: MockUpstream, extra: str = "") -> Path:
    path = tmp_path / "router.toml"
    path.write_text(
        f"""
api_keys = {{team-a = "{CLIENT_KEY}"}}
{extra}

[providers.mock]
base_url = "{upstream.url}/v1"
api_key = "{API_KEY}"

[groups.main]
members = ["mock/usage-100"]
"""  # type: ignore[attr-defined]
    )
    return path


def _run(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COMMAND, *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False)


def test_two_workers_share_one_sqlite_file_and_spend_reads_every_row(tmp_path: Path, upstream: MockUpstream) -> None:
    config = _config(tmp_path, upstream, f'ledger_url = "sqlite:///{tmp_path}/ledger.db"\nledger_flush_interval = 0.05')
    auth = {"authorization": f"Bearer {CLIENT_KEY}"}
    with serving(config, "--workers", "2", start_timeout=90) as (url, process):
        for _ in range(20):
            answer = httpx2.post(f"{url}/v1/chat/completions", json=chat_body("group/main"), headers=auth, timeout=10)
            assert answer.status_code == 200, answer.text
    assert process.returncode == 0
    table = _run("spend", config, "--by", "caller", "--since", "1d")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].split() == [
        "caller", "requests", "input_tokens", "output_tokens", "cached_tokens", "cost_usd"
    ]  # fmt: skip
    assert table.stdout.splitlines()[1].split()[:5] == ["team-a", "20", "2000", "60", "0"]
    by_model = _run("spend", config, "--by", "model", "--since", "2020-01-01", "--csv")
    assert by_model.returncode == 0, by_model.stderr
    rows = list(csv.DictReader(io.StringIO(by_model.stdout)))
    assert [(row["model"], row["requests"]) for row in rows] == [("mock/usage-100", "20")]
    future = _run("spend", config, "--since", "2999-01-01T00:00:00Z")
    assert future.returncode == 0 and "(no spend in that time)" in future.stdout
    bad = _run("spend", config, "--since", "last week")
    assert bad.returncode == 1 and "is not YYYY-MM-DD" in bad.stderr


def test_check_names_the_ledger_and_warns_that_caps_without_one_reset_on_restart(
    tmp_path: Path, upstream: MockUpstream
) -> None:
    capped = _config(tmp_path, upstream, "[callers.team-a]\nrpm = 10")
    said = _run("check", capped)
    assert said.returncode == 0, said.stderr
    assert "ledger: none (no ledger_url)" in said.stdout
    assert "every tally resets when the router restarts; set ledger_url" in said.stdout
    assert _run("check", "--strict", capped).returncode == 1
    kept = _config(tmp_path, upstream, 'ledger_url = "postgresql://app:Secret123@db.internal:5432/router"')
    said = _run("check", kept)
    assert "ledger: postgresql postgresql://app:***@db.internal:5432/router" in said.stdout
    assert "Secret123" not in said.stdout + said.stderr


async def test_a_router_with_caps_and_no_ledger_warns_once_that_they_reset_naming_ledger_url(
    upstream: MockUpstream, caplog: pytest.LogCaptureFixture
) -> None:
    caps = {"callers": {"team-a": {"rpm": 100}}, "sessions": {"tokens_per_session": 10**6}}
    auth = {"authorization": f"Bearer {CLIENT_KEY}"}
    for ledger in ({}, {"ledger_url": "memory://"}):
        caplog.clear()
        async with router_client(upstream, api_keys={"team-a": CLIENT_KEY}, **caps, **ledger) as (client, _):
            for _ in range(2):
                answer = await client.post("/v1/chat/completions", json=chat_body("mock/ok"), headers=auth)
                assert answer.status_code == 200
        said = [record for record in caplog.records if "resets when the router restarts" in record.getMessage()]
        if ledger:
            assert said == []
        else:
            assert [(record.levelname, "set ledger_url" in record.getMessage()) for record in said] == [
                ("WARNING", True)
            ]


def test_a_corrupted_sqlite_file_refuses_the_start_naming_its_path(tmp_path: Path, upstream: MockUpstream) -> None:
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"\x00not a database\x00" * 64)
    config = _config(tmp_path, upstream, f'ledger_url = "sqlite:///{broken}"')
    result = _run("serve", config, "--port", str(free_port()), "--log-level", "error")
    assert result.returncode != 0
    assert str(broken) in result.stdout + result.stderr


async def test_metrics_and_the_status_page_show_the_ledger(upstream: MockUpstream) -> None:
    settings = {
        "ledger_url": "memory://",
        "metrics_route": "/metrics",
        "status_route": "/status",
        "ledger_buffer": 1,
        "ledger_flush_interval": 3600,
    }
    async with router_client(upstream, api_keys=[CLIENT_KEY], **settings) as (client, _):
        auth = {"authorization": f"Bearer {CLIENT_KEY}"}
        for _ in range(2):
            assert (
                await client.post("/v1/chat/completions", json=chat_body("mock/ok"), headers=auth)
            ).status_code == 200
        scrape = Scrape((await client.get("/metrics", headers=auth)).text)
        assert scrape.value("asgi_router_ledger_rows_total", outcome="dropped") == 1
        assert scrape.value("asgi_router_ledger_rows_total", outcome="written") == 0
        assert scrape.value("asgi_router_ledger_buffered_rows") == 1
        assert scrape.value("asgi_router_ledger_lag_seconds") >= 0
        status = (await client.get("/status.json", headers=auth)).json()["ledger"]
        assert (status["kind"], status["url"], status["buffered_rows"], status["dropped_rows"]) == (
            "memory", "memory://", 1, 1
        )  # fmt: skip


def test_the_status_of_a_postgresql_ledger_masks_its_password() -> None:
    status = Ledger("postgresql://app:Secret123@db.internal:5432/router", 10, 1.0).status()
    assert status["url"] == "postgresql://app:***@db.internal:5432/router"
    assert status["kind"] == "postgresql"
