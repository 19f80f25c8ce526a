"""Turn a run's data into ``bench/results.json`` and the tables of ``bench/results.md``.

The Markdown opens with the issue's targets, each with its measured value and whether it was
met, then one table per scenario. Every ratio is a median of per-round ratios, with the
lowest and highest round beside it: the spread says how much to trust it.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["environment", "markdown", "targets", "write"]


def environment() -> dict[str, Any]:
    """What the numbers were measured on."""
    versions: dict[str, str | None] = {}
    for name in ("uvicorn", "uvloop", "httptools", "aiohttp", "httpx2", "starlette", "anyio"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "versions": versions,
    }


def _cell(data: dict[str, Any], scenario: str, concurrency: int) -> dict[str, Any] | None:
    for cell in data.get("load", []):
        if cell["scenario"] == scenario and cell["concurrency"] == concurrency:
            return dict(cell)
    return None


def _get(get: Callable[[], Any]) -> Any:
    try:
        return get()
    except (KeyError, TypeError, IndexError):
        return None


def targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets: name, measured value, limit, and whether it was met."""
    json16, sse16, json1 = _cell(data, "json", 16), _cell(data, "sse", 16), _cell(data, "json", 1)
    rows: list[tuple[str, Any, str, Callable[[float], bool]]] = [
        (
            "router/floor req/s, c=16, non-streaming (goal 0.9)",
            _get(lambda: json16["ratios"]["router/floor"]["median"]),  # type: ignore[index]
            "≥ 0.55",
            lambda v: v >= 0.55,
        ),
        (
            "router/floor req/s, c=16, streaming (goal 0.9)",
            _get(lambda: sse16["ratios"]["router/floor"]["median"]),  # type: ignore[index]
            "≥ 0.65",
            lambda v: v >= 0.65,
        ),
        (
            "with metrics on: router-metrics/router req/s, c=16, non-streaming",
            _get(lambda: json16["ratios"]["router-metrics/router"]["median"]),  # type: ignore[index]
            "≥ 0.95",
            lambda v: v >= 0.95,
        ),
        (
            # The issue's target is "not worse beyond the rounds' spread" (the cell's [min, max]
            # beside it); the guard only catches a cost no spread explains.
            "with caller caps: router-callers/router req/s, c=16, non-streaming",
            _get(lambda: json16["ratios"]["router-callers/router"]["median"]),  # type: ignore[index]
            "≥ 0.9",
            lambda v: v >= 0.9,
        ),
        (
            # A virtual key against a config key, one process and one ledger: the target
            # is "inside the rounds' spread" (the cell's [min, max] beside it).
            "a virtual key against a config key: router-keys/router-config-key req/s, c=16, non-streaming",
            _get(lambda: json16["ratios"]["router-keys/router-config-key"]["median"]),  # type: ignore[index]
            "≥ 0.9",
            lambda v: v >= 0.9,
        ),
        (
            "added p50 over the direct upstream, c=1 (ms)",
            _get(lambda: json1["targets"]["router"]["p50_ms"] - json1["targets"]["upstream"]["p50_ms"]),  # type: ignore[index]
            "≤ 0.5",
            lambda v: v <= 0.5,
        ),
        (
            "resolution + classification (µs per request)",
            _get(lambda: data["micro"]["resolution_plus_classification_us"]),
            "≤ 20",
            lambda v: v <= 20,
        ),
        (
            "RSS per open idle stream (KiB)",
            _get(lambda: data["streams"]["router"]["per_stream_kib"]),
            "≤ 32",
            lambda v: v <= 32,
        ),
        (
            "demo_app idle RSS (MiB)",
            _get(lambda: data["demo_app"]["idle_rss_mib"]),
            "≤ 80",
            lambda v: v <= 80,
        ),
        ("demo_app ready (s)", _get(lambda: data["demo_app"]["ready_s"]), "≤ 2", lambda v: v <= 2),
        (
            "translated/same-protocol streaming req/s, c=16 (aim 0.7)",
            _get(lambda: data["translation"]["router@c16"]["ratio"]["median"]),
            "≥ 0.7",
            lambda v: v >= 0.7,
        ),
        (
            "router with state_url (local Redis) / in memory req/s, c=16, order group",
            _get(lambda: data["fleet"]["throughput"]["ratio"]["median"]),
            "≥ 0.9",
            lambda v: v >= 0.9,
        ),
        (
            "a breaker opening reaches another process (ms, worst of the trials)",
            _get(lambda: data["fleet"]["propagation"]["max_ms"]),
            "≤ 250",
            lambda v: v <= 250,
        ),
        (
            "failover past a refused connection adds (ms p50, c=1)",
            _get(lambda: data["failover"]["router@c1"]["added_p50_ms"]),
            "≤ 5",
            lambda v: v <= 5,
        ),
    ]
    return [
        {"target": name, "value": value, "limit": limit, "met": None if value is None else check(value)}
        for name, value, limit, check in rows
    ]


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def markdown(data: dict[str, Any]) -> str:
    """The human-readable report."""
    env = data["environment"]
    config = data["config"]
    lines = [
        "# asgi_router benchmark results",
        "",
        f"Measured {env['when']} on {env['cpus']} CPUs (load average before the run "
        f"{', '.join(f'{x:.2f}' for x in env['load_average'])}), Python {env['python']}; "
        + ", ".join(f"{k} {v}" for k, v in env["versions"].items() if v)
        + ".",
        f"wrk: one thread, {config['seconds']:g} s per run, {config['rounds']} alternating rounds per cell "
        "(medians; ratios as median [lowest, highest round]). Generated by `python -m bench`.",
        "",
        "## Targets",
        "",
        "| target | measured | limit | met |",
        "|---|---:|---:|:---:|",
    ]
    for row in data["targets"]:
        met = "-" if row["met"] is None else ("yes" if row["met"] else "**no**")
        lines.append(f"| {row['target']} | {_f(row['value'])} | {row['limit']} | {met} |")
    for scenario in config["scenarios"]:
        cells = [cell for cell in data.get("load", []) if cell["scenario"] == scenario]
        if not cells:
            continue
        names = list(cells[0]["targets"])
        lines += ["", f"## Load: {scenario}", ""]
        header = "| c | " + " | ".join(f"{n} req/s" for n in names) + " | "
        header += " | ".join(ratio for ratio in cells[0]["ratios"]) + " |"
        lines += [header, "|" + "---:|" * (1 + len(names) + len(cells[0]["ratios"]))]
        for cell in cells:
            row = f"| {cell['concurrency']} | " + " | ".join(_f(cell["targets"][n]["rps"], 0) for n in names)
            ratios = [f"{r['median']:.2f} [{r['min']:.2f}, {r['max']:.2f}]" for r in cell["ratios"].values()]
            lines.append(row + " | " + " | ".join(ratios) + " |")
        lines += [
            "",
            "| c | target | p50 ms | p99 ms | proxy CPU µs/request | errors |",
            "|---:|---|---:|---:|---:|---:|",
        ]
        for cell in cells:
            for name in names:
                t = cell["targets"][name]
                lines.append(
                    f"| {cell['concurrency']} | {name} | {_f(t['p50_ms'], 3)} | {_f(t['p99_ms'], 3)} | "
                    f"{_f(t['cpu_us_per_request'], 1)} | {t['errors']} |"
                )
    if data.get("failover"):
        lines += [
            "",
            "## Failover past a refused connection (`group/failover` vs `group/bench`)",
            "",
            "| target | healthy p50 ms | failover p50 ms | added ms | healthy req/s | failover req/s |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, row in data["failover"].items():
            lines.append(
                f"| {name} | {_f(row['healthy_p50_ms'], 3)} | {_f(row['failover_p50_ms'], 3)} | "
                f"{_f(row['added_p50_ms'], 3)} | {_f(row['healthy_rps'], 0)} | {_f(row['failover_rps'], 0)} |"
            )
    if data.get("translation"):
        lines += [
            "",
            "## Translated streaming (`group/translated`, an Anthropic provider) vs same-protocol (`group/bench`)",
            "",
            "| target | same-protocol req/s | translated req/s | ratio | same-protocol CPU µs | translated CPU µs |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, row in data["translation"].items():
            ratio = row["ratio"]
            shown = "-" if ratio is None else f"{ratio['median']:.2f} [{ratio['min']:.2f}, {ratio['max']:.2f}]"
            lines.append(
                f"| {name} | {_f(row['same_protocol_rps'], 0)} | {_f(row['translated_rps'], 0)} | {shown} | "
                f"{_f(row['same_protocol_cpu_us'], 1)} | {_f(row['translated_cpu_us'], 1)} |"
            )
    if data.get("streams"):
        lines += [
            "",
            "## Open slow streams (RSS of the proxy process)",
            "",
            "| target | streams open | baseline MiB | loaded MiB | KiB per stream | seconds to open all |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, row in data["streams"].items():
            lines.append(
                f"| {name} | {row['opened']}/{row['streams']} | {_f(row['baseline_mib'], 1)} | "
                f"{_f(row['loaded_mib'], 1)} | {_f(row['per_stream_kib'], 1)} | {_f(row['open_seconds'], 2)} |"
            )
    lines += _fleet_section(data.get("fleet"))
    lines += ["", "## Start-up and idle memory", "", "| app | ready s | idle RSS MiB |", "|---|---:|---:|"]
    for key in ("demo_app", "host_startup"):
        row = data.get(key) or {}
        if "skipped" in row:
            lines.append(f"| demo_app | skipped: {row['skipped']} | |")
        elif row:
            lines.append(f"| {row['target']} | {_f(row['ready_s'], 2)} | {_f(row['idle_rss_mib'], 1)} |")
    if data.get("micro"):
        lines += ["", "## In-process micro-benchmarks (µs, best of 5)", "", "| what | µs |", "|---|---:|"]
        for name, value in data["micro"].items():
            lines.append(f"| {name.removesuffix('_us')} | {_f(value, 2)} |")
    return "\n".join(lines) + "\n"


def fleet_line(fleet: dict[str, Any]) -> str:
    """The fleet part in one line, for the console."""
    if "skipped" in fleet:
        return f"skipped: {fleet['skipped']}"
    ratio, budget, fresh = fleet["throughput"]["ratio"], fleet["budget"], fleet["propagation"]
    return (
        f"redis/in-memory {ratio['median']:.2f} [{ratio['min']:.2f}, {ratio['max']:.2f}]; exact budget check "
        f"{budget['exact_round_trip_us']:.0f} µs a request, leased slice {budget['lease_check_us']:.2f} µs; "
        f"opening seen elsewhere after {fresh['p50_ms']:.2f} ms (worst {fresh['max_ms']:.2f})"
    )


def _fleet_section(fleet: dict[str, Any] | None) -> list[str]:
    if not fleet:
        return []
    lines = ["", "## Fleet: state shared through Redis", ""]
    if "skipped" in fleet:
        return [*lines, f"Skipped: {fleet['skipped']}."]
    throughput, budget, fresh = fleet["throughput"], fleet["budget"], fleet["propagation"]
    ratio = throughput["ratio"]
    lines += [
        "| what | figure |",
        "|---|---:|",
        f"| in memory, req/s (c=16, `group/bench`) | {_f(throughput['rps']['router'], 0)} |",
        f"| `state_url` on a local redis-server, req/s | {_f(throughput['rps']['router-redis'], 0)} |",
        f"| ratio, median [lowest, highest round] | {ratio['median']:.2f} [{ratio['min']:.2f}, {ratio['max']:.2f}] |",
        f"| errors | {throughput['errors']} |",
        f"| router in process, in memory, µs per request | {_f(fleet['in_process']['in_memory_us'], 1)} |",
        f"| router in process, `state_url`, µs per request | {_f(fleet['in_process']['state_url_us'], 1)} |",
        f"| exact budget check: one script per request, µs waited | {_f(budget['exact_round_trip_us'], 1)} |",
        f"| exact budget check: checks/s at 16 at once | {_f(budget['exact_checks_per_s_at_c16'], 0)} |",
        f"| leased slice: check and count per request, µs | {_f(budget['lease_check_us'], 3)} |",
        f"| leased slice: background round trips per request | {_f(budget['lease_round_trips_per_request'], 3)} |",
        f"| breaker opening seen by another state, ms p50 | {_f(fresh['p50_ms'], 2)} |",
        f"| breaker opening seen by another state, ms worst of {fresh['trials']:.0f} | {_f(fresh['max_ms'], 2)} |",
    ]
    return lines


def write(data: dict[str, Any], markdown_path: Path, json_path: Path) -> None:
    """Write both files (the JSON keeps every round)."""
    data["targets"] = targets(data)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    markdown_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(data, indent=1, default=str) + "\n")
    markdown_path.write_text(markdown(data))
