"""``python -m bench``: run every scenario and write ``bench/results.md`` and ``bench/results.json``.

Needs the ``bench`` extra (``pip install -e ".[bench]"``) and ``wrk`` (Debian's package). If
wrk is missing the run stops and says how to install it; ``--install-wrk`` installs it with
apt-get, which is also done unasked when running as root under ``CI``. A full run takes about
four minutes on 2 cores; ``--quick`` is a smoke run of a few seconds per part.
``python -m bench phases`` instead prints where one request's instructions and allocations go,
phase by phase (``bench/phases.py``; valgrind's callgrind counts them); ``python -m bench opcodes``
the Python work per request of the floor and the router served by uvicorn, by package and
function (``bench/opcodes.py``). ``python -m bench streams``
runs only the "Open slow streams" part (RSS per open idle stream; ``--streams N``, ``--targets``,
``--rounds``: each round a fresh process per target; ``--baseline DIR``: another checkout
measured beside it) and prints its table. ``python -m bench ledger`` prints the ledger's
background writer's CPU per 10,000 spend rows (``bench/ledger_writer.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

from . import fleet, opcodes, phases, report, scenarios, wrk
from .micro import micro, router_in_process
from .procs import ROOT

__all__ = ["main"]


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one wrk run (default 2)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per cell (default 2)")
    parser.add_argument("--concurrency", default="1,16,64", help="comma-separated wrk connections")
    parser.add_argument("--scenarios", default="json,json-100k,sse,cache-hit", help="load scenarios to run")
    parser.add_argument(
        "--targets",
        default="upstream,floor,router,router-metrics,router-callers,router-keys,router-httpx",
        help="servers to load",
    )
    parser.add_argument("--streams", type=int, default=1000, help="open streams to hold (0: skip)")
    parser.add_argument("--demo-app", default="", help="MODULE:APP of demo_app (default: found if importable)")
    parser.add_argument(
        "--baseline", default="", help="another checkout of the project, served as target router-baseline"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 s, 1 round, c=16, 100 streams")
    parser.add_argument("--install-wrk", action="store_true", help="apt-get install wrk if it is missing")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results.md", help="Markdown report path")
    return parser.parse_args(argv)


def _config(args: argparse.Namespace) -> scenarios.Config:
    if args.quick:
        return scenarios.Config(
            seconds=1,
            rounds=1,
            concurrency=(16,),
            streams=min(args.streams, 100),
            demo_app=args.demo_app,
            baseline=args.baseline,
        )
    return scenarios.Config(
        seconds=args.seconds,
        rounds=args.rounds,
        concurrency=tuple(int(c) for c in args.concurrency.split(",") if c),
        scenarios=tuple(s for s in args.scenarios.split(",") if s),
        targets=tuple(t for t in args.targets.split(",") if t),
        streams=args.streams,
        demo_app=args.demo_app,
        baseline=args.baseline,
    )


def _say(message: str) -> None:
    print(message, flush=True)


def _progress(cell: dict[str, Any]) -> None:
    rates = ", ".join(f"{name} {t['rps']:,.0f}/s" for name, t in cell["targets"].items())
    ratios = ", ".join(f"{name} {r['median']:.2f}" for name, r in cell["ratios"].items())
    _say(f"  {cell['scenario']:>9} c={cell['concurrency']:<3} {rates}  |  {ratios}")


def _streams_only(argv: list[str]) -> int:
    """``python -m bench streams``: RSS per open idle stream alone, a round per ``--rounds``."""
    parser = argparse.ArgumentParser(prog="python -m bench streams", description=_streams_only.__doc__)
    parser.add_argument("--streams", type=int, default=1000, help="open streams to hold (default 1000)")
    parser.add_argument("--targets", default="floor,router", help="servers to measure (default floor,router)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, each in fresh processes (default 1)")
    parser.add_argument(
        "--baseline", default="", help="another checkout of the project, measured too as target router-baseline"
    )
    args = parser.parse_args(argv)
    targets = tuple(t for t in args.targets.split(",") if t)
    config = scenarios.Config(streams=args.streams, targets=targets, baseline=args.baseline)
    _say("| round | target | streams open | KiB per stream | seconds to open all |")
    _say("| ---: | --- | ---: | ---: | ---: |")
    for round_ in range(1, args.rounds + 1):
        for name, row in scenarios.streams(config, targets).items():
            _say(
                f"| {round_} | {name} | {row['opened']}/{row['streams']} | {row['per_stream_kib']:.2f} | "
                f"{row['open_seconds']:.2f} |"
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["phases"]:
        return phases.main(argv[1:])
    if argv[:1] == ["opcodes"]:
        return opcodes.main(argv[1:])
    if argv[:1] == ["streams"]:
        return _streams_only(argv[1:])
    if argv[:1] == ["ledger"]:
        from . import ledger_writer

        return ledger_writer.main(argv[1:])
    args = _arguments(argv)
    config = _config(args)
    as_ci_root = os.geteuid() == 0 and bool(os.environ.get("CI"))
    try:
        wrk_path = wrk.ensure_wrk(install=args.install_wrk or as_ci_root)
    except wrk.WrkMissing as missing:
        print(missing, file=sys.stderr)
        return 2
    started = time.monotonic()
    data: dict[str, Any] = {"environment": report.environment(), "config": dataclasses.asdict(config)}
    _say("micro-benchmarks (in process)")
    data["micro"] = {**micro(), **router_in_process(1000 if args.quick else 5000)}
    _say("  " + ", ".join(f"{k} {v:.1f}" for k, v in data["micro"].items()))
    _say("load (wrk): " + ", ".join(config.targets))
    with scenarios.setup(wrk_path, config.targets, config.baseline) as running:
        data["load"] = scenarios.load(running, config, _progress)
        _say("failover past a refused connection")
        data["failover"] = scenarios.failover(running, config)
        _say("translated streaming (an Anthropic provider) beside same-protocol streaming")
        data["translation"] = scenarios.translation(running, config)
    if config.streams:
        _say(f"{config.streams} open slow streams")
        data["streams"] = scenarios.streams(config, config.targets)
    _say("fleet: state_url on a local redis-server vs in memory (group/bench, c=16)")
    data["fleet"] = fleet.fleet(
        lambda servers: (
            lambda target, group: scenarios.one_run(
                scenarios.Setup(wrk_path, servers), target, "json", 16, config.seconds, group
            )
        ),
        max(config.rounds, 3),
        args.quick,
    )
    _say("  " + report.fleet_line(data["fleet"]))
    _say("start-up and idle RSS")
    data["demo_app"] = scenarios.demo_app(config)
    data["host_startup"] = scenarios.host_startup()
    data["seconds"] = time.monotonic() - started
    json_path = args.out.with_suffix(".json")
    report.write(data, args.out, json_path)
    _say(f"done in {data['seconds']:.0f} s: {args.out} and {json_path}")
    for row in data["targets"]:
        met = "-" if row["met"] is None else ("met" if row["met"] else "NOT MET")
        value = "-" if row["value"] is None else f"{row['value']:.2f}"
        _say(f"  {row['target']}: {value} ({row['limit']}) {met}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
