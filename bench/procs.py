"""Start the servers under test as separate processes, wait until they answer, sample them.

Each server is ``python -m uvicorn MODULE:app`` with uvloop and httptools and one worker (or,
for a program that serves itself such as ``python -m demo_app``, that command), on a free
127.0.0.1 port, with its output in ``bench/results/<name>.log``. Memory is read from
``/proc/<pid>/status`` (``VmRSS``), the resident set the kernel charges the process.
"""

from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

__all__ = ["ROOT", "Server", "cpu_seconds", "free_port", "refused_origin", "rss_kib"]

#: The repository root: servers run from here so that ``bench`` and ``asgi_router`` import.
ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def refused_origin() -> str:
    """An origin on which nothing listens: connections to it are refused at once."""
    return f"http://127.0.0.1:{free_port()}"


def rss_kib(pid: int) -> int:
    """The process's resident set size in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the process has used so far, from ``/proc/<pid>/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _answers(port: int, path: str) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
    try:
        connection.request("GET", path)
        connection.getresponse().read()
        return True  # any HTTP answer (even a 404) means the server is serving
    except OSError:
        return False
    finally:
        connection.close()


class Server:
    """One uvicorn process serving ``target`` (``module:attribute``) until :meth:`stop`.

    ``command`` replaces uvicorn: the arguments after ``python``, with ``{port}`` standing for
    the port to listen on. ``cwd`` runs it from another checkout of the project (the code it
    imports is that checkout's), for a before/after comparison in one run.
    """

    def __init__(
        self,
        name: str,
        target: str,
        env: dict[str, str] | None = None,
        logs: Path | None = None,
        command: list[str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.target = target
        self.command = command
        #: Where the server runs (and so which checkout's code it imports): this one by default.
        self.cwd = cwd or ROOT
        self.port = free_port()
        self.env = {**os.environ, **(env or {})}
        self.logs = logs or ROOT / "bench" / "results"
        self.process: subprocess.Popen[bytes] | None = None
        #: Seconds from spawning the process to its first HTTP answer.
        self.ready_after = 0.0

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, ready_path: str = "/health", timeout: float = 20.0) -> Server:
        self.logs.mkdir(parents=True, exist_ok=True)
        if self.command is not None:
            command = [sys.executable, *(arg.replace("{port}", str(self.port)) for arg in self.command)]
        else:
            command = [
            sys.executable, "-m", "uvicorn", self.target,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--loop", "uvloop", "--http", "httptools", "--workers", "1",
            "--no-access-log", "--log-level", "warning", "--timeout-keep-alive", "30",
            ]  # fmt: skip
        log = (self.logs / f"{self.name}.log").open("wb")
        started = time.perf_counter()
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=self.env, cwd=self.cwd)
        log.close()
        deadline = started + timeout
        while not _answers(self.port, ready_path):
            if self.process.poll() is not None or time.perf_counter() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not start; see {self.logs / (self.name + '.log')}")
            time.sleep(0.01)
        self.ready_after = time.perf_counter() - started
        return self

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
