"""A real PostgreSQL server for the ledger's tests: Debian's binaries, a fresh cluster per session.

:class:`PostgresServer` runs ``initdb`` in a temporary directory and ``pg_ctl start`` on a free
127.0.0.1 port. ``initdb`` refuses to run as root, so as root (CI, this machine) the cluster
belongs to the ``postgres`` user (Debian's package creates it) and its commands run as that
user. Without the binaries the tests that need it are skipped, except under ``CI=true``, where
``.ci/run`` installs them and a missing server must fail rather than pass unnoticed.
:meth:`PostgresServer.stop` and :meth:`PostgresServer.start` again keep the data: the ledger's
"database away, then back" tests use them.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

from .fleet import free_port

#: The password of the ledger's role: it must never show in a log.
PG_PASSWORD = "Pg4e8c2a7f1b9d3x5wpw"
PG_USER = "ledger"


def postgres_bin() -> Path:
    """The directory of ``initdb`` and ``pg_ctl`` (the newest Debian version installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    if not found:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL's binaries are missing under /usr/lib/postgresql/*/bin (.ci/run installs them)")
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    return Path(found[-1]).parent


class PostgresServer:
    """A PostgreSQL cluster on 127.0.0.1 (see the module docstring)."""

    def __init__(self, workdir: Path) -> None:
        self.bin = postgres_bin()
        self.workdir = workdir
        self.data = workdir / "data"
        self.port = free_port()
        self.as_user: str | None = "postgres" if os.geteuid() == 0 else None
        self._databases = 0

    def _run(self, *command: str) -> None:
        argv = [str(self.bin / command[0]), *command[1:]]
        if self.as_user is not None:
            user = pwd.getpwnam(self.as_user)
            kwargs: dict[str, object] = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        else:
            kwargs = {}
        subprocess.run(argv, check=True, capture_output=True, timeout=120, cwd=self.workdir, **kwargs)  # type: ignore[call-overload]

    def init(self) -> PostgresServer:
        if self.as_user is not None:
            shutil.chown(self.workdir, self.as_user, self.as_user)
        password_file = self.workdir / "password"
        password_file.write_text(PG_PASSWORD)
        if self.as_user is not None:
            shutil.chown(password_file, self.as_user, self.as_user)
        self._run(
            "initdb", "-D", str(self.data), "-U", PG_USER, "--pwfile", str(password_file),
            "--auth", "scram-sha-256", "--encoding", "UTF8", "--no-sync",
        )  # fmt: skip
        return self.start()

    def start(self) -> PostgresServer:
        options = f"-p {self.port} -k {self.workdir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.workdir / "pg.log"), "-w", "start")
        return self

    def stop(self) -> None:
        """Stop it at once (``immediate``: connections drop as when the host goes away)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """The URL of a database of its own (one per test: tests share the server, not tables)."""
        self._databases += 1
        name = f"ledger_{self._databases}"
        self._psql(f"CREATE DATABASE {name}")
        return self.url(name)

    def _psql(self, sql: str) -> None:
        env = dict(os.environ, PGPASSWORD=PG_PASSWORD)
        command = [str(self.bin / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", PG_USER, "-d", "postgres"]
        subprocess.run([*command, "-c", sql], check=True, capture_output=True, timeout=60, env=env)
