"""The installed ``asgi-router`` console script, run as a process: a one-off command, or a server."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
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


def _kill_all(process: subprocess.Popen[str]) -> str:
    """Kill the server and every process it started (uvicorn's workers, which hold its output
    open: reading to its end would wait for them for ever); what it printed."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    try:
        return process.communicate(timeout=20)[0]
    except subprocess.TimeoutExpired:  # pragma: no cover - something outside the group holds the pipe
        return "(its output could not be read)"


@contextmanager
def serving(
    config: Path, *args: str, env: dict[str, str] | None = None, start_timeout: float = 30
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``asgi-router serve config`` on a free port until the block ends (then Ctrl-C); several
    workers on a busy machine may need a longer ``start_timeout``. The server runs in a process
    group of its own, so that a server that does not stop is killed with its workers."""
    port = free_port()
    process = subprocess.Popen(
        [COMMAND, "serve", str(config), "--port", str(port), "--log-level", "warning", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def answering() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"the server exited:\n{_kill_all(process)}")
            try:
                httpx2.get(f"{url}/v1/models", timeout=1)
            except httpx2.TransportError:
                return False
            return True

        try:
            polled(answering, within=start_timeout, every=0.1, what="the server's start")
        except AssertionError as failed:
            if process.poll() is None:
                raise AssertionError(f"the server did not start:\n{_kill_all(process)}") from failed
            raise
        yield url, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - a hung server fails the test
                _kill_all(process)
                raise AssertionError("the server did not stop on Ctrl-C") from None
        else:
            _kill_all(process)
