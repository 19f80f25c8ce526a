"""The ledger's database layer against real SQLite files and a real PostgreSQL server: tables
made on first start, a refusal naming the path for a file that is no ledger, naming both
versions for a newer schema, and the same statements working on both dialects."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from asgi_router import RouterSettings
from asgi_router.config.advisories import stray_environment
from asgi_router.config.ledger_settings import DEFAULT_LEDGER_VARIABLE, effective_ledger_url
from asgi_router.ledger.database import Database, LedgerConflict, LedgerRefused
from asgi_router.ledger.opening import open_database
from asgi_router.ledger.schema import VERSION, VERSION_TABLE

from .postgres import PG_PASSWORD, PostgresServer

pytestmark = pytest.mark.anyio

_ROW = "INSERT INTO spend (row_id, request_id, at, day, key_id, caller, session, model, served_by, status, " \
    "input_tokens, output_tokens, measured, cost_usd, cached_tokens, cache_hit) " \
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"  # fmt: skip


def _row(n: int) -> tuple[object, ...]:
    at = 1_700_000_000.5 + n
    return (f"r{n}", f"req{n}", at, 19_675, None, "team-a", None, "gpt", "p/m", 200, 10, 5, 1, 0.25, 0, 0)


async def _round_trip(database: Database) -> None:
    await database.execute_many(_ROW, [_row(n) for n in range(3)])
    rows = await database.fetch(
        "SELECT caller, COUNT(*), SUM(cost_usd) FROM spend WHERE day = ? GROUP BY caller", [19_675]
    )
    assert rows == [("team-a", 3, 0.75)]
    with pytest.raises(LedgerConflict):
        await database.execute_many(_ROW, [_row(1)])
    assert (await database.fetch("SELECT COUNT(*) FROM spend"))[0][0] == 3  # the failed batch wrote nothing


async def test_a_new_sqlite_file_gets_the_tables_and_keeps_rows_across_opens(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/ledger.db"
    database = await open_database(url)
    try:
        await _round_trip(database)
    finally:
        await database.close()
    again = await open_database(url)
    try:
        assert (await again.fetch(f"SELECT version FROM {VERSION_TABLE}")) == [(VERSION,)]
        assert (await again.fetch("SELECT COUNT(*) FROM spend")) == [(3,)]
    finally:
        await again.close()


async def test_memory_ledger_works_and_keeps_nothing() -> None:
    database = await open_database("memory://")
    try:
        await _round_trip(database)
    finally:
        await database.close()
    fresh = await open_database("memory://")
    try:
        assert (await fresh.fetch("SELECT COUNT(*) FROM spend")) == [(0,)]
    finally:
        await fresh.close()


async def test_a_file_that_is_not_a_database_is_refused_naming_its_path(tmp_path: Path) -> None:
    path = tmp_path / "corrupted.db"
    path.write_bytes(b"this is not SQLite " * 100)
    with pytest.raises(LedgerRefused, match=str(path)):
        await open_database(f"sqlite:///{path}")


async def test_a_foreign_sqlite_database_is_refused_naming_its_path_and_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE users (id INTEGER)")
    connection.close()
    with pytest.raises(LedgerRefused, match=f"{path}.*users"):
        await open_database(f"sqlite:///{path}")
    with sqlite3.connect(path) as connection:
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    connection.close()
    assert tables == {"users"}


async def test_a_schema_newer_than_the_router_is_refused_naming_both_versions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/ledger.db"
    await (await open_database(url)).close()
    with sqlite3.connect(tmp_path / "ledger.db") as connection:
        connection.execute(f"UPDATE {VERSION_TABLE} SET version = ?", (VERSION + 1,))
    connection.close()
    with pytest.raises(LedgerRefused, match=f"schema version {VERSION + 1}, newer than this router's {VERSION}"):
        await open_database(url)


async def test_a_directory_that_does_not_exist_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(LedgerRefused, match=str(tmp_path / "missing")):
        await open_database(f"sqlite:///{tmp_path}/missing/ledger.db")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
async def test_a_directory_no_one_can_create_files_in_is_refused_naming_it_even_for_root() -> None:
    # os.access answers yes to root for /proc; creating a file there fails for everyone.
    with pytest.raises(LedgerRefused, match=r"ledger_url: /proc/ledger\.db: the router cannot create a file in /proc"):
        await open_database("sqlite:////proc/ledger.db")


async def test_a_path_whose_parent_is_a_file_is_refused_naming_that_file(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("a file, not a directory")
    with pytest.raises(LedgerRefused, match=f"{tmp_path}/notes.txt is a file, not a directory"):
        await open_database(f"sqlite:///{tmp_path}/notes.txt/ledger.db")
    with pytest.raises(
        LedgerRefused, match=rf"{tmp_path}/notes.txt/deeper does not exist \({tmp_path}/notes.txt is a file\)"
    ):
        await open_database(f"sqlite:///{tmp_path}/notes.txt/deeper/ledger.db")


def _chattr(flag: str, folder: Path) -> bool:
    """``chattr`` on ``folder`` (``+i``: immutable, no new file even for root); whether it took."""
    return subprocess.run(["chattr", flag, str(folder)], capture_output=True, check=False).returncode == 0


async def test_an_existing_ledger_in_a_directory_that_takes_no_new_file_is_refused(tmp_path: Path) -> None:
    # WAL keeps its -wal and -shm files beside the database: the directory must take new files.
    folder = tmp_path / "sealed"
    folder.mkdir()
    await (await open_database(f"sqlite:///{folder}/ledger.db")).close()
    for extra in folder.glob("ledger.db-*"):
        extra.unlink()
    if not _chattr("+i", folder):
        pytest.skip("chattr +i is not available on this file system")
    try:
        with pytest.raises(LedgerRefused, match=f"the router cannot create a file in {folder}"):
            await open_database(f"sqlite:///{folder}/ledger.db")
    finally:
        assert _chattr("-i", folder)
    assert sorted(path.name for path in folder.iterdir()) == ["ledger.db"]  # no probe left behind


async def test_postgresql_gets_the_same_tables_and_statements(postgres_server: PostgresServer) -> None:
    url = postgres_server.new_database()
    database = await open_database(url)
    try:
        assert PG_PASSWORD not in database.shown
        await _round_trip(database)
    finally:
        await database.close()
    again = await open_database(url)  # a second start finds the schema and leaves it be
    try:
        assert (await again.fetch(f"SELECT version FROM {VERSION_TABLE}")) == [(VERSION,)]
    finally:
        await again.close()


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("sqlite://host/file.db", "no host"),
        ("sqlite:///", "needs a file name"),
        ("postgresql://user:Secret#Pass@db:5432/x", "unencoded '#'"),
        ("postgresql://user:Secret123@db:port/x", "port is not a number"),
        ("mysql://user:Secret123@db/x", "'mysql' is not one the router knows"),
    ],
)
def test_a_malformed_ledger_url_is_refused_when_settings_are_built_without_its_password(url: str, said: str) -> None:
    with pytest.raises(ValidationError) as refused:
        RouterSettings(allow_unauthenticated=True, ledger_url=SecretStr(url))
    assert said in str(refused.value)
    assert "Secret" not in str(refused.value)


def test_a_key_in_both_admin_keys_and_api_keys_is_refused() -> None:
    with pytest.raises(ValidationError, match="admin_keys: key #1 is also in api_keys"):
        RouterSettings(api_keys=["k" * 20, "j" * 20], admin_keys=["j" * 20])  # type: ignore[list-item]
    settings = RouterSettings(api_keys=["k" * 20], admin_keys=["a" * 20])  # type: ignore[list-item]
    assert settings.admin_keys is not None


def test_admin_keys_come_from_the_environment_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASGI_ROUTER_ADMIN_KEYS", f"{'a' * 20},{'b' * 20}")
    settings = RouterSettings(allow_unauthenticated=True)
    assert [key.get_secret_value() for key in settings.admin_keys or ()] == ["a" * 20, "b" * 20]


def test_the_default_ledgers_variable_replaces_only_the_default_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    admin = [SecretStr("a" * 20)]
    monkeypatch.setenv(DEFAULT_LEDGER_VARIABLE, "memory://")
    assert effective_ledger_url(None, admin) == "memory://"
    assert effective_ledger_url(SecretStr("sqlite:///mine.db"), admin) == "sqlite:///mine.db"  # a ledger_url wins
    assert effective_ledger_url(None, None) is None  # no admin keys: still no ledger
    assert all(DEFAULT_LEDGER_VARIABLE not in line for line in stray_environment())  # read, not stray
    monkeypatch.setenv(DEFAULT_LEDGER_VARIABLE, "mysql://user:Secret123@db/x")
    with pytest.raises(ValueError, match=f"{DEFAULT_LEDGER_VARIABLE}: ledger_url: scheme 'mysql'") as refused:
        effective_ledger_url(None, admin)
    assert "Secret123" not in str(refused.value)
    monkeypatch.delenv(DEFAULT_LEDGER_VARIABLE)
    assert effective_ledger_url(None, admin) == "sqlite:///asgi_router.sqlite3"
