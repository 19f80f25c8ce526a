"""The installed ``asgi-router`` console script, run as a process: a one-off command, or a server."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

from .waiting import polled

__all__ = ["COMMAND", "free_port", "serving"]

#: The console script ``pip install`` put next to this interpreter.
COMMAND = str(Path(sys.executable).with_name("asgi-router"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Output:
    """A server's output, read to its end by a thread (so that it never waits on a full pipe),
    telling when uvicorn says an app's start-up is complete (the first worker's, with several)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.started = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(process,), name="server-output", daemon=True)
        self._thread.start()

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        with process.stdout as output:
            for line in output:
                self.lines.append(line)
                if "Application startup complete." in line:
                    self.started.set()
        self.started.set()

    def whole(self, timeout: float = 20) -> str:
        """Everything it printed, once its output has ended."""
        self._thread.join(timeout)
        return "".join(self.lines) if not self._thread.is_alive() else "(its output could not be read)"


def _kill_all(process: subprocess.Popen[str], output: _Output) -> str:
    """Kill the server and every process it started (uvicorn's workers, which hold its output
    open: reading to its end would wait for them for ever); what it printed."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    return output.whole()


@contextmanager
def serving(
    config: Path, *args: str, env: dict[str, str] | None = None, start_timeout: float = 30
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``asgi-router serve config`` on a free port until the block ends (then Ctrl-C); several
    workers on a busy machine may need a longer ``start_timeout``. The server runs in a process
    group of its own, so that a server that does not stop is killed with its workers. Its start
    is waited for on uvicorn's line saying the app's start-up is complete (printed at the ``info``
    level), not polled: the first request after it is answered, or a moment later."""
    port = free_port()
    process = subprocess.Popen(
        [COMMAND, "serve", str(config), "--port", str(port), "--log-level", "info", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    output = _Output(process)
    url = f"http://127.0.0.1:{port}"
    try:
        if not output.started.wait(start_timeout) or process.poll() is not None:
            raise AssertionError(f"the server did not start:\n{_kill_all(process, output)}")

        def answering() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"the server exited:\n{_kill_all(process, output)}")
            try:
                httpx2.get(f"{url}/v1/models", timeout=start_timeout)
            except httpx2.TransportError:
                return False
            return True

        # its app started, it listens a moment later (a worker listens once its start-up is over)
        polled(answering, within=10, every=0.01, what="the server's first answer")
        yield url, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - a hung server fails the test
                _kill_all(process, output)
                raise AssertionError("the server did not stop on Ctrl-C") from None
            output.whole()
        else:
            _kill_all(process, output)
