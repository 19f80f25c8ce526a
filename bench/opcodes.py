"""``python -m bench opcodes``: the served process's Python work per request, by package and function.

Why this exists beside ``python -m bench phases``: the phase table counts the router in process,
over the bench's memory transport, while ``router/floor`` is measured on real servers, where
uvicorn, aiohttp and the host app do their share too. This command serves the floor
(``bench.floor:app``) and the router (``bench.host:app``) each in a uvicorn process of its own
(uvloop, httptools), in front of the bench's upstream, with a per-function opcode counter in
the server, and prints what one request costs there, package by package, then the functions
whose counts differ most between the two.

Method: the server runs under ``sys.settrace`` with ``f_trace_opcodes``, counting every opcode
executed and every entry (a call, or a coroutine resumed) per function. The counter is switched
on by ``SIGUSR1`` only after a warm-up, while ``--requests`` chat requests run (one aiohttp
client, 16 at once, as the load part's c=16), and ``SIGUSR2`` switches it off and writes the
counts as JSON; nothing else runs in the server meanwhile. Opcodes are not instructions (a call
or a C function such as the JSON scanner is one opcode); they say where the interpreter's work
goes, which callgrind cannot (CPython 3.11 shows it only its own C functions). The counter
slows a server by tens of times, so a request's wall time is long and the router's disconnect
listener (started 10 ms into a request) runs on every request here, which at full speed it
rarely does: about 160 of the router's opcodes per request.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import importlib.util
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

from .procs import ROOT, Server, refused_origin

__all__ = ["by_function", "by_package", "main"]

#: The two servers compared: (name, target).
SERVERS = (("floor", "bench.floor:app"), ("router", "bench.host:app"))
#: Packages shown by name; every other file (the standard library, generated code) is "other".
PACKAGES = ("aiohttp", "uvicorn", "starlette", "asgi_router", "bench")

#: Per function, ``(file, name)``: opcodes executed and entries, summed over the requests.
Counts = dict[tuple[str, str], tuple[int, int]]


@functools.cache
def _package_dirs() -> tuple[tuple[str, Path], ...]:
    """Each of :data:`PACKAGES` with the directory it is imported from, found through the import
    system (a folder's name says nothing: a checkout named ``asgi_router`` holds a venv whose
    site-packages are no part of the router)."""
    found: list[tuple[str, Path]] = []
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            found.extend((name, Path(where).resolve()) for where in spec.submodule_search_locations)
    return tuple(found)


@functools.cache
def _located(filename: str) -> tuple[str, str]:
    """The package a file belongs to (the one of :data:`PACKAGES` whose directory holds it, or
    "other") and its name from that package on (``asgi_router/attempts/call.py``)."""
    path = Path(filename).resolve()
    for name, directory in _package_dirs():
        if path.is_relative_to(directory):
            return name, "/".join((name, *path.relative_to(directory).parts))
    return "other", filename


def by_package(counts: Counts, requests: int) -> dict[str, float]:
    """Opcodes per request for each of :data:`PACKAGES` and "other"."""
    totals: dict[str, float] = dict.fromkeys((*PACKAGES, "other"), 0.0)
    for (filename, _), (ops, _) in counts.items():
        totals[_located(filename)[0]] += ops / requests
    return totals


def by_function(counts: Counts, requests: int) -> dict[str, tuple[float, float]]:
    """Opcodes and entries per request for each function, keyed ``file:name``."""
    return {
        f"{_located(filename)[1]}:{name}": (ops / requests, calls / requests)
        for (filename, name), (ops, calls) in counts.items()
    }


class _Counter:
    """The server side: counts opcodes and entries per function while switched on."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.on = False
        self.ops: collections.Counter[tuple[str, str]] = collections.Counter()
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()

    def start(self, *_: object) -> None:
        self.ops.clear()
        self.calls.clear()
        self.on = True
        _started(self.out).touch()  # the parent sends the counted requests only once this exists

    def stop(self, *_: object) -> None:
        self.on = False
        # Every function counted was entered while counting: its opcodes are traced from entry.
        rows = [[file, name, self.ops[(file, name)], calls] for (file, name), calls in self.calls.items()]
        partial = self.out.with_suffix(".part")
        partial.write_text(json.dumps(rows))
        partial.rename(self.out)  # the parent waits for the whole file

    def _local(self, frame: FrameType, event: str, arg: object) -> Any:
        if event == "opcode":
            code = frame.f_code
            self.ops[(code.co_filename, code.co_name)] += 1
        return self._local

    def entered(self, frame: FrameType, event: str, arg: object) -> Any:
        if not self.on:
            return None
        frame.f_trace_opcodes = True
        code = frame.f_code
        self.calls[(code.co_filename, code.co_name)] += 1
        return self._local


def _serve(target: str, port: int, out: Path) -> None:
    """Serve ``target`` as the load part does (uvloop, httptools, one worker), counted."""
    import uvicorn
    import uvloop

    counter = _Counter(out)
    signal.signal(signal.SIGUSR1, counter.start)
    signal.signal(signal.SIGUSR2, counter.stop)
    sys.settrace(counter.entered)
    config = uvicorn.Config(
        target, host="127.0.0.1", port=port, http="httptools", access_log=False, log_level="warning"
    )
    uvloop.run(uvicorn.Server(config).serve())


async def _drive(origin: str, requests: int, stream: bool) -> None:
    """``requests`` chat requests to ``group/bench``, 16 at once, each read to its end."""
    import aiohttp

    from .micro import chat_body  # here, not at the top: the counted server need not import the router

    body = chat_body(stream)  # the load part's body, byte for byte
    headers = {"content-type": "application/json"}
    left = requests
    async with aiohttp.ClientSession() as session:

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                async with session.post(f"{origin}/v1/chat/completions", data=body, headers=headers) as response:
                    await response.read()
                    if response.status != 200:
                        raise RuntimeError(f"{origin} answered {response.status}")

        await asyncio.gather(*(worker() for _ in range(16)))


def _started(out: Path) -> Path:
    """The file the server creates once it counts (its signal handler has run)."""
    return out.with_suffix(".started")


def _wait_for(path: Path, what: str, within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not path.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {within:.0f} s")
        time.sleep(0.01)


def measure(name: str, target: str, upstream: str, requests: int, stream: bool, warmup: int = 200) -> Counts:
    """Counts for ``requests`` requests to ``target`` (server ``name``) in front of ``upstream``."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "counts.json"
        env = {"BENCH_UPSTREAM": upstream, "BENCH_REFUSED": refused_origin()}
        command = ["-m", "bench.opcodes", "--serve", target, "{port}", str(out)]
        with Server(name, target, env, command=command, cwd=ROOT) as server:
            asyncio.run(_drive(server.origin, warmup, stream))
            assert server.process is not None
            server.process.send_signal(signal.SIGUSR1)
            _wait_for(_started(out), f"counting in {name}")
            asyncio.run(_drive(server.origin, requests, stream))
            server.process.send_signal(signal.SIGUSR2)
            _wait_for(out, f"counts from {name}")
            rows = json.loads(out.read_text())
    return {(file, function): (ops, calls) for file, function, ops, calls in rows}


def _tables(kind: str, counts: dict[str, Counts], requests: int, top: int) -> str:
    names = [name for name, _ in SERVERS]
    packages = {name: by_package(counts[name], requests) for name in names}
    lines = [
        f"### {kind}: opcodes per request",
        "",
        "| package | " + " | ".join(names) + " |",
        "| --- |" + " ---: |" * len(names),
    ]
    for package in (*PACKAGES, "other"):
        if any(packages[name][package] for name in names):
            lines.append(f"| {package} | " + " | ".join(f"{packages[name][package]:,.0f}" for name in names) + " |")
    lines.append("| total | " + " | ".join(f"{sum(packages[name].values()):,.0f}" for name in names) + " |")
    floor, router = (by_function(counts[name], requests) for name in names)
    differing = sorted(
        set(floor) | set(router), key=lambda key: -abs(router.get(key, (0, 0))[0] - floor.get(key, (0, 0))[0])
    )
    lines += ["", f"The {top} functions whose opcodes differ most (per request; entries in brackets):", ""]
    lines += ["| function | floor | router |", "| --- | ---: | ---: |"]
    for key in differing[:top]:
        (floor_ops, floor_calls), (router_ops, router_calls) = floor.get(key, (0, 0)), router.get(key, (0, 0))
        lines.append(f"| `{key}` | {floor_ops:,.0f} ({floor_calls:.1f}) | {router_ops:,.0f} ({router_calls:.1f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench opcodes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="requests counted per server and kind")
    parser.add_argument("--kinds", default="json,sse", help="json, sse (a 20-event stream), or both")
    parser.add_argument("--top", type=int, default=40, help="functions listed per kind")
    args = parser.parse_args(argv)
    with Server("upstream", "bench.upstream:app") as upstream:
        for kind in (kind for kind in args.kinds.split(",") if kind):
            counts = {
                name: measure(name, target, upstream.origin, args.requests, kind == "sse") for name, target in SERVERS
            }
            print(_tables(kind, counts, args.requests, args.top) + "\n")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]))
    else:
        sys.exit(main())
