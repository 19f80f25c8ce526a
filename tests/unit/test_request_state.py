"""One request, one state: the record is built once from it, and the router's headers in one place.

The request's :class:`RequestState` is what every phase writes; the published record is built
from it in one function when the request ends, so no module can leave a half-written record
behind or read one back to steer the request. The scans below walk the whole package, so a
change that writes a record again, or sets one of the router's headers elsewhere, fails here.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import asgi_router
from asgi_router.observability.events import CacheOutcome
from asgi_router.request.request_state import RequestState
from asgi_router.request.router_headers import add_router_headers
from asgi_router.request.spend import Spend, TokenCount

_PACKAGE = Path(asgi_router.__file__).parent
_ROOT = _PACKAGE.parent
#: The one function that calls ``RequestRecord(``.
_BUILDER = "asgi_router/request/request_state.py:RequestState.close"


def _sources() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(_ROOT)), ast.parse(path.read_text(encoding="utf-8")))
        for path in sorted(_PACKAGE.rglob("*.py"))
    ]


def _functions(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """Every function of ``tree`` with its qualified name (nested ones inside their outer one)."""
    found: list[tuple[str, ast.AST]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + child.name, child))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _is_record(node: ast.expr) -> bool:
    """Whether ``node`` names a record: ``record`` or ``<anything>.record``."""
    return (isinstance(node, ast.Name) and node.id == "record") or (
        isinstance(node, ast.Attribute) and node.attr == "record"
    )


def _logging_record(function: ast.AST) -> bool:
    """A logging filter's ``record`` (a ``logging.LogRecord``), not the router's."""
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    return any(
        arg.arg == "record" and arg.annotation is not None and "LogRecord" in ast.unparse(arg.annotation)
        for arg in function.args.args
    )


def _writes(node: ast.AST) -> list[str]:
    """What in ``node`` writes a record's attribute or adds to its events."""
    writes: list[str] = []
    for inner in ast.walk(node):
        targets: list[ast.expr] = []
        if isinstance(inner, ast.Assign):
            targets = list(inner.targets)
        elif isinstance(inner, (ast.AugAssign, ast.AnnAssign)):
            targets = [inner.target]
        for target in targets:
            for part in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(part, (ast.Attribute, ast.Subscript)) and _is_record(part.value):
                    writes.append(ast.unparse(part))
        if (
            isinstance(inner, ast.Call)
            and isinstance(inner.func, ast.Attribute)
            and inner.func.attr in ("append", "extend", "insert")
            and isinstance(inner.func.value, ast.Attribute)
            and inner.func.value.attr == "events"
            and _is_record(inner.func.value.value)
        ):
            writes.append(ast.unparse(inner.func))
    return writes


def test_a_request_record_is_built_in_one_function_only() -> None:
    builders = set()
    for path, tree in _sources():
        for name, function in _functions(tree):
            for node in ast.walk(function):
                if isinstance(node, ast.Call):
                    called = node.func
                    if (isinstance(called, ast.Name) and called.id == "RequestRecord") or (
                        isinstance(called, ast.Attribute) and called.attr == "RequestRecord"
                    ):
                        builders.add(f"{path}:{name}")
    assert builders == {_BUILDER}


def test_no_code_writes_a_record_or_adds_to_its_events_after_it_is_built() -> None:
    written = []
    for path, tree in _sources():
        for name, function in _functions(tree):
            if _logging_record(function):
                continue
            written += [f"{path}:{name}: {write}" for write in _writes(function)]
    assert not written, "a record is write-once: write the request's state instead\n" + "\n".join(written)


def test_the_routers_header_prefix_is_spelt_in_the_builder_and_the_upstream_filter_only() -> None:
    spelt = {
        str(path.relative_to(_ROOT))
        for path in _PACKAGE.rglob("*.py")
        if "x-router-" in path.read_text(encoding="utf-8")
    }
    assert spelt == {"asgi_router/request/router_headers.py", "asgi_router/responses/headers.py"}


def _state() -> RequestState:
    async def receive() -> dict[str, object]:
        return {"type": "http.disconnect"}

    async def send(message: object) -> None:
        return None

    return RequestState({"type": "http", "headers": []}, receive, send, "req-1", "/v1/chat/completions")


def test_the_router_headers_say_only_what_is_known_yet() -> None:
    assert add_router_headers([], _state(), None, 0) == [(b"x-request-id", b"req-1"), (b"x-router-attempts", b"0")]


def test_the_router_headers_say_the_winner_rule_stickiness_cap_and_canned_reply() -> None:
    state = _state()
    state.rule, state.sticky, state.limit, state.degraded = "long", ("chat", "hit"), "usd_per_day", True
    headers = add_router_headers([(b"content-type", b"application/json")], state, "p/m", 2)
    assert headers == [
        (b"content-type", b"application/json"),
        (b"x-request-id", b"req-1"),
        (b"x-router-attempts", b"2"),
        (b"x-router-model", b"p/m"),
        (b"x-router-route", b"long"),
        (b"x-router-sticky", b"hit"),
        (b"x-router-limit", b"usd_per_day"),
        (b"x-router-degraded", b"1"),
    ]


def test_the_record_is_built_from_what_the_request_came_to() -> None:
    state = _state()
    state.ref, state.rule, state.plan, state.status, state.winner = "group/chat", "long", ("p/m",), 200, "p/m"
    state.spend = Spend(TokenCount(10, 5, True), 0.25)
    at = state.event("p/m", "served", "served", 200, 0.5)
    record = state.close(now=10.0, latency=0.75)
    assert at == 0
    assert (record.request_id, record.ref, record.route, record.plan) == ("req-1", "group/chat", "long", ("p/m",))
    assert (record.status, record.winner, record.latency) == (200, "p/m", 0.75)
    assert (record.prompt_tokens, record.completion_tokens, record.tokens_measured, record.cost_usd) == (
        10,
        5,
        True,
        0.25,
    )
    assert [(e.index, e.candidate, e.outcome) for e in record.events] == [(0, "p/m", "served")]


def test_a_request_whose_client_left_is_recorded_499_with_its_attempt_in_flight_aborted() -> None:
    state = _state()
    state.in_flight = ("p/m", 4.0)
    state.disconnected = True
    record = state.close(now=10.0, latency=6.0)
    assert record.status == 499
    assert record.route == "default"  # no rule chose a plan
    [event] = record.events
    assert (event.candidate, event.outcome, event.reason, event.latency) == (
        "p/m",
        "aborted",
        "client_disconnected",
        6.0,
    )


def test_every_record_field_comes_from_the_state_field_of_its_name() -> None:
    state = _state()
    for name, value in {
        "ref": "group/chat",
        "stream": True,
        "status": 200,
        "winner": "p/m",
        "bytes_relayed": 7,
        "rule": "long",
        "plan": ("p/m", "q/m"),
        "degraded": True,
        "principal": "alice",
        "started_at": 5.0,
        "hedge": "won",
        "facts": {"tokens": 3},
        "resumes": (("p/m", "served"),),
        "caller": "alice",
        "caller_outcome": "downgraded",
        "limit": "rpm",
        "sticky": ("chat", "hit"),
        "queued": ("chat", "served", 0.5),
        "cache": CacheOutcome("chat", "hit", 15, 0.25, 3),
        "key_id": "key-1",
        "session": "ab" * 32,
        "guardrails": [("pii", "input", "mask"), ("schema", "output", "fail_over")],
    }.items():
        setattr(state, name, value)
    state.spend = Spend(TokenCount(10, 5, False, 6, 2), 0.25)
    record = dataclasses.asdict(state.close(now=1.0, latency=0.75))
    assert record == {
        "request_id": "req-1",
        "ref": "group/chat",
        "stream": True,
        "status": 200,
        "winner": "p/m",
        "bytes_relayed": 7,
        "latency": 0.75,
        "events": [],
        "route": "long",
        "plan": ("p/m", "q/m"),
        "degraded": True,
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "cost_usd": 0.25,
        "principal": "alice",
        "started_at": 5.0,
        "tokens_measured": False,
        "hedge": "won",
        "facts": {"tokens": 3},
        "resumes": (("p/m", "served"),),
        "caller": "alice",
        "caller_outcome": "downgraded",
        "limit": "rpm",
        "sticky": ("chat", "hit"),
        "queued": ("chat", "served", 0.5),
        "cached_prompt_tokens": 6,  # the spend's cache counts
        "cache_write_tokens": 2,
        "cache": {
            "group": "chat",
            "outcome": "hit",
            "saved_tokens": 15,
            "saved_usd": 0.25,
            "age": 3,
            "similarity": None,
        },
        "key_id": "key-1",
        "session": "ab" * 32,
        "guardrails": (("pii", "mask"), ("schema", "fail_over")),
        "guardrail_stages": ("input", "output"),
    }
