"""Virtual keys across processes: two uvicorn processes on one SQLite file, and two hosts on one
PostgreSQL with Redis. A key created on one is accepted by the other at once (looked up once),
a key revoked on one is refused by the other within a second (the background refresh), and a
key's caps hold across both."""

from __future__ import annotations

import time
from pathlib import Path

import httpx2

from .fleet import Fleet, RedisServer, RouterProcess
from .mock_upstream import MockUpstream
from .postgres import PostgresServer
from .waiting import polled

ADMIN_KEY = "admin-key-0123456789abcdef"
CHAT = {"model": "mock/ok", "messages": [{"role": "user", "content": "hi"}]}
#: The contract is one second; the margin is for a loaded machine's process scheduling.
REVOKED_WITHIN = 1.5


def _config(path: Path, upstream: MockUpstream, ledger_url: str, extra: str = "") -> Path:
    path.write_text(
        f'admin_keys = ["{ADMIN_KEY}"]\nledger_url = "{ledger_url}"\n{extra}'
        f'[providers.mock]\nbase_url = "{upstream.url}/v1"\napi_key = "sk-upstream-0123456789"\n'  # type: ignore[attr-defined]
    )
    return path


def _chat(url: str, secret: str) -> int:
    with httpx2.Client() as client:
        answer = client.post(f"{url}/v1/chat/completions", json=CHAT, headers={"Authorization": f"Bearer {secret}"})
        return answer.status_code


def _admin(url: str, method: str, path: str, body: object = None) -> httpx2.Response:
    with httpx2.Client() as client:
        return client.request(method, f"{url}/admin{path}", json=body, headers={"Authorization": f"Bearer {ADMIN_KEY}"})


def _created_elsewhere_then_revoked_elsewhere(first: RouterProcess, second: RouterProcess) -> None:
    created = _admin(first.url, "POST", "/keys", {"caller": "team-a"})
    assert created.status_code == 201, created.text
    key = created.json()
    assert _chat(second.url, key["secret"]) == 200  # unknown to the second: looked up once
    assert _admin(first.url, "DELETE", f"/keys/{key['id']}").status_code == 204
    revoked_at = time.monotonic()
    polled(lambda: _chat(second.url, key["secret"]) == 401, within=REVOKED_WITHIN + 1, every=0.02, what="refused")
    assert time.monotonic() - revoked_at <= REVOKED_WITHIN


def test_two_processes_on_one_sqlite_file_share_keys_and_a_revocation_within_a_second(
    tmp_path: Path, upstream: MockUpstream
) -> None:
    config = _config(tmp_path / "router.toml", upstream, f"sqlite:///{tmp_path}/ledger.db")
    with Fleet([RouterProcess("a", config, tmp_path), RouterProcess("b", config, tmp_path)]) as fleet:
        first, second = fleet.routers
        _created_elsewhere_then_revoked_elsewhere(first, second)
        _created_elsewhere_then_revoked_elsewhere(second, first)


def test_two_hosts_on_postgresql_and_redis_share_keys_revocations_and_a_keys_caps(
    tmp_path: Path, upstream: MockUpstream, postgres_server: PostgresServer, redis_server: RedisServer
) -> None:
    ledger = postgres_server.new_database()
    config = _config(tmp_path / "router.toml", upstream, ledger, f'state_url = "{redis_server.url}"\n')
    with Fleet([RouterProcess("a", config, tmp_path), RouterProcess("b", config, tmp_path)]) as fleet:
        first, second = fleet.routers
        _created_elsewhere_then_revoked_elsewhere(first, second)
        capped = _admin(first.url, "POST", "/keys", {"caller": "team-b", "rpm": 4}).json()
        statuses = [_chat(router.url, capped["secret"]) for router in (first, second) * 6]
        # The key's four a minute, held across both hosts within the fleet's bound (leased slices).
        assert set(statuses) == {200, 429} and 4 <= statuses.count(200) <= 6, statuses
        assert statuses[-2:] == [429, 429]
