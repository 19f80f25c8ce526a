"""The scenarios of ``python -m bench``, each a function from a running setup to plain data.

Load scenarios run the same wrk script against every target back to back, in rounds that
alternate the targets, so that each ratio compares runs seconds apart on the same machine
state: on a shared 2-core machine a target run a minute later is another machine. Besides
req/s and latency, each proxy's CPU time per request is read from ``/proc``: it is far less
sensitive to what else runs on the machine than throughput.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import statistics
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from . import wrk
from .procs import Server, refused_origin
from .streams import hold_streams

__all__ = ["CHAT", "Config", "Setup", "demo_app", "failover", "load", "one_run", "setup", "streams", "translation"]

CHAT: Final = "/v1/chat/completions"
#: Seconds for a ledger's writer to write a run's last rows: bench.host's ``ledger_flush_interval``
#: (the default, 1 s) and a margin.
_LEDGER_SETTLE: Final = 1.5


@dataclass(frozen=True, slots=True)
class Config:
    """How long and how hard to run (``python -m bench --help`` sets these)."""

    seconds: float = 2.0
    rounds: int = 2
    concurrency: tuple[int, ...] = (1, 16, 64)
    scenarios: tuple[str, ...] = ("json", "json-100k", "sse", "cache-hit")
    targets: tuple[str, ...] = (
        "upstream",
        "floor",
        "router",
        "router-metrics",
        "router-callers",
        "router-keys",
        "router-httpx",
    )
    streams: int = 1000
    demo_app: str = ""
    #: Another checkout of the project whose router runs as target ``router-baseline``.
    baseline: str = ""


@dataclass
class Setup:
    """The running processes and the wrk scripts, by name."""

    wrk: str
    servers: dict[str, Server]
    scripts: dict[tuple[str, str, bool, str | None], Path] = field(default_factory=dict)
    #: The key a target's requests present (``router-keys``: a virtual key made at start;
    #: ``router-config-key``: the same server's config key).
    keys: dict[str, str] = field(default_factory=dict)
    #: Targets with a ledger: after a run, the CPU is read once the writer has written the run's
    #: last rows, so each run is charged all of its rows and none of the run before it.
    ledgered: frozenset[str] = frozenset()
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="bench-")))

    def script(self, scenario: str, model: str, session: bool = False, api_key: str | None = None) -> Path:
        """The wrk script that POSTs ``scenario``'s body naming ``model`` (``session``: with a
        session header, what a capped session's requests carry; ``api_key``: presented as a
        bearer token)."""
        key = (scenario, model, session, api_key)
        if key not in self.scripts:
            payload: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "Say hello."}]}
            if scenario == "sse":
                payload["stream"] = True
            if scenario == "json-100k":
                payload["messages"].insert(0, {"role": "system", "content": "x" * 100_000})
            name = f"{scenario}-{model.replace('/', '_')}{'-session' if session else ''}{'-keyed' if api_key else ''}"
            body = self.workdir / f"{name}.json"
            body.write_bytes(json.dumps(payload, separators=(",", ":")).encode())
            script = self.workdir / f"{name}.lua"
            headers = {"x-session-id": "bench-session"} if session else {}
            if api_key is not None:
                headers["Authorization"] = f"Bearer {api_key}"
            script.write_text(wrk.lua_script(body, headers or None))
            self.scripts[key] = script
        return self.scripts[key]


def _virtual_key(origin: str) -> str:
    """A virtual key made through the ``router-keys`` server's admin API: its secret."""
    from bench.host import ADMIN_KEY  # not at import: the module builds its app

    request = urllib.request.Request(
        f"{origin}/admin/keys",
        data=json.dumps({"caller": "bench"}).encode(),
        headers={"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        secret: str = json.loads(response.read())["secret"]
    return secret


def _model_for(target: str, group: str = "bench") -> str:
    """What a target is asked for: routers take a group ref, the rest the upstream's model id."""
    return f"group/{group}" if target.startswith("router") else "ok"


def _group_for(scenario: str) -> str:
    """The routers' group for ``scenario``: the ``cache-hit`` rows ask a cached group (every
    request after the first served from its cache), beside the floor passing the same request
    through to the upstream; the rest ``group/bench``."""
    return "cached" if scenario.startswith("cache-hit") else "bench"


@contextmanager
def setup(wrk_path: str, targets: tuple[str, ...], baseline: str = "") -> Iterator[Setup]:
    """Start the upstream and every target the run needs; stop them all afterwards."""
    with ExitStack() as stack:
        upstream = stack.enter_context(Server("upstream", "bench.upstream:app"))
        env = {"BENCH_UPSTREAM": upstream.origin, "BENCH_REFUSED": refused_origin()}
        servers = {"upstream": upstream}
        if "floor" in targets:
            servers["floor"] = stack.enter_context(Server("floor", "bench.floor:app", env))
        if "router" in targets:
            servers["router"] = stack.enter_context(
                Server("router", "bench.host:app", {**env, "BENCH_TRANSPORT": "aiohttp"})
            )
        if "router-metrics" in targets:
            servers["router-metrics"] = stack.enter_context(
                Server("router-metrics", "bench.host:app", {**env, "BENCH_TRANSPORT": "aiohttp", "BENCH_METRICS": "1"})
            )
        if "router-callers" in targets:  # every caller and session capped, no cap ever reached
            servers["router-callers"] = stack.enter_context(
                Server("router-callers", "bench.host:app", {**env, "BENCH_TRANSPORT": "aiohttp", "BENCH_CALLERS": "1"})
            )
        keys: dict[str, str] = {}
        if "router-keys" in targets:  # a virtual key, made through the admin API, on every request
            served = stack.enter_context(
                Server("router-keys", "bench.host:app", {**env, "BENCH_TRANSPORT": "aiohttp", "BENCH_KEYS": "1"})
            )
            servers["router-keys"] = served
            keys["router-keys"] = _virtual_key(served.origin)
            # The same process asked with its config key: the same ledger, the same settings, only
            # the key differs (a second process would add its own spread to the comparison).
            from bench.host import CONFIG_KEY

            servers["router-config-key"] = served
            keys["router-config-key"] = CONFIG_KEY
        if baseline:
            servers["router-baseline"] = stack.enter_context(
                Server("router-baseline", "bench.host:app", {**env, "BENCH_TRANSPORT": "aiohttp"}, cwd=Path(baseline))
            )
        if "router-httpx" in targets:
            servers["router-httpx"] = stack.enter_context(
                Server("router-httpx", "bench.host:app", {**env, "BENCH_TRANSPORT": "httpx"})
            )
        yield Setup(wrk_path, servers, keys=keys, ledgered=frozenset(keys))


def one_run(run: Setup, target: str, scenario: str, connections: int, seconds: float, group: str) -> dict[str, Any]:
    """One wrk run of ``scenario`` against ``target`` (routers asked for ``group/<group>``), with
    the proxy's CPU time per request."""
    server = run.servers[target]
    script = run.script(
        scenario, _model_for(target, group), session=target == "router-callers", api_key=run.keys.get(target)
    )
    cpu_before = server.cpu_seconds()
    result = wrk.run(run.wrk, server.origin + CHAT, script, connections, seconds)
    if target in run.ledgered:
        time.sleep(_LEDGER_SETTLE)
    cpu = server.cpu_seconds() - cpu_before
    return {**result.as_json(), "cpu_us_per_request": cpu / result.requests * 1e6 if result.requests else None}


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [row[key] for row in rows if row.get(key) is not None]
    return statistics.median(values) if values else None


def load(run: Setup, config: Config, progress: Any) -> list[dict[str, Any]]:
    """Every scenario, concurrency and target, in alternating rounds; medians and ratios."""
    # Each once, though ``--targets`` may name one that is added here too.
    targets = [t for t in dict.fromkeys((*config.targets, "router-config-key", "router-baseline")) if t in run.servers]
    cells: list[dict[str, Any]] = []
    for scenario in config.scenarios:
        group = _group_for(scenario)
        for target in targets:  # warm each target up once per scenario (pools, caches, JIT-less paths)
            one_run(run, target, scenario, 16, 1, group)
        for connections in config.concurrency:
            rounds: dict[str, list[dict[str, Any]]] = {t: [] for t in targets}
            for _ in range(config.rounds):
                for target in targets:
                    rounds[target].append(one_run(run, target, scenario, connections, config.seconds, group))
            cell: dict[str, Any] = {"scenario": scenario, "concurrency": connections, "targets": {}, "ratios": {}}
            for target, rows in rounds.items():
                cell["targets"][target] = {
                    "rps": _median(rows, "rps"),
                    "p50_ms": _median(rows, "p50_ms"),
                    "p99_ms": _median(rows, "p99_ms"),
                    "cpu_us_per_request": _median(rows, "cpu_us_per_request"),
                    "errors": sum(row["errors"] for row in rows),
                    "rounds": rows,
                }
            pairs = [(t, "floor") for t in targets if t.startswith("router") and "floor" in rounds]
            if "router-metrics" in rounds and "router" in rounds:
                pairs.append(("router-metrics", "router"))  # what the metrics cost, in the same rounds
            if "router-callers" in rounds and "router" in rounds:
                pairs.append(("router-callers", "router"))  # what caller caps cost, likewise
            if "router-keys" in rounds and "router" in rounds:
                pairs.append(("router-keys", "router"))  # what keys with a ledger cost against no auth
            if "router-keys" in rounds and "router-config-key" in rounds:
                # What a virtual key costs against a config key: one process, one ledger.
                pairs.append(("router-keys", "router-config-key"))
            for target, base in pairs:
                per_round = [r["rps"] / b["rps"] for r, b in zip(rounds[target], rounds[base], strict=True)]
                cell["ratios"][f"{target}/{base}"] = {
                    "median": statistics.median(per_round),
                    "min": min(per_round),
                    "max": max(per_round),
                }
            cells.append(cell)
            progress(cell)
    return cells


def failover(run: Setup, config: Config) -> dict[str, Any]:
    """Latency added by failing over past a refused connection: ``group/failover`` vs ``group/bench``."""
    out: dict[str, Any] = {}
    for target in (t for t in ("router", "router-httpx") if t in run.servers):
        for connections in (1, 16):
            healthy: list[dict[str, Any]] = []
            failing: list[dict[str, Any]] = []
            for _ in range(config.rounds):
                healthy.append(one_run(run, target, "json", connections, config.seconds, "bench"))
                failing.append(one_run(run, target, "json", connections, config.seconds, "failover"))
            p50_healthy = _median(healthy, "p50_ms") or 0.0
            p50_failing = _median(failing, "p50_ms") or 0.0
            out[f"{target}@c{connections}"] = {
                "healthy_p50_ms": p50_healthy,
                "failover_p50_ms": p50_failing,
                "added_p50_ms": p50_failing - p50_healthy,
                "healthy_rps": _median(healthy, "rps"),
                "failover_rps": _median(failing, "rps"),
                "errors": sum(row["errors"] for row in healthy + failing),
            }
    return out


def translation(run: Setup, config: Config) -> dict[str, Any]:
    """Translated streaming (``group/translated``: an OpenAI client served by an Anthropic
    provider, each event re-encoded) beside same-protocol streaming (``group/bench``: relayed
    byte for byte), at c=16, in alternating rounds; the ratio is translated over same-protocol."""
    out: dict[str, Any] = {}
    for target in (t for t in ("router", "router-httpx") if t in run.servers):
        one_run(run, target, "sse", 16, 1, "translated")  # warm up the translated path
        same: list[dict[str, Any]] = []
        translated: list[dict[str, Any]] = []
        for _ in range(config.rounds):
            same.append(one_run(run, target, "sse", 16, config.seconds, "bench"))
            translated.append(one_run(run, target, "sse", 16, config.seconds, "translated"))
        per_round = [t["rps"] / s["rps"] for t, s in zip(translated, same, strict=True) if s["rps"]]
        out[f"{target}@c16"] = {
            "same_protocol_rps": _median(same, "rps"),
            "translated_rps": _median(translated, "rps"),
            "same_protocol_cpu_us": _median(same, "cpu_us_per_request"),
            "translated_cpu_us": _median(translated, "cpu_us_per_request"),
            "ratio": {"median": statistics.median(per_round), "min": min(per_round), "max": max(per_round)}
            if per_round
            else None,
            "errors": sum(row["errors"] for row in same + translated),
        }
    return out


def streams(config: Config, targets: tuple[str, ...]) -> dict[str, Any]:
    """RSS per open stream, each target in a fresh process (so earlier load is not counted)."""
    out: dict[str, Any] = {}
    with Server("upstream-streams", "bench.upstream:app") as upstream:
        env = {"BENCH_UPSTREAM": upstream.origin, "BENCH_REFUSED": refused_origin()}
        kinds = {
            "floor": ("bench.floor:app", {}, None),
            "router": ("bench.host:app", {"BENCH_TRANSPORT": "aiohttp"}, None),
            "router-baseline": ("bench.host:app", {"BENCH_TRANSPORT": "aiohttp"}, config.baseline or None),
            "router-httpx": ("bench.host:app", {"BENCH_TRANSPORT": "httpx"}, None),
        }
        for target, (app, extra, checkout) in kinds.items():
            if target not in targets and not (target == "router-baseline" and checkout):
                continue
            model = "group/slow" if target.startswith("router") else "slow"
            body = json.dumps({"model": model, "stream": True, "messages": []}, separators=(",", ":")).encode()
            cwd = Path(checkout) if checkout else None
            with Server(f"{target}-streams", app, {**env, **extra}, cwd=cwd) as server:
                result = hold_streams(server.origin + CHAT, body, config.streams, server.rss_kib)
            out[target] = {
                "streams": config.streams,
                "opened": result.opened,
                "failed": result.failed,
                "baseline_mib": result.baseline_kib / 1024,
                "loaded_mib": result.loaded_kib / 1024,
                "per_stream_kib": result.per_stream_kib,
                "open_seconds": result.open_seconds,
            }
    return out


#: How demo_app serves itself (its mock upstreams and the host app, in one process).
_DEMO_COMMAND: Final = ["-m", "demo_app", "--port", "{port}"]


def _demo_target(spec: str) -> str | None:
    """``module:attribute`` of the demo app's ASGI app, ``python -m demo_app`` when it serves
    itself, or ``None`` if there is no demo_app."""
    if spec:
        return spec
    if importlib.util.find_spec("demo_app") is None:
        return None
    if importlib.util.find_spec("demo_app.__main__") is not None:
        return "python " + " ".join(_DEMO_COMMAND[:2])
    for candidate in ("demo_app", "demo_app.main", "demo_app.app"):
        try:
            module = importlib.import_module(candidate)
        except ImportError:
            continue
        if hasattr(module, "app"):
            return f"{candidate}:app"
    return None


def demo_app(config: Config) -> dict[str, Any]:
    """Start-up time (spawn to first HTTP answer) and idle RSS of demo_app, or why skipped."""
    target = _demo_target(config.demo_app)
    if target is None:
        return {"skipped": "demo_app is not importable here (pass --demo-app MODULE:APP to point at it)"}
    readies: list[float] = []
    rss: list[float] = []
    for index in range(3):
        command = _DEMO_COMMAND if target.startswith("python ") else None
        with Server(f"demo-app-{index}", target, command=command) as server:
            readies.append(server.ready_after)
            rss.append(server.rss_kib() / 1024)
    return {"target": target, "ready_s": statistics.median(readies), "idle_rss_mib": statistics.median(rss)}


def host_startup() -> dict[str, Any]:
    """The bench's own host app (Starlette + ModelRouter): the same two figures, as a stand-in."""
    readies: list[float] = []
    rss: list[float] = []
    for index in range(3):
        with Server(f"host-startup-{index}", "bench.host:app") as server:
            readies.append(server.ready_after)
            rss.append(server.rss_kib() / 1024)
    return {"target": "bench.host:app", "ready_s": statistics.median(readies), "idle_rss_mib": statistics.median(rss)}
