"""A real ``redis-server`` and routers in real uvicorn processes, for the fleet tests.

:class:`RedisServer` runs Debian's ``redis-server`` on a free loopback port, with persistence
off and an ACL user whose password the routers' URL carries (so that a leaked password would
show in their logs); :meth:`RedisServer.kill` is a SIGKILL, :meth:`RedisServer.start` again
brings it back empty on the same port. :class:`RouterProcess` is ``python -m uvicorn
tests.fleet_app:app`` on a free port, configured by a TOML file; its output goes to a log file
the tests read, copied there by a thread that also tells when uvicorn says it is listening (a
start is waited for on that line, not polled).
"""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import IO

import pytest

from .waiting import polled

ROOT = Path(__file__).resolve().parents[1]

REDIS_USER = "fleet"
REDIS_PASSWORD = "Qx7f3a9c1e5b2d4f60pw"
"""The Redis ACL password in every router's ``state_url``: it must never show in a log."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def redis_server_path() -> str:
    """The ``redis-server`` binary; the fleet tests are skipped without one (``.ci/run`` installs it)."""
    path = shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)
    if path is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    return path


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class RedisServer:
    """``redis-server`` on 127.0.0.1 (see the module docstring)."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{REDIS_USER}:{REDIS_PASSWORD}@127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        command = [
            redis_server_path(),
            "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
            "--dir", str(self.workdir), "--user", "default", "off",
            "--user", REDIS_USER, "on", f">{REDIS_PASSWORD}", "~*", "&*", "+@all",
        ]  # fmt: skip
        log = (self.workdir / "redis.log").open("ab")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        process = self.process

        def answering() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"redis-server exited; see {self.workdir / 'redis.log'}")
            return _answers_ping(self.port)

        polled(answering, within=10, every=0.02, what=f"redis-server's start (see {self.workdir / 'redis.log'})")
        return self

    def kill(self) -> None:
        """SIGKILL: the connections drop as they would when a host dies."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        self.kill()


class RouterProcess:
    """A router in its own uvicorn process, configured by the TOML file ``config``."""

    def __init__(self, name: str, config: Path, workdir: Path) -> None:
        self.name = name
        self.config = config
        self.port = free_port()
        self.log_path = workdir / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._listening = threading.Event()
        self._copier: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> RouterProcess:
        command = [
            sys.executable, "-m", "uvicorn", "tests.fleet_app:app", "--host", "127.0.0.1",
            "--port", str(self.port), "--lifespan", "on", "--no-access-log", "--log-level", "info",
        ]  # fmt: skip
        env = {**os.environ, "FLEET_CONFIG": str(self.config)}
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        assert self.process.stdout is not None
        self._listening = threading.Event()
        self._copier = threading.Thread(
            target=self._copy, args=(self.process.stdout, self._listening), name=f"{self.name}-log", daemon=True
        )
        self._copier.start()
        return self

    def _copy(self, output: IO[bytes], listening: threading.Event) -> None:
        """Copy the process's output to its log, line by line, until it exits; ``listening`` is set
        once uvicorn says it is (after the app's start-up), or when the output ends."""
        with output, self.log_path.open("ab") as log:
            for line in output:
                log.write(line)
                log.flush()
                if b"Uvicorn running on" in line:
                    listening.set()
        listening.set()

    def wait_ready(self, timeout: float = 30.0) -> None:
        process = self.process
        assert process is not None
        if not self._listening.wait(timeout):
            raise AssertionError(f"{self.name} did not start within {timeout} s:\n{self.log()}")
        if process.poll() is not None:
            raise RuntimeError(f"{self.name} exited:\n{self.log()}")
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:  # listening: its app answers at once
            connection.request("GET", "/health")
            status = connection.getresponse().status
        finally:
            connection.close()
        assert status == 200, f"{self.name}'s /health answered {status}:\n{self.log()}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self._copier is not None:
            self._copier.join(timeout=10)  # the log is whole once the output has ended


class Fleet:
    """Several :class:`RouterProcess` started together and stopped together."""

    def __init__(self, routers: list[RouterProcess]) -> None:
        self.routers = routers

    def __enter__(self) -> Fleet:
        for router in self.routers:
            router.start()
        try:
            for router in self.routers:
                router.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for router in self.routers:
            router.stop()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
