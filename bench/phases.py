"""``python -m bench phases``: where one request's instructions and allocations go, phase by phase.

The router runs a chat request as named phases (admit, read, plan, attempt, answer, record;
``asgi_router/middleware.py``); inside *attempt*, each candidate is prepared (admission and its
body, then the upstream headers), called up to the commit point and settled; inside *answer*,
the winner's bytes are sent or relayed. This command counts, for each of those regions, the
instructions and the allocations one request spends there, over the bench's in-process router
(``bench/micro.py``: the memory transport, no sockets), for a JSON request, a 20-chunk stream
and a native Responses API stream of 20 events (``responses``, on ``/v1/responses``).

Method: CPython 3.11 shows callgrind only its C functions (every Python function runs inside the
same interpreter loop), so the regions are marked from outside. The bench owns its router: for
one region at a time it wraps the functions that implement that region (an instance's method,
or a name in the module that calls it) in a wrapper that switches callgrind's collection on at
entry and off at exit, through callgrind's own client requests (``CALLGRIND_TOGGLE_COLLECT``,
``CALLGRIND_DUMP_STATS_AT``; issued by a few bytes of x86-64 machine code called through ctypes,
so no compiler is needed). Under ``--collect-atstart=no`` only those windows are counted:

* instructions: one window per region entry over ``--requests`` requests after a warm-up, the
  total divided by the requests;
* allocations: calls into CPython's object allocator (``_PyObject_Malloc`` and
  ``_PyObject_Calloc``: every object not taken from a free list, and small buffers such as a
  dict's table) over ``--samples`` requests, each window between two dumps with collection on
  throughout: callgrind counts calls even while it collects nothing, and resets a call's count
  only when a dump writes it, so only a window opened by a dump is exact (and three requests'
  dumps are thrown away first, to clear the counts left from when nothing was collected).

A wrapper costs instructions of its own (the ctypes call, one more Python frame); the same
wrapper around a function that does nothing is counted on every request (sync and async alike)
and subtracted once per entry. Each region is wrapped alone, so nothing nested in it pays for a
wrapper. The windows are exact only if the router does not yield to the event loop inside them:
over the memory transport it never should, and the command checks it and says so when it does.
Without valgrind (or off x86-64 Linux) it says so and prints what Python itself can tell: the
blocks each region leaves allocated (``sys.getallocatedblocks``), a net figure, not a count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asgi_router.attempts import steps
from asgi_router.responses import answer as answer_module
from asgi_router.transports.request_headers import UpstreamHead

from .callgrind import Callgrind, read_dumps
from .micro import bench_router
from .procs import ROOT

__all__ = ["REGIONS", "main", "rows"]

#: kind -> (a stream?, a Responses API request?, the key presented): ``responses`` is a native
#: Responses stream of as many events as ``sse20``'s chat stream, beside it; ``json-config-key``
#: and ``json-virtual-key`` are the JSON request with inbound auth and a ledger, presenting a
#: config key or a virtual key (``bench/micro.py``'s ``bench_router``), the one difference.
KINDS: dict[str, tuple[bool, bool, str | None]] = {
    "json": (False, False, None),
    "sse20": (True, False, None),
    "responses": (True, True, None),
    "json-config-key": (False, False, "config"),
    "json-virtual-key": (False, False, "virtual"),
}


@dataclass(frozen=True)
class Region:
    """A part of the request: the functions that implement it, found from the bench's harness."""

    name: str
    label: str
    parent: str
    is_async: bool
    targets: Callable[[Any], list[tuple[Any, str]]]


REGIONS: tuple[Region, ...] = (
    Region("request", "the router's call", "", True, lambda h: [(h, "app")]),
    Region("admit", "admit", "request", True, lambda h: [(h.router, "_admit")]),
    Region("read", "read", "request", True, lambda h: [(h.router, "_read")]),
    Region("plan", "plan", "request", True, lambda h: [(h.router, "_plan")]),
    Region("attempt", "attempt", "request", True, lambda h: [(h.router._loop, "run")]),
    Region(
        "prepare",
        "attempt > prepare: admission, body",
        "attempt",
        False,
        lambda h: [(steps.RequestAttempts, "prepare")],
    ),
    Region(
        "headers",
        "attempt > prepare: upstream headers",
        "attempt",
        False,
        lambda h: [(UpstreamHead, "build")],
    ),
    Region("call", "attempt > call, to the commit point", "attempt", True, lambda h: [(steps, "call")]),
    Region(
        "transport",
        "attempt > call > the bench's memory transport",
        "call",
        True,
        lambda h: [(h.router.transport, "send")],
    ),
    Region(
        "commit",
        "attempt > commit: settle, decide",
        "attempt",
        False,
        lambda h: [(steps.RequestAttempts, "settle"), (steps.RequestAttempts, "outcome")],
    ),
    Region("answer", "answer", "request", True, lambda h: [(h.router, "_answer")]),
    Region(
        "relay",
        "answer > relay (or send whole)",
        "answer",
        True,
        lambda h: [(answer_module, "relay_stream"), (answer_module, "send_whole")],
    ),
    Region("record", "record", "request", False, lambda h: [(h.router, "_record")]),
    Region("turn", "the event loop's turn after the response", "", True, lambda h: [(h, "turn")]),
)
_CALIBRATION = (
    Region("calibrate-sync", "", "", False, lambda h: [(h, "nothing_sync")]),
    Region("calibrate-async", "", "", True, lambda h: [(h, "nothing_async")]),
)


class _Harness:
    """What the driver calls per request; its attributes are what the outer regions wrap."""

    def __init__(self, router: Any) -> None:
        self.router = router
        self.app: Any = router
        self.turn: Any = asyncio.sleep

    def nothing_sync(self) -> None:
        pass

    async def nothing_async(self) -> None:
        pass


def _wrap(function: Any, is_async: bool, enter: Callable[[], None], leave: Callable[[], None]) -> Any:
    if is_async:

        async def region_async(*args: Any, **kwargs: Any) -> Any:
            enter()
            try:
                return await function(*args, **kwargs)
            finally:
                leave()

        return region_async

    def region(*args: Any, **kwargs: Any) -> Any:
        enter()
        try:
            return function(*args, **kwargs)
        finally:
            leave()

    return region


def _install(
    region: Region, harness: _Harness, enter: Callable[[], None], leave: Callable[[], None]
) -> list[tuple[Any, str, Any]]:
    """Wrap ``region``'s functions; what to put back (the owner's own attribute, or ``None``
    where it was found on a class: an instance's method, deleted to undo)."""
    kept: list[tuple[Any, str, Any]] = []
    for owner, attribute in region.targets(harness):
        kept.append((owner, attribute, vars(owner).get(attribute)))
        setattr(owner, attribute, _wrap(getattr(owner, attribute), region.is_async, enter, leave))
    return kept


def _uninstall(kept: list[tuple[Any, str, Any]]) -> None:
    for owner, attribute, own in reversed(kept):
        if own is None:
            delattr(owner, attribute)
        else:
            setattr(owner, attribute, own)


class _Window:
    """The hooks a region's wrapper calls at entry and exit, for one mode: ``instr`` switches
    collection on and off; ``alloc`` runs with collection on and dumps at entry (discarded) and
    at exit: callgrind counts calls even while it collects nothing, and resets a call's count
    only when a dump writes it; ``net`` counts blocks left allocated."""

    def __init__(self, mode: str, callgrind: Callgrind | None, name: str) -> None:
        self.mode, self.callgrind, self.name = mode, callgrind, name
        self.entered = self.net = 0
        self._opened: list[int] = []

    def hooks(self) -> tuple[Callable[[], None], Callable[[], None]]:
        callgrind = self.callgrind
        if callgrind is None:
            return self._enter_net, self._leave_net
        toggle, dump = callgrind.toggle, callgrind.dump
        if self.mode == "instr":

            def enter() -> None:
                self.entered += 1
                toggle()

            return enter, toggle

        def enter_fresh() -> None:
            self.entered += 1
            dump("discard")

        def leave() -> None:
            dump(self.name)

        return enter_fresh, leave

    def _enter_net(self) -> None:
        self.entered += 1
        self._opened.append(sys.getallocatedblocks())

    def _leave_net(self) -> None:
        self.net += sys.getallocatedblocks() - self._opened.pop()


async def _drive(kind: str, requests: int, samples: int, callgrind: Callgrind | None) -> dict[str, Any]:
    """Each region in turn: instructions and allocations under callgrind, else net blocks; how
    many times each region was entered, and whether the router ever yielded to the loop."""
    stream, responses, key = KINDS[kind]
    router, request = bench_router(stream, responses=responses, key=key)
    harness = _Harness(router)

    async def one() -> None:
        await request(harness.app)
        await harness.turn(0)
        harness.nothing_sync()
        await harness.nothing_async()

    for _ in range(500):
        await one()
    loop = asyncio.get_running_loop()
    ran: list[bool] = []
    for _ in range(20):
        handle = loop.call_soon(ran.append, True)
        await request(router)
        handle.cancel()
        await asyncio.sleep(0)
    entries: dict[str, dict[str, int]] = {}
    net: dict[str, int] = {}
    for region in REGIONS + _CALIBRATION:
        counts = entries[region.name] = {}
        for mode in ("instr", "alloc") if callgrind is not None else ("net",):
            window = _Window(mode, callgrind, f"{kind}/alloc:{region.name}")
            enter, leave = window.hooks()
            kept = _install(region, harness, enter, leave)
            try:
                if mode == "instr":
                    assert callgrind is not None
                    for _ in range(20):
                        await one()
                    callgrind.dump("discard")
                    window.entered = 0
                if mode == "alloc":
                    assert callgrind is not None
                    callgrind.toggle()  # collect throughout: every call arc is then reset by a dump
                    name, window.name = window.name, "discard"
                    for _ in range(3):  # counts of calls made while nothing was collected: dumped away
                        await one()
                    window.name, window.entered = name, 0
                    for _ in range(samples):
                        await one()
                    callgrind.toggle()
                else:
                    for _ in range(requests):
                        await one()
                if mode == "instr":
                    assert callgrind is not None
                    callgrind.dump(f"{kind}/instr:{region.name}")
            finally:
                _uninstall(kept)
            counts[mode] = window.entered
            if mode == "net":
                net[region.name] = window.net
    return {"entries": entries, "net": net, "suspended": bool(ran), "requests": requests, "samples": samples}


def _measure(
    kinds: list[str], requests: int, samples: int, valgrind: str | None
) -> dict[str, dict[str, dict[str, float]]]:
    """Per kind, per region, per request: instructions and allocations (valgrind), else net
    blocks. One process measures every kind: under valgrind, its imports take most of the time."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    command = [sys.executable, "-m", "bench.phases", "--child", ",".join(kinds), str(requests), str(samples)]
    with tempfile.TemporaryDirectory(prefix="bench-phases-") as tmp:
        if valgrind is not None:
            options = ["--tool=callgrind", "--collect-atstart=no", "--compress-strings=no", "--dump-line=no"]
            command = [valgrind, *options, f"--callgrind-out-file={tmp}/cg.out", *command]
            env["BENCH_PHASES_OUT"] = f"{tmp}/cg.out"
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
        children = json.loads(done.stdout.strip().splitlines()[-1])
        dumps = read_dumps(Path(tmp)) if valgrind is not None else {}
    results: dict[str, dict[str, dict[str, float]]] = {}
    for kind, child in children.items():
        missed = [name for name, modes in child["entries"].items() if 0 in modes.values()]
        if missed:  # a wrapped name the router no longer calls: the table would be wrong
            raise RuntimeError(f"{kind}: never entered {', '.join(missed)}: see REGIONS in bench/phases.py")
        if child["suspended"]:
            print(f"warning ({kind}): the router yielded to the event loop within a request", file=sys.stderr)
        if valgrind is None:
            results[kind] = {name: {"net": net / requests} for name, net in child["net"].items()}
            continue
        results[kind] = _per_request(kind, child["entries"], dumps, requests, samples)
    return results


def _per_request(
    kind: str, entries: dict[str, dict[str, int]], dumps: dict[str, dict[str, int]], requests: int, samples: int
) -> dict[str, dict[str, float]]:
    """Each region's count per request, less its wrappers' own (the calibration's, per entry)."""
    figures: dict[str, dict[str, float]] = {}
    for mode, field, count in (("instr", "instructions", requests), ("alloc", "allocations", samples)):

        def counted(name: str, mode: str = mode, field: str = field) -> float:
            return dumps.get(f"{kind}/{mode}:{name}", {}).get(field, 0)

        for region in REGIONS:
            calibration = "calibrate-async" if region.is_async else "calibrate-sync"
            overhead = counted(calibration) / max(1, entries[calibration][mode])
            figures.setdefault(region.name, {})[field] = (
                counted(region.name) - overhead * entries[region.name][mode]
            ) / count
    return figures


def rows(figures: dict[str, dict[str, float]]) -> list[tuple[str, dict[str, float]]]:
    """The table's rows in the request's order: each region, the rest of each region that has
    parts, what the router's call does outside its phases, and the total."""

    def rest(parent: str) -> dict[str, float]:
        parts = [r.name for r in REGIONS if r.parent == parent]
        return {k: v - sum(figures[p][k] for p in parts) for k, v in figures[parent].items()}

    table: list[tuple[str, dict[str, float]]] = []
    for region in REGIONS:
        if region.name == "turn":
            table.append(("outside the phases: dispatch, context, listener", rest("request")))
        if region.name != "request":
            table.append((region.label, figures[region.name]))
        if region.name == "commit":
            table.append(("attempt > the rest: the loop's own work", rest("attempt")))
        elif region.name == "relay":
            table.append(("answer > the rest: headers, tokens, event", rest("answer")))
    table.append(("total", {k: v + figures["turn"][k] for k, v in figures["request"].items()}))
    return table


def _table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    """A Markdown table: per kind, instructions, share of the total and allocations per request
    (net blocks left allocated, without valgrind)."""
    kinds = list(results)
    counted = "instructions" in next(iter(results.values()))["request"]
    header = ["phase"]
    for kind in kinds:
        header += [f"{kind} instructions", "share", "allocations"] if counted else [f"{kind} net blocks"]
    lines = ["| " + " | ".join(header) + " |", "| --- |" + " ---: |" * (len(header) - 1)]
    tables = {kind: rows(figures) for kind, figures in results.items()}
    for index, (label, _) in enumerate(tables[kinds[0]]):
        cells = [label]
        for kind in kinds:
            values = tables[kind][index][1]
            if counted:
                total = tables[kind][-1][1]["instructions"]
                cells += [
                    f"{values['instructions'] / 1000:.1f}k",
                    f"{100 * values['instructions'] / total:.1f}%",
                    f"{values['allocations']:.1f}",
                ]
            else:
                cells.append(f"{values['net']:+.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench phases", description=__doc__)
    parser.add_argument("--requests", type=int, default=300, help="requests counted per region (default 300)")
    parser.add_argument("--samples", type=int, default=10, help="requests whose allocations are counted (default 10)")
    parser.add_argument(
        "--kinds",
        default="json,sse20,responses",
        help="json, sse20, responses, json-config-key, json-virtual-key, comma-separated (default the first three)",
    )
    parser.add_argument("--no-valgrind", action="store_true", help="net blocks only, even where valgrind is present")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    return parser.parse_args(argv)


def _valgrind(refused: bool) -> str | None:
    """valgrind's path, or ``None`` (with the reason said) when instructions cannot be counted."""
    if refused:
        return None
    found = shutil.which("valgrind")
    if found is None:
        print("valgrind not found (Debian: apt-get install valgrind): net blocks only", file=sys.stderr)
    elif sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        print("callgrind's client requests are issued as x86-64 code: net blocks only", file=sys.stderr)
        return None
    return found


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    valgrind = _valgrind(args.no_valgrind)
    kinds = [kind for kind in args.kinds.split(",") if kind]
    results = _measure(kinds, args.requests, args.samples, valgrind)
    print(_table(results))
    if args.json is not None:
        args.json.write_text(
            json.dumps({"kinds": results, "requests": args.requests, "samples": args.samples}, indent=2)
        )
    return 0


def _child(kinds: str, requests: int, samples: int) -> None:
    """Measure each kind in this process (under valgrind, when it was started so) and print
    what the parent needs on one line of JSON."""
    callgrind: Callgrind | None = Callgrind()
    if callgrind is not None and not callgrind.running:
        callgrind = None
    print(json.dumps({kind: asyncio.run(_drive(kind, requests, samples, callgrind)) for kind in kinds.split(",")}))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(main())
