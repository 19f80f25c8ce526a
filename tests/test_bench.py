"""Smoke tests of the benchmark harness's pieces: they start and answer. No timing here."""

from __future__ import annotations

import asyncio
import asyncio.tasks
import json
from collections.abc import Iterator
from pathlib import Path

import aiohttp.client
import httpx2
import pytest

import asgi_router.attempts.call
from bench import fleet as bench_fleet
from bench import report, wrk
from bench.__main__ import main as bench_main
from bench.floor import Floor
from bench.host import build, settings_for
from bench.micro import micro, router_in_process
from bench.opcodes import by_function, by_package
from bench.phases import REGIONS
from bench.streams import hold_streams
from bench.upstream import COMPLETION, app, sse_events

from .fleet import RedisServer
from .servers import ServerThread


@pytest.fixture(scope="module")
def bench_upstream() -> Iterator[str]:
    with ServerThread(app) as server:
        yield server.url


def _chat(base: str, model: str, stream: bool = False) -> httpx2.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        body["stream"] = True
    return httpx2.post(f"{base}/v1/chat/completions", json=body, timeout=5)


def test_mock_upstream_answers_json_and_twenty_sse_chunks(bench_upstream: str) -> None:
    assert _chat(bench_upstream, "ok").content == COMPLETION
    streamed = _chat(bench_upstream, "ok", stream=True)
    assert streamed.content == b"".join(sse_events())
    assert len(sse_events()) == 20


def test_micro_benchmarks_run_every_piece_they_time() -> None:
    figures = {**micro(scale=0.001), **router_in_process(20)}
    assert set(figures) >= {"classify_exception_us", "resolution_plus_classification_us", "router_json_us"}
    assert all(value > 0 for value in figures.values())


def test_floor_relays_the_upstream_byte_for_byte(bench_upstream: str) -> None:
    with ServerThread(Floor(bench_upstream)) as floor:
        assert _chat(floor.url, "ok").content == COMPLETION
        assert _chat(floor.url, "ok", stream=True).content == b"".join(sse_events())


@pytest.mark.both_transports
def test_host_app_routes_the_bench_group_through_the_router(bench_upstream: str, transport_kind: str) -> None:
    # Without gc_freeze: frozen objects are never collected, which would skew later leak checks.
    host = build(settings_for(bench_upstream, "http://127.0.0.1:9", transport_kind, gc_freeze=False))
    with ServerThread(host) as server:
        plain = _chat(server.url, "group/bench")
        streamed = _chat(server.url, "group/bench", stream=True)
        failed_over = _chat(server.url, "group/failover")
    assert plain.content == COMPLETION
    assert plain.headers["x-router-model"] == "up/ok"
    assert streamed.content == b"".join(sse_events())
    assert failed_over.headers["x-router-model"] == "up/ok"
    assert failed_over.headers["x-router-attempts"] == "2"


def test_host_app_translates_the_anthropic_route_for_the_translated_group(bench_upstream: str) -> None:
    host = build(settings_for(bench_upstream, "http://127.0.0.1:9", "aiohttp", gc_freeze=False))
    with ServerThread(host) as server:
        plain = _chat(server.url, "group/translated")
        streamed = _chat(server.url, "group/translated", stream=True)
    assert plain.headers["x-router-model"] == streamed.headers["x-router-model"] == "claude/ok"
    assert plain.json()["choices"][0]["message"]["content"] == "Hello from the bench upstream."
    frames = streamed.content.split(b"\n\n")
    assert frames[-2:] == [b"data: [DONE]", b""]
    chunks = [json.loads(frame.removeprefix(b"data: ")) for frame in frames[:-2]]
    text = "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks)
    assert text == "".join(f"w{index} " for index in range(19))  # what the same-protocol stream says


def test_stream_holder_opens_and_releases_slow_streams(bench_upstream: str) -> None:
    body = b'{"model":"slow","stream":true,"messages":[]}'
    # The floor does not watch for disconnects (it is the least a proxy can do): the streams the
    # holder let go run on there until their next slow event. Nothing to wait for at the end.
    with ServerThread(Floor(bench_upstream), graceful_shutdown=0.1) as floor:
        result = hold_streams(f"{floor.url}/v1/chat/completions", body, 5, rss=lambda: 1000, warm=2, settle=0.05)
    assert (result.opened, result.failed) == (5, 0)


def test_wrk_script_and_summary_parsing(tmp_path: Path) -> None:
    script = wrk.lua_script(tmp_path / "body.json")
    assert str(tmp_path / "body.json") in script and 'wrk.method = "POST"' in script
    assert "x-session-id" not in script
    with_session = wrk.lua_script(tmp_path / "body.json", {"x-session-id": "bench-session"})
    assert 'wrk.headers["x-session-id"] = "bench-session"\n' in with_session  # the capped target's requests
    assert with_session.replace('wrk.headers["x-session-id"] = "bench-session"\n', "") == script
    line = (
        'BENCH_JSON {"requests":2000,"duration_us":2000000,"bytes":1,"connect":0,"read":0,"write":0,'
        '"status":3,"timeout":0,"p50_us":1500,"p90_us":2000,"p99_us":4000,"mean_us":1600.0,"max_us":9000}'
    )
    result = wrk.parse("Running 2s test\n" + line + "\n")
    assert (result.rps, result.errors, result.p50_ms, result.p99_ms) == (1000.0, 3, 1.5, 4.0)
    with pytest.raises(RuntimeError):
        wrk.parse("no summary")


def test_report_renders_targets_and_tables_from_partial_data() -> None:
    cell = {
        "scenario": "json",
        "concurrency": 16,
        "targets": {
            name: {"rps": rps, "p50_ms": 1.0, "p99_ms": 2.0, "cpu_us_per_request": 90.0, "errors": 0}
            for name, rps in (("upstream", 30000.0), ("floor", 9000.0), ("router", 6000.0))
        },
        "ratios": {"router/floor": {"median": 0.67, "min": 0.6, "max": 0.7}},
    }
    data = {
        "environment": report.environment(),
        "config": {"seconds": 2, "rounds": 2, "scenarios": ["json"]},
        "load": [cell],
        "micro": {"resolution_plus_classification_us": 1.5},
        "demo_app": {"skipped": "no demo_app"},
        "translation": {
            "router@c16": {
                "same_protocol_rps": 5000.0,
                "translated_rps": 4000.0,
                "same_protocol_cpu_us": 150.0,
                "translated_cpu_us": 190.0,
                "ratio": {"median": 0.8, "min": 0.75, "max": 0.85},
                "errors": 0,
            }
        },
    }
    rows = {row["target"]: row for row in report.targets(data)}
    assert rows["translated/same-protocol streaming req/s, c=16 (aim 0.7)"]["met"] is True
    assert rows["router/floor req/s, c=16, non-streaming (goal 0.9)"]["met"] is True
    assert rows["demo_app ready (s)"]["met"] is None
    text = report.markdown({**data, "targets": report.targets(data)})
    assert "| 16 | 30,000 | 9,000 | 6,000 | 0.67 [0.60, 0.70] |" in text
    assert "skipped: no demo_app" in text
    assert "| router@c16 | 5,000 | 4,000 | 0.80 [0.75, 0.85] | 150.0 | 190.0 |" in text


def test_demo_app_is_measured_as_users_start_it() -> None:
    from bench.scenarios import _demo_target

    assert _demo_target("") == "python -m demo_app"
    assert _demo_target("pkg.mod:app") == "pkg.mod:app"


@pytest.mark.fleet
def test_fleet_part_measures_both_budget_designs_and_the_freshness_of_an_opening(redis_server: RedisServer) -> None:
    budget = asyncio.run(bench_fleet._budget_costs(redis_server.url, 64))
    fresh = asyncio.run(bench_fleet._propagation(redis_server.url, 2))
    assert all(value > 0 for value in budget.values()), budget
    assert fresh["max_ms"] < 5000 and fresh["trials"] == 2
    data = {
        "fleet": {
            "throughput": {
                "rps": {"router": 100.0, "router-redis": 95.0},
                "errors": 0,
                "ratio": {"median": 0.95, "min": 0.9, "max": 1.0},
            },
            "in_process": {"in_memory_us": 70.0, "state_url_us": 71.0},
            "budget": budget,
            "propagation": fresh,
        }
    }
    rows = {row["target"]: row for row in report.targets(data)}
    assert rows["router with state_url (local Redis) / in memory req/s, c=16, order group"]["met"] is True
    assert "## Fleet: state shared through Redis" in "\n".join(report._fleet_section(data["fleet"]))


def test_phases_command_prints_every_phase_having_entered_each(capsys: pytest.CaptureFixture[str]) -> None:
    # Without valgrind: the regions are still wrapped and entered (a region whose functions the
    # router stopped calling fails the command), only the counts are Python's own net blocks.
    assert bench_main(["phases", "--no-valgrind", "--requests", "3", "--samples", "1"]) == 0
    printed = capsys.readouterr().out
    assert "| phase | json net blocks | sse20 net blocks |" in printed
    for label in [region.label for region in REGIONS if region.name != "request"] + ["total"]:
        assert f"| {label} |" in printed


@pytest.mark.load  # three server processes (upstream, floor, router), each given seconds to start
def test_streams_command_measures_only_the_open_streams(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["streams", "--streams", "3", "--targets", "floor,router"]) == 0
    printed = capsys.readouterr().out
    assert "| round | target | streams open | KiB per stream | seconds to open all |" in printed
    assert "| 1 | floor | 3/3 |" in printed
    assert "| 1 | router | 3/3 |" in printed


@pytest.mark.load  # three server processes (upstream, floor, router), each given seconds to start
def test_opcodes_command_counts_the_router_only_in_the_router_and_the_client_library_in_both(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert bench_main(["opcodes", "--requests", "20", "--kinds", "json", "--top", "5"]) == 0
    printed = capsys.readouterr().out
    rows = {
        cells[0]: cells[1:]
        for line in printed.splitlines()
        if line.startswith("| ") and not line.startswith("| `")
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
    }
    assert rows["package"] == ["floor", "router"]
    floor_router, router_router = (int(value.replace(",", "")) for value in rows["asgi_router"])
    assert floor_router == 0 < router_router
    assert all(int(value.replace(",", "")) > 0 for value in rows["aiohttp"] + rows["uvicorn"])
    assert int(rows["bench"][0].replace(",", "")) > 0  # the floor's own code, counted in its server
    assert printed.count("| `") == 5


def test_opcode_counts_are_grouped_by_the_package_a_file_belongs_to() -> None:
    counts = {
        (aiohttp.client.__file__, "_request"): (300, 3),
        (asgi_router.attempts.call.__file__, "call"): (100, 2),
        (asyncio.tasks.__file__, "create_task"): (50, 1),
    }
    assert by_package(counts, 10) == {
        "aiohttp": 30.0, "uvicorn": 0.0, "starlette": 0.0, "asgi_router": 10.0, "bench": 0.0, "other": 5.0,
    }  # fmt: skip
    assert by_function(counts, 10)["asgi_router/attempts/call.py:call"] == (10.0, 0.2)


def test_opcode_counts_credit_a_file_by_the_package_imported_not_by_folder_names() -> None:
    # A clone in a folder named asgi_router with its .venv inside: a library there is not the router.
    inside = "/home/me/asgi_router/.venv/lib/python3.11/site-packages/h11/_events.py"
    bench_file = "/home/me/asgi_router/bench/elsewhere.py"  # not the bench package this run imports
    counts = {(inside, "next_event"): (70, 7), (bench_file, "f"): (30, 3)}
    assert by_package(counts, 10)["asgi_router"] == 0.0
    assert by_package(counts, 10)["bench"] == 0.0
    assert by_package(counts, 10)["other"] == 10.0
