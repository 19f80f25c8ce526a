"""``JsonlSink``: one line per routed request, with the facts the rules read and nothing else of it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from asgi_router import JsonlSink

from .conftest import CLIENT_KEY
from .mock_upstream import MockUpstream
from .routing_helpers import chat_body, router_client

pytestmark = pytest.mark.anyio

_RULES = {
    "groups": {"small": {"members": ["mock/ok"]}, "auto": {"rules": True, "members": ["group/small"]}},
    "rules": [
        {"name": "gold", "headers": {"x-tier": "gold"}, "route": "mock2/ok"},
        {"name": "team", "metadata": {"team": "search"}, "route": "mock2/ok"},
        {"name": "keyed", "headers": {"authorization": "Bearer x"}, "route": "mock2/ok"},  # never recorded
    ],
    "api_keys": [CLIENT_KEY],
}


async def test_a_line_holds_the_rules_facts_and_the_attempts_and_nothing_else_of_the_request(
    upstream: MockUpstream, tmp_path: Path
) -> None:
    records = tmp_path / "records.jsonl"
    headers = {"authorization": f"Bearer {CLIENT_KEY}", "x-tier": "silver", "x-user": "alice@example.com"}
    body = chat_body("group/auto", "my private question", metadata={"team": "ads", "user": "alice"}, tools=[])
    async with router_client(upstream, router={"sinks": [JsonlSink(records)]}, **_RULES) as (client, _):
        response = await client.post("/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 200
    text = records.read_text()
    (line,) = [json.loads(line) for line in text.splitlines()]
    assert set(line) == {
        "v",
        "request_id",
        "time",
        "ref",
        "facts",
        "route",
        "plan",
        "status",
        "winner",
        "latency",
        "attempts",
    }
    assert line["facts"] == {
        "prompt_tokens": line["facts"]["prompt_tokens"],
        "images": False,
        "tools": False,
        "stream": False,
        "reasoning": False,
        "headers": {"x-tier": "silver"},  # only the headers a rule names, never a credential
        "metadata": {"team": "ads"},  # only the keys a rule names
    }
    assert line["facts"]["prompt_tokens"] > 0
    assert (line["ref"], line["route"], line["plan"], line["status"], line["winner"]) == (
        "group/auto",
        "default",
        ["mock/ok"],
        200,
        "mock/ok",
    )
    assert [(a["candidate"], a["outcome"], a["reason"], a["status"]) for a in line["attempts"]] == [
        ("mock/ok", "served", "served", 200)
    ]
    assert line["request_id"] == response.headers["x-request-id"] and line["time"] > 1.6e9
    for private in ("private question", "alice", CLIENT_KEY, "Bearer"):
        assert private not in text


async def test_requests_that_never_reached_routing_are_not_written(upstream: MockUpstream, tmp_path: Path) -> None:
    records = tmp_path / "records.jsonl"
    auth = {"authorization": f"Bearer {CLIENT_KEY}"}
    async with router_client(upstream, router={"sinks": [JsonlSink(records)]}, **_RULES) as (client, _):
        assert (await client.post("/v1/chat/completions", json=chat_body("mock/ok"))).status_code == 401
        bad = await client.post("/v1/chat/completions", json=chat_body("no such/ref!"), headers=auth)
        assert bad.status_code == 400
        unknown = await client.post("/v1/chat/completions", json=chat_body("group/gone"), headers=auth)
        assert unknown.status_code == 404
    (line,) = [json.loads(line) for line in records.read_text().splitlines()]
    assert (line["ref"], line["status"], line["plan"]) == ("group/gone", 404, [])  # a new config may know it


def test_pid_in_the_path_gives_each_worker_process_a_file_of_its_own(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path / "records-{pid}.jsonl")
    assert sink.path == tmp_path / f"records-{os.getpid()}.jsonl"
