"""What an upstream's headers may make the router do, at the client's boundary: real loopback
servers (the kit's fake upstream), the router on uvicorn, httpx as the client.

A rate-limit answer's wait is believed up to ``max_rate_limit_reset`` only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import FakeUpstream, reply

from .conftest import host_app
from .resilient import tag
from .servers import ServerThread

_FAST = {"connect": 1, "first_byte": 5, "idle": 5, "total": 10}


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as upstream:
        yield upstream


def _settings(fake: FakeUpstream, members: list[str], **overrides: Any) -> RouterSettings:
    providers = {name: fake.provider(timeouts=_FAST) for name in ("p1", "p2")}
    groups = {"g": {"members": members}}
    return RouterSettings(providers=providers, groups=groups, allow_unauthenticated=True, **overrides)


def _ask(server: ServerThread) -> httpx2.Response:
    body = {"model": "group/g", "messages": [{"role": "user", "content": "hi"}]}
    return httpx2.post(f"{server.url}/v1/chat/completions", json=body, timeout=10)


@pytest.mark.parametrize(
    "answer",
    [
        reply.status(429, retry_after="999999999"),
        reply.ok(headers={"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "999999999h"}),
        reply.ok(
            headers={
                "anthropic-ratelimit-requests-remaining": "0",
                "anthropic-ratelimit-requests-reset": "9999-12-31T23:59:59Z",
            }
        ),
    ],
    ids=["retry-after", "x-ratelimit-reset", "anthropic-reset"],
)
def test_an_upstream_reset_longer_than_max_rate_limit_reset_is_cut_to_it(fake: FakeUpstream, answer: Any) -> None:
    t = tag()
    fake.script(f"a{t}", answer)
    with ServerThread(ModelRouter(host_app(), settings=_settings(fake, [f"p1/a{t}"]))) as server:
        _ask(server)  # the member says when it may be called again
        benched = _ask(server)  # skipped until then: the router's own answer says when
    assert benched.status_code in (429, 503), benched.text
    assert benched.headers["retry-after"].isdigit()
    assert 290 <= int(benched.headers["retry-after"]) <= 300
    assert len([hit for hit in fake.hits if hit.model == f"a{t}"]) == 1


def test_max_rate_limit_reset_is_the_longest_retry_after_the_router_sends(fake: FakeUpstream) -> None:
    t = tag()
    fake.script(f"a{t}", reply.status(429, retry_after="3600"))
    settings = _settings(fake, [f"p1/a{t}"], max_rate_limit_reset=42)
    with ServerThread(ModelRouter(host_app(), settings=settings)) as server:
        first, benched = _ask(server), _ask(server)
    assert first.status_code == 429 and int(first.headers["retry-after"]) <= 42
    assert benched.headers["retry-after"].isdigit() and 30 <= int(benched.headers["retry-after"]) <= 42
