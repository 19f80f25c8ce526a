"""Spend that lasts, at the client's boundary: routers served on loopback with a ledger in a
real SQLite file or a real PostgreSQL server; the kit's fake upstream reports usage (the
``usage-<n>`` models: ``n`` prompt tokens and 3 completion tokens)."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import redis

from asgi_router import ModelRouter, RouterSettings
from asgi_router.config.ledger_settings import DEFAULT_LEDGER_VARIABLE
from asgi_router.ledger.opening import open_database

from .conftest import host_app, make_settings
from .fleet import RedisServer
from .mock_upstream import MockUpstream
from .postgres import PG_PASSWORD, PostgresServer
from .servers import ServerThread
from .waiting import eventually, polled

TEAM_A = "team-a-key-0123456789abcdef"
KEYS = {"team-a": TEAM_A}


def _settings(upstream: MockUpstream, ledger_url: str, **overrides: Any) -> RouterSettings:
    overrides.setdefault("api_keys", KEYS)
    overrides.setdefault("groups", {"main": {"members": ["mock/usage-100"]}})
    return make_settings(upstream.url, ledger_url=ledger_url, **overrides)  # type: ignore[attr-defined]


@pytest.fixture
def serve() -> Iterator[Any]:
    """Serve routers built from settings on loopback (their lifespans run); stopped at the end."""
    servers: list[ServerThread] = []

    def start(settings: RouterSettings) -> tuple[ModelRouter, ServerThread]:
        router = ModelRouter(host_app(), settings=settings)
        server = ServerThread(router).start()
        servers.append(server)
        return router, server

    yield start
    for server in servers:
        server.stop()


def _ask(server: ServerThread, key: str = TEAM_A, **headers: str) -> httpx2.Response:
    body = {"model": "group/main", "messages": [{"role": "user", "content": "hi"}]}
    sent = {"authorization": f"Bearer {key}", **headers}
    return httpx2.post(f"{server.url}/v1/chat/completions", json=body, headers=sent, timeout=10)


def _rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT caller, model, served_by, status, input_tokens, output_tokens, measured, session FROM spend"
        ).fetchall()
    connection.close()
    return rows


def test_a_restart_in_the_middle_of_a_day_keeps_every_tally(upstream: MockUpstream, serve: Any, tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    settings = _settings(
        upstream,
        f"sqlite:///{path}",
        callers={"team-a": {"tokens_per_day": 250}},
        sessions={"tokens_per_session": 150, "ttl": 600},
    )
    _, server = serve(settings)
    assert _ask(server).status_code == 200  # 103 tokens
    assert _ask(server, **{"x-session-id": "chat-1"}).status_code == 200  # 206 tokens; the session: 103
    assert _ask(server).status_code == 200  # 309: started under the cap
    assert _ask(server).status_code == 429  # past it
    server.stop()  # a graceful stop writes what waits
    assert sorted(row[3] for row in _rows(path)) == [200, 200, 200, 429]
    assert ("team-a", "group/main", "mock/usage-100", 200, 100, 3, 1) in [row[:7] for row in _rows(path)]
    assert all(row[7] is None or len(row[7]) == 64 for row in _rows(path))  # a digest, never "chat-1"

    _, again = serve(_settings(upstream, f"sqlite:///{path}", callers={"team-a": {"tokens_per_day": 250}}))
    refused = _ask(again)
    assert refused.status_code == 429, refused.text  # the day's 309 tokens came back from the file
    assert refused.json()["error"]["code"] == "caller_limit_reached"


def test_a_restarted_router_keeps_each_session_tally(upstream: MockUpstream, serve: Any, tmp_path: Path) -> None:
    settings = _settings(upstream, f"sqlite:///{tmp_path}/ledger.db", sessions={"tokens_per_session": 150, "ttl": 600})
    _, server = serve(settings)
    assert _ask(server, **{"x-session-id": "chat-1"}).status_code == 200  # 103 of 150
    assert _ask(server, **{"x-session-id": "chat-1"}).status_code == 200  # 206: started under
    server.stop()
    _, again = serve(settings)
    assert _ask(again, **{"x-session-id": "chat-1"}).status_code == 429  # still past it
    assert _ask(again, **{"x-session-id": "chat-2"}).status_code == 200  # another session is not


def test_a_full_buffer_drops_rows_counted_and_requests_still_succeed(
    upstream: MockUpstream, serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    router, server = serve(_settings(upstream, "memory://", ledger_buffer=2, ledger_flush_interval=3600))
    for _ in range(5):
        assert _ask(server).status_code == 200
    writer = router._ledger.writer
    assert (writer.buffered, writer.dropped) == (2, 3)
    assert sum("further rows are dropped" in record.getMessage() for record in caplog.records) == 1  # logged once


def test_rows_written_while_postgresql_is_stopped_are_all_there_once_it_is_back(
    upstream: MockUpstream, serve: Any, postgres_server: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = postgres_server.new_database()
    router, server = serve(_settings(upstream, url, ledger_flush_interval=0.05))

    async def count() -> int:
        database = await open_database(url)
        try:
            return int((await database.fetch("SELECT COUNT(*) FROM spend"))[0][0])
        finally:
            await database.close()

    for _ in range(3):
        assert _ask(server).status_code == 200
    anyio.run(eventually, lambda: router._ledger.writer.written == 3)
    postgres_server.stop()
    try:
        for _ in range(10):
            assert _ask(server).status_code == 200  # the database is away: the requests are not
        anyio.run(eventually, lambda: router._ledger.writer.lag() > 0)
    finally:
        postgres_server.start()
    anyio.run(eventually, lambda: router._ledger.writer.buffered == 0, 30.0)
    assert anyio.run(count) == 13
    assert all(PG_PASSWORD not in record.getMessage() for record in caplog.records)


def test_postgresql_stopped_and_started_under_concurrent_load_keeps_each_row_once(
    upstream: MockUpstream, serve: Any, postgres_server: PostgresServer
) -> None:
    # Four clients send without pause while the database goes away mid-write (an immediate stop
    # drops connections, maybe with a batch's commit unanswered) and comes back: every answered
    # request is one row, none lost and none written twice.
    url = postgres_server.new_database()
    router, server = serve(_settings(upstream, url, ledger_flush_interval=0.02))
    statuses: list[int] = []
    done = threading.Event()

    def client() -> None:
        while not done.is_set():
            statuses.append(_ask(server).status_code)

    clients = [threading.Thread(target=client) for _ in range(4)]
    for thread in clients:
        thread.start()
    try:
        polled(lambda: router._ledger.writer.written >= 20, 30.0, what="rows written before the stop")
        postgres_server.stop()
        try:
            during = len(statuses)
            polled(lambda: len(statuses) >= during + 40, 30.0, what="requests answered while it was away")
            assert router._ledger.writer.buffered > 0
        finally:
            postgres_server.start()
        after = len(statuses)
        polled(lambda: len(statuses) >= after + 40, 30.0, what="requests answered after it came back")
    finally:
        done.set()
        for thread in clients:
            thread.join(30)

    async def rows() -> tuple[int, int]:
        database = await open_database(url)
        try:
            found = await database.fetch("SELECT COUNT(*), COUNT(DISTINCT request_id) FROM spend")
            return int(found[0][0]), int(found[0][1])
        finally:
            await database.close()

    anyio.run(eventually, lambda: router._ledger.writer.buffered == 0, 30.0)
    assert set(statuses) == {200}
    assert anyio.run(rows) == (len(statuses), len(statuses))
    assert router._ledger.writer.dropped == 0


def test_the_ledger_seeds_an_empty_redis_and_redis_counts_win_after(
    upstream: MockUpstream, serve: Any, tmp_path: Path, redis_server: RedisServer
) -> None:
    path = tmp_path / "ledger.db"
    prefix = f"seed{tmp_path.name[-8:]}"
    shared = {"state_url": redis_server.url, "state_key_prefix": prefix, "callers": {"team-a": {"tokens_per_day": 250}}}
    _, server = serve(_settings(upstream, f"sqlite:///{path}", **shared))
    for _ in range(3):
        assert _ask(server).status_code == 200  # 309 tokens: past the cap
    server.stop()
    with redis.Redis.from_url(redis_server.url) as store:
        keys = list(store.scan_iter(f"{prefix}:*"))
        store.delete(*keys)  # Redis forgot (a restart without persistence); the ledger did not
    _, again = serve(_settings(upstream, f"sqlite:///{path}", **shared))

    def seeded() -> bool:  # before any request of the new router: only the ledger can have said so
        with redis.Redis.from_url(redis_server.url) as store:
            counts = [float(store.get(key) or 0) for key in store.scan_iter(f"{prefix}:cap:*:tokens_per_day")]
        return bool(counts) and max(counts) >= 309

    anyio.run(eventually, seeded)
    assert _ask(again).status_code == 429  # the fleet's count holds from the first request


def test_admin_keys_without_ledger_url_keep_the_ledger_in_the_working_directory(
    upstream: MockUpstream,
    serve: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DEFAULT_LEDGER_VARIABLE, raising=False)  # the kit's plugin sets it for tests
    caplog.set_level(logging.INFO, "asgi_router")
    groups = {"main": {"members": ["mock/usage-100"]}}
    settings = make_settings(upstream.url, api_keys=KEYS, groups=groups, admin_keys=["admin-key-0123456789abcdef"])  # type: ignore[attr-defined]
    _, server = serve(settings)
    assert _ask(server).status_code == 200
    server.stop()
    assert len(_rows(tmp_path / "asgi_router.sqlite3")) == 1
    said_url = "sqlite:///asgi_router.sqlite3"
    said = [record.getMessage() for record in caplog.records if said_url in record.getMessage()]
    assert said == [
        f"admin_keys is set and ledger_url is not: the ledger is sqlite:///asgi_router.sqlite3 in {tmp_path}"
    ]


def test_an_answer_from_the_response_cache_is_a_spend_row_of_nothing_and_a_restart_counts_it_so(
    upstream: MockUpstream, serve: Any, tmp_path: Path
) -> None:
    path = tmp_path / "ledger.db"
    caps = {"team-a": {"tokens_per_day": 150}}
    groups = {"main": {"members": ["mock/usage-100"], "cache": {}}}
    settings = _settings(upstream, f"sqlite:///{path}", callers=caps, groups=groups)
    _, server = serve(settings)
    first, second = _ask(server), _ask(server)
    assert (first.headers["x-router-cache"], second.headers["x-router-cache"]) == ("miss", "hit")
    server.stop()
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT cache_hit, input_tokens, output_tokens, cost_usd FROM spend").fetchall()
    connection.close()
    assert sorted(rows) == [(0, 100, 3, 0.0), (1, 0, 0, 0.0)]  # the hit spent no token

    _, again = serve(settings)
    assert _ask(again, **{"cache-control": "no-cache"}).status_code == 200  # 103 of 150 used: under the cap
    assert _ask(again, **{"cache-control": "no-cache"}).status_code == 429  # 206: had the hit counted, sooner
