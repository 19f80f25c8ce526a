"""The installed ``asgi-router`` console script, run as a process: a one-off command, or a server."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2

__all__ = ["COMMAND", "free_port", "serving"]

#: The console script ``pip install`` put next to this interpreter.
COMMAND = str(Path(sys.executable).with_name("asgi-router"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serving(
    config: Path, *args: str, env: dict[str, str] | None = None, start_timeout: float = 30
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``asgi-router serve config`` on a free port until the block ends (then Ctrl-C); several
    workers on a busy machine may need a longer ``start_timeout``."""
    port = free_port()
    process = subprocess.Popen(
        [COMMAND, "serve", str(config), "--port", str(port), "--log-level", "warning", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            assert process.poll() is None, process.communicate()[0]
            try:
                httpx2.get(f"{url}/v1/models", timeout=1)
                break
            except httpx2.TransportError:
                if time.monotonic() > deadline:
                    process.kill()
                    raise AssertionError(f"the server did not start:\n{process.communicate()[0]}") from None
                time.sleep(0.1)
        yield url, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.communicate(timeout=20)
            except subprocess.TimeoutExpired:  # pragma: no cover - a hung server fails the test
                process.kill()
                process.communicate()
        else:
            process.communicate()
