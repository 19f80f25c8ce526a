"""The ``asgi-router`` command, run as an operator runs it: the installed console script, in a process.

``check`` and ``explain`` read a configuration and print; ``replay`` reads what a
:class:`~asgi_router.JsonlSink` recorded through a real router; ``serve`` runs the router as a
standalone gateway on uvicorn and is talked to over loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx2
import pytest

from asgi_router import JsonlSink

from .commands import COMMAND, free_port, serving
from .conftest import API_KEY, CLIENT_KEY
from .mock_upstream import MockUpstream
from .routing_helpers import chat_body, router_client

_RULES = """
[[rules]]
name = "long"
min_prompt_tokens = {long}
route = "group/big"

[[rules]]
name = "gold"
headers = {{x-tier = "gold"}}
route = "mock2/ok"
"""


def _config(
    tmp_path: Path, upstream: MockUpstream, *, long: int = 50, extra: str = "", name: str = "router.toml"
) -> Path:
    path = tmp_path / name
    url = upstream.url  # type: ignore[attr-defined]
    path.write_text(
        f"""
api_keys = ["{CLIENT_KEY}"]
{extra}

[providers.mock]
base_url = "{url}/v1"
api_key = "{API_KEY}"

[providers.mock2]
base_url = "{url}/v1"

[groups.small]
members = ["mock/ok", {{ref = "mock2/ok", rpm = 60}}]

[groups.big]
strategy = "rotate"
members = ["mock2/ok", "mock/ok"]

[groups.auto]
rules = true
members = ["group/small"]
"""
        + _RULES.format(long=long)
    )
    return path


def _run(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([COMMAND, *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False)


def test_check_prints_each_groups_plan_and_rules(tmp_path: Path, upstream: MockUpstream) -> None:
    result = _run("check", _config(tmp_path, upstream))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"{tmp_path / 'router.toml'}: valid")
    assert "  group/small  (order: tried in the order listed)\n    1. mock/ok\n    2. mock2/ok  (rpm 60)\n" in out
    assert "  group/big  (rotate: the same order, each request starting one member further)" in out
    assert (
        "    rules, the first that matches wins (else the members above):\n"
        "      - long: prompt tokens >= 50 -> group/big\n"
        "      - gold: headers.x-tier = 'gold' -> mock2/ok\n"
    ) in out
    assert "inbound auth: api_keys (1 key)" in out
    assert API_KEY not in out and CLIENT_KEY not in out


def test_check_refuses_a_bad_config_naming_the_key_and_the_file(tmp_path: Path, upstream: MockUpstream) -> None:
    bad_member = _config(tmp_path, upstream, extra="", name="bad.toml")
    bad_member.write_text(bad_member.read_text().replace('members = ["mock/ok", {', 'members = ["nope/ok", {'))
    bad_value = tmp_path / "value.toml"
    bad_value.write_text('allow_unauthenticated = true\nmax_body_bytes = "lots"\n')
    no_auth = tmp_path / "open.toml"
    no_auth.write_text("[providers.p]\nbase_url = 'http://127.0.0.1:9/v1'\n")
    for path, said in (
        (bad_member, f"groups.small.members[0] (in {bad_member}): 'nope/ok' names unknown provider 'nope'"),
        (bad_value, f"max_body_bytes (in {bad_value})"),
        (no_auth, "inbound auth is required"),
    ):
        result = _run("check", path)
        assert result.returncode == 1, result.stdout
        assert result.stderr.startswith(f"asgi-router check: {path}: invalid router configuration")
        assert said in result.stderr
    missing = _run("check", tmp_path / "missing.toml")
    assert missing.returncode == 1 and "config file not found" in missing.stderr


def test_explain_names_the_rule_its_conditions_and_the_plan(tmp_path: Path, upstream: MockUpstream) -> None:
    config = _config(tmp_path, upstream)
    body = tmp_path / "body.json"
    body.write_text(json.dumps(chat_body("ignored", "x" * 400)))  # ~100 tokens: over 'long'
    long = _run("explain", config, "group/auto", "--body", body)
    gold = _run("explain", config, "group/auto", "--header", "X-Tier=gold")
    plain = _run("explain", config, "group/auto")
    assert (long.returncode, gold.returncode, plain.returncode) == (0, 0, 0), long.stderr + gold.stderr
    assert "  long: MATCHES -> group/big\n      min_prompt_tokens = 50: prompt_tokens = 10" in long.stdout
    assert "  gold: not tried (a rule above matched)" in long.stdout
    assert "plan (route 'long', group/big, rotate" in long.stdout
    assert "  long: no\n" in gold.stdout and "  gold: MATCHES -> mock2/ok" in gold.stdout
    assert "headers.x-tier = 'gold': x-tier = 'gold'  -> holds" in gold.stdout
    assert "plan (route 'gold', a direct model):\n  1. mock2/ok  (openai)" in gold.stdout
    assert "none matched: the members of group/auto are the plan" in plain.stdout
    assert (
        "plan (route 'default', group/auto, order: tried in the order listed):\n"
        "  1. mock/ok  (openai)\n  2. mock2/ok  (openai)" in plain.stdout
    )
    unknown = _run("explain", config, "group/nope")
    assert unknown.returncode == 1 and "refused: 404 model_not_found: unknown group 'group/nope'" in unknown.stdout


@pytest.mark.anyio
async def test_replay_reports_what_a_new_config_would_route_differently(tmp_path: Path, upstream: MockUpstream) -> None:
    records = tmp_path / "records.jsonl"
    settings = {
        "groups": {
            "small": {"members": ["mock/ok", "mock2/ok"]},
            "big": {"strategy": "rotate", "members": ["mock2/ok", "mock/ok"]},
            "auto": {"rules": True, "members": ["group/small"]},
        },
        "rules": [
            {"name": "long", "min_prompt_tokens": 50, "route": "group/big"},
            {"name": "gold", "headers": {"x-tier": "gold"}, "route": "mock2/ok"},
        ],
    }
    async with router_client(upstream, router={"sinks": [JsonlSink(records)]}, **settings) as (client, _):
        for text, tier in (("x" * 400, "-"), ("x" * 300, "-"), ("hi", "gold"), ("hi", "-"), ("hi", "-")):
            await client.post("/v1/chat/completions", json=chat_body("group/auto", text), headers={"x-tier": tier})
        await client.post("/v1/chat/completions", json=chat_body("mock/ok"))
    lines = records.read_text().splitlines()
    assert len(lines) == 6
    # The new config needs 100 prompt tokens for 'long': the ~80-token request routes to the default.
    new = _config(tmp_path, upstream, long=100, name="new.toml")
    result = _run("replay", new, records)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"replayed 6 requests from {records} with {new}: 5 route the same, 1 differently, 0 would")
    # (the second request to the rotate group started one member further)
    assert "      1  group/auto: rule long: [mock/ok mock2/ok] -> rule default: [mock/ok mock2/ok]" in out
    changed = _run("replay", new, records, "--fail-on-change")
    assert changed.returncode == 1
    same = _run("replay", _config(tmp_path, upstream, name="same.toml"), records, "--fail-on-change")
    assert same.returncode == 0 and ": 6 route the same, 0 differently" in same.stdout


def test_replay_shows_a_progress_bar_and_skips_lines_that_are_not_records(
    tmp_path: Path, upstream: MockUpstream
) -> None:
    record = {"request_id": "r", "ref": "group/small", "facts": {}, "route": "default", "plan": ["mock/ok", "mock2/ok"]}
    records = tmp_path / "records.jsonl"
    records.write_text((json.dumps(record) + "\n") * 3000 + "not json\n")
    result = subprocess.run(
        [COMMAND, "replay", str(_config(tmp_path, upstream)), str(records), "--progress"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr  # some lines were not records: the status says so
    assert b"3,000 route the same" in result.stdout and b"1 lines were not records" in result.stdout
    assert result.stderr.startswith(b"\r[") and result.stderr.endswith(b"\r[" + b"#" * 30 + b"] 100%  3,001 lines\n")


def test_serve_runs_the_router_as_a_standalone_gateway(tmp_path: Path, upstream: MockUpstream) -> None:
    auth = {"authorization": f"Bearer {CLIENT_KEY}"}
    with serving(_config(tmp_path, upstream)) as (url, process):
        answer = httpx2.post(f"{url}/v1/chat/completions", json=chat_body("group/small"), headers=auth)
        models = httpx2.get(f"{url}/v1/models", headers=auth)
        elsewhere = httpx2.get(f"{url}/anything/else", headers=auth)
    assert answer.status_code == 200 and answer.headers["x-router-model"] == "mock/ok"
    assert "group/auto" in {model["id"] for model in models.json()["data"]}
    assert elsewhere.status_code == 404 and elsewhere.json()["error"]["code"] == "not_found"
    assert process.returncode == 0


def test_serve_refuses_a_bad_config_before_starting_a_server(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("allow_unauthenticated = true\n[groups.g]\nmembers = []\n")
    result = _run("serve", config, "--port", str(free_port()), timeout=30)
    assert result.returncode == 1
    assert f"{config}" in result.stderr and "groups.g.members" in result.stderr


def test_check_lists_every_problem_of_a_file_at_once_with_its_source_and_a_likely_fix(tmp_path: Path) -> None:
    secret = "sk-NEVER-ECHOED-0123456789"
    config = tmp_path / "router.toml"
    config.write_text(
        f"""
allow_unauthenticated = true

[providers.backup]
base_url = "http://127.0.0.1:9/v1"
api_kye = "{secret}"

[groups.chat]
strategy = "ordr"
members = ["bakup/llama-3", "backup/llama-3"]

[aliases]
fast = "group/chatt"
"""
    )
    result = _run("check", config)
    assert result.returncode == 1, result.stdout
    err = result.stderr
    assert err.startswith(f"asgi-router check: {config}: invalid router configuration (4 problems):\n")
    assert f"  providers.backup.api_kye (in {config}): unknown key (did you mean 'api_key'?)\n" in err
    assert (
        f"  groups.chat.strategy (in {config}): Input should be 'order', 'rotate', 'weighted', 'least_busy', "
        "'latency', 'cost' or 'usage' (got 'ordr'; did you mean 'order'?)\n"
    ) in err
    assert (
        f"  groups.chat.members[0] (in {config}): 'bakup/llama-3' names unknown provider 'bakup'; "
        "did you mean 'backup'?\n"
    ) in err
    assert f"  aliases.fast (in {config}): 'group/chatt' names unknown group 'chatt'; did you mean 'chat'?" in err
    assert secret not in err


def test_check_says_where_each_of_two_contradicting_auth_choices_came_from(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    config.write_text("allow_unauthenticated = true\n")
    result = subprocess.run(
        [COMMAND, "check", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "ASGI_ROUTER_API_KEYS": CLIENT_KEY},
    )
    assert result.returncode == 1
    assert (
        "allow_unauthenticated=True contradicts api_keys; choose one (api_keys from the environment variable "
        f"ASGI_ROUTER_API_KEYS; allow_unauthenticated in {config})"
    ) in result.stderr
    assert CLIENT_KEY not in result.stderr


def _run_env(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    clean = {name: value for name, value in os.environ.items() if not name.startswith("ASGI_ROUTER_")}
    return subprocess.run(
        [COMMAND, *map(str, args)], capture_output=True, text=True, timeout=60, check=False, env={**clean, **env}
    )


_KEYED = """
allow_unauthenticated = true
routes = ["/v1/chat/completions", "/v1/messages"]

[providers.openai]
base_url = "https://api.openai.com/v1"
api_key_env = "I26_OPENAI_KEY"
{required}

[providers.claude]
kind = "anthropic"
base_url = "https://api.anthropic.com/v1"
api_key = "sk-ant-0123456789abcdef"

[groups.chat]
members = ["openai/gpt-4o", "claude/claude-sonnet-4-5"]

[groups.auto]
rules = true
members = ["group/chat"]
"""


def test_check_strict_fails_when_a_providers_key_variable_is_unset(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    config.write_text(_KEYED.format(required=""))
    lenient = _run_env({}, "check", config)
    strict = _run_env({}, "check", "--strict", config)
    keyed = _run_env({"I26_OPENAI_KEY": "sk-0123456789abcdef"}, "check", "--strict", config)
    assert lenient.returncode == 0, lenient.stderr
    warning = "  provider 'openai' is skipped (provider_not_configured): its api_key_env I26_OPENAI_KEY is not set"
    assert "warnings (check --strict fails on them):\n" + warning in lenient.stdout
    assert strict.returncode == 1 and warning in strict.stdout
    assert f"asgi-router check --strict: {config}: 1 warning (listed above)" in strict.stderr
    assert keyed.returncode == 0, keyed.stdout + keyed.stderr
    assert "warnings" not in keyed.stdout


def test_a_required_provider_without_its_key_refuses_check_and_serve(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    config.write_text(_KEYED.format(required="required = true"))
    said = f"providers.openai (in {config}): required = true, but its api_key_env I26_OPENAI_KEY is not set"
    check = _run_env({}, "check", config)
    serve = _run_env({}, "serve", config, "--port", str(free_port()))
    assert check.returncode == 1 and said in check.stderr
    assert serve.returncode == 1 and said in serve.stderr
    assert _run_env({"I26_OPENAI_KEY": "sk-0123456789abcdef"}, "check", config).returncode == 0


def test_check_and_explain_show_each_providers_kind_and_each_routes_protocol(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    config.write_text(_KEYED.format(required=""))
    check = _run_env({}, "check", config)
    explain = _run_env({}, "explain", config, "group/auto")
    assert "  claude  anthropic  https://api.anthropic.com/v1  key in the configuration\n" in check.stdout
    assert "  openai  openai  https://api.openai.com/v1  key from $I26_OPENAI_KEY" in check.stdout
    assert "  POST /v1/chat/completions  (OpenAI chat completions)\n" in check.stdout
    assert "  POST /v1/messages  (Anthropic Messages)\n" in check.stdout
    assert "  1. openai/gpt-4o  (openai)  [skipped: provider_not_configured" in explain.stdout
    assert "  2. claude/claude-sonnet-4-5  (anthropic)\n" in explain.stdout
    assert "rules of group/auto" not in explain.stdout  # no rule applies to it: no empty section


def test_check_warns_about_an_openai_kind_provider_sending_anthropics_headers(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    config.write_text(
        'allow_unauthenticated = true\n[providers.old]\nbase_url = "https://api.anthropic.com/v1"\n'
        'auth_header = "x-api-key"\napi_key = "sk-ant-0123456789abcdef"\n'
        'headers = {anthropic-version = "2023-06-01"}\n'
    )
    result = _run_env({}, "check", "--strict", config)
    assert result.returncode == 1
    assert (
        "  provider 'old' sends Anthropic's x-api-key and anthropic-version but speaks OpenAI's protocol "
        '(kind = "openai", the default): set kind = "anthropic"'
    ) in result.stdout


def test_serve_records_each_workers_requests_and_replay_reads_them_all_by_glob(
    tmp_path: Path, upstream: MockUpstream
) -> None:
    config = _config(tmp_path, upstream)
    pattern = tmp_path / "records" / "day-{pid}.jsonl"
    auth = {"authorization": f"Bearer {CLIENT_KEY}"}
    with serving(config, "--workers", "2", "--record", str(pattern), start_timeout=90) as (url, process):
        for tier in ("gold", "-", "-", "gold", "-", "-"):
            answer = httpx2.post(
                f"{url}/v1/chat/completions", json=chat_body("group/auto"), headers={**auth, "x-tier": tier}
            )
            assert answer.status_code == 200
    assert process.returncode == 0
    files = sorted((tmp_path / "records").glob("day-*.jsonl"))
    assert files and all(path.stem.removeprefix("day-").isdigit() for path in files)
    assert sum(len(path.read_text().splitlines()) for path in files) == 6
    # The new configuration drops the 'gold' rule: its two requests route to the default now.
    new = tmp_path / "new.toml"
    new.write_text(config.read_text().split('[[rules]]\nname = "gold"')[0])
    result = _run("replay", new, str(tmp_path / "records" / "day-*.jsonl"))
    assert result.returncode == 0, result.stderr
    head = f"replayed 6 requests from {files[0]}" if len(files) == 1 else f"replayed 6 requests from {len(files)} files"
    assert result.stdout.startswith(head)
    assert ": 4 route the same, 2 differently, 0 would be refused" in result.stdout
    assert "      2  group/auto: rule gold: [mock2/ok] -> rule default: [mock/ok mock2/ok]" in result.stdout
    both = _run("replay", config, *files, files[0])  # files named twice are read once
    assert both.returncode == 0 and ": 6 route the same, 0 differently" in both.stdout


def test_serve_refuses_one_record_file_for_several_workers_and_replay_a_glob_matching_nothing(
    tmp_path: Path, upstream: MockUpstream
) -> None:
    config = _config(tmp_path, upstream)
    shared = _run("serve", config, "--workers", "2", "--record", tmp_path / "all.jsonl", "--port", str(free_port()))
    assert shared.returncode == 1
    assert "put {pid} in the path (e.g. records-{pid}.jsonl), so that each worker writes a file of its own" in (
        shared.stderr
    )
    nothing = _run("replay", config, str(tmp_path / "none-*.jsonl"))
    assert nothing.returncode == 1 and f"no records match '{tmp_path / 'none-*.jsonl'}'" in nothing.stderr


def test_replay_counts_mis_shaped_records_and_escapes_what_it_prints(tmp_path: Path, upstream: MockUpstream) -> None:
    good = {"request_id": "r", "ref": "group/small", "facts": {}, "route": "default", "plan": ["mock/ok", "mock2/ok"]}
    hostile = [
        {**good, "facts": {"headers": ["x-tier"]}},  # facts of the wrong shape
        {**good, "facts": {"headers": 5}},
        {**good, "facts": {"metadata": "tier"}},
        {**good, "facts": {"headers": {"x-tier": "\u2603 snow"}}},  # not latin-1
        {**good, "facts": {"headers": {"x-tier": 7}}},
    ]
    tampered = {**good, "request_id": "\x1b]0;owned\x07\x1b[2J", "plan": ["\x1b[31mred"]}
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(record) + "\n" for record in [good, *hostile, tampered]))
    result = _run("replay", _config(tmp_path, upstream), records)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, result.stdout + result.stderr
    assert "lines were not records" in result.stdout
    assert "\x1b" not in result.stdout and "\\x1b" in result.stdout  # escaped, not sent to the terminal


def test_explain_refuses_a_body_nested_too_deep_as_the_router_does(tmp_path: Path, upstream: MockUpstream) -> None:
    body = tmp_path / "deep.json"
    body.write_text('{"messages": ' + "[" * 100_000 + "]" * 100_000 + "}")
    result = _run("explain", _config(tmp_path, upstream), "group/auto", "--body", body)
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr, result.stderr[-2000:]
    assert result.returncode != 0
    assert "nests deeper than" in result.stderr


def test_check_prints_a_files_warnings_beside_its_errors(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    config.write_text(_KEYED.format(required="") + '\n[groups.broken]\nmembers = ["nowhere/model"]\n')
    result = _run_env({}, "check", config)
    assert result.returncode == 1
    assert "nowhere" in result.stderr  # the error
    assert "provider 'openai' is skipped (provider_not_configured): its api_key_env I26_OPENAI_KEY is not set" in (
        result.stderr
    )  # and the warning, at once: fixing the error does not reveal it later


def test_check_names_an_environment_variable_that_sets_nothing_and_suggests_the_setting(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    config.write_text(_KEYED.format(required=""))
    result = _run_env({"ASGI_ROUTER_API_KEY": CLIENT_KEY, "I26_OPENAI_KEY": "sk-0123456789abcdef"}, "check", config)
    assert result.returncode == 0, result.stderr
    assert (
        "  environment variable ASGI_ROUTER_API_KEY names no router setting and is ignored "
        "(did you mean ASGI_ROUTER_API_KEYS?)"
    ) in result.stdout
    assert CLIENT_KEY not in result.stdout
    strict = _run_env({"ASGI_ROUTER_API_KEY": CLIENT_KEY, "I26_OPENAI_KEY": "k"}, "check", "--strict", config)
    assert strict.returncode == 1


def test_check_lists_the_usage_route_caller_and_session_caps_sticky_and_queue(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    config.write_text(
        _KEYED.format(required="").replace(
            "allow_unauthenticated = true\n",
            f'usage_route = "/v1/router/usage"\napi_keys = {{team-a = "{CLIENT_KEY}"}}\n',
        )
        + """
[groups.chat.sticky]
key = "session"
ttl = 600

[groups.chat.queue]
max_wait = 5

[callers.team-a]
usd_per_day = 2.5
rpm = 60
downgrade_to = "group/chat"
hard_limit = 2

[sessions]
tokens_per_session = 10000
"""
    )
    result = _run_env({"I26_OPENAI_KEY": "sk-0123456789abcdef"}, "check", config)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "  GET  /v1/router/usage  (each caller's own spend and caps, JSON)\n" in out
    assert "caller caps:\n  team-a: $2.5/day, 60 rpm; past a cap: served by group/chat, refused past 2x\n" in out
    assert "  sessions (header x-session-id): 10,000 tokens/session, kept 86400 s after the last request" in out
    assert "    sticky: a session keeps the member that served it for 600 s (at most 100,000 kept)\n" in out
    assert "    queue: waits up to 5 s for capacity, at most " in out


def test_explain_of_a_group_without_rules_prints_no_empty_section(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    config.write_text(_KEYED.format(required=""))
    explain = _run_env({}, "explain", config, "group/chat")
    assert explain.returncode == 0, explain.stderr
    assert "\n\n\n" not in explain.stdout
    assert "\n\nplan (route 'default', group/chat" in explain.stdout


def test_check_warns_of_a_downgrade_to_that_cannot_serve_a_route(tmp_path: Path) -> None:
    config = tmp_path / "router.toml"
    config.write_text(
        _KEYED.format(required="").replace(
            "allow_unauthenticated = true\n", f'api_keys = {{team-a = "{CLIENT_KEY}"}}\n'
        )
        + '\n[groups.cheap]\nmembers = ["openai/gpt-4o-mini"]\n'
        + '\n[callers.team-a]\nusd_per_day = 1.0\ndowngrade_to = "group/cheap"\n'
    )
    result = _run_env({"I26_OPENAI_KEY": "sk-0123456789abcdef"}, "check", config)
    assert result.returncode == 0, result.stderr
    assert (
        "  callers.team-a.downgrade_to group/cheap has no member that serves /v1/messages: its clients past the "
        "cap would be refused with protocol_mismatch"
    ) in result.stdout
    assert "serves /v1/chat/completions" not in result.stdout
