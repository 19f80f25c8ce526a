"""``python -m demo_app --workers N``: the host app in N worker processes on one listening socket.

The parent process runs the mock upstreams and binds the host app's socket; each worker is
``python -m demo_app.workers`` with that socket passed down as an open file descriptor (as
``uvicorn --workers`` and gunicorn share one), so the kernel spreads connections between them.
Each worker builds its own ``ModelRouter``: its own breakers, rotation and budgets, unless
``--state-url`` names a Redis that they all share (handed down as ``ASGI_ROUTER_STATE_URL``).
Each log line says which worker wrote it, so the sharing shows: ``group/rotate`` keeps
alternating its members while the workers take turns.

A worker prints ``ready`` on its standard output once it serves; SIGTERM or SIGINT stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence

from .app import create_app
from .serving import ServerHandle

__all__ = ["Workers", "main"]

log = logging.getLogger("demo_app")


class Workers:
    """The worker processes of one demo run, started and stopped together."""

    def __init__(
        self, count: int, sock: socket.socket, upstreams: dict[str, str], first_byte_timeout: float, state_url: str
    ) -> None:
        self._count = count
        self._sock = sock
        self._upstreams = upstreams
        self._first_byte_timeout = first_byte_timeout
        self._state_url = state_url
        self.processes: list[asyncio.subprocess.Process] = []

    async def start(self) -> None:
        """Start every worker and return once each says it serves (30 s at most)."""
        self._sock.listen(2048)
        fd = self._sock.fileno()
        # The URL may hold a password: handed down in the environment, never on a command line.
        env = {**os.environ, "ASGI_ROUTER_STATE_URL": self._state_url} if self._state_url else None
        for index in range(1, self._count + 1):
            command = [
                "-m", "demo_app.workers", "--fd", str(fd), "--index", str(index),
                "--upstreams", json.dumps(self._upstreams), "--first-byte-timeout", str(self._first_byte_timeout),
            ]  # fmt: skip
            process = await asyncio.create_subprocess_exec(
                sys.executable, *command, pass_fds=(fd,), stdout=asyncio.subprocess.PIPE, env=env
            )
            self.processes.append(process)
        async with asyncio.timeout(30):
            for process in self.processes:
                assert process.stdout is not None
                if (await process.stdout.readline()).strip() != b"ready":
                    raise RuntimeError("a worker failed to start (see its log above)")

    async def wait(self) -> None:
        """Return when any worker has exited."""
        exits = [asyncio.create_task(process.wait()) for process in self.processes]
        try:
            await asyncio.wait(exits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in exits:
                task.cancel()

    def force_stop(self) -> None:
        """Skip the graceful wait (a second Ctrl-C): SIGKILL every worker still running."""
        for process in self.processes:
            if process.returncode is None:
                process.kill()

    async def stop(self) -> None:
        """SIGTERM each worker, wait for all of them (15 s, then SIGKILL), close the socket."""
        try:
            for process in self.processes:
                if process.returncode is None:
                    process.send_signal(signal.SIGTERM)
            for process in self.processes:
                try:
                    async with asyncio.timeout(15):
                        await process.wait()
                except TimeoutError:
                    process.kill()
                    await process.wait()
        finally:
            self._sock.close()


async def _serve(sock: socket.socket, upstreams: dict[str, str], first_byte_timeout: float) -> None:
    app = create_app(upstreams, first_byte_timeout=first_byte_timeout)  # state_url from the environment
    server = ServerHandle("worker", app, sock, lifespan=True, graceful_shutdown=5)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    os.write(sys.stdout.fileno(), b"ready\n")
    stopping = asyncio.create_task(stop.wait())
    done = asyncio.create_task(server.wait())
    await asyncio.wait({stopping, done}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    done.cancel()
    await server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    """A worker: serve the host app on the inherited socket until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(prog="python -m demo_app.workers")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--upstreams", required=True)
    parser.add_argument("--first-byte-timeout", type=float, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s %(levelname)-7s [worker {args.index}] %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    sock = socket.socket(fileno=args.fd)
    asyncio.run(_serve(sock, json.loads(args.upstreams), args.first_byte_timeout))
    return 0


if __name__ == "__main__":
    sys.exit(main())
