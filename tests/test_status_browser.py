"""The status page in a real headless Chromium: the browser asks for credentials, the page draws a
tripped breaker as open, and an open tab follows what happens next.

A router with sticky groups, a queue and a provider that stated its limit shows them in its
Capacity table. The router is served by uvicorn on loopback with ``api_keys``; the tab answers the server's Basic
challenge with an API key as the password, as a person would in the browser's dialog. The
screenshot it takes is the one in the docs (``ASGI_ROUTER_SCREENSHOT=docs/img/status-page.png``
writes it there).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from asgi_router import ModelRouter, RouterSettings
from asgi_router.testing import FakeUpstream, reply

from .browser import Browser, need_chromium
from .conftest import CLIENT_KEY, host_app, make_settings
from .mock_upstream import MockUpstream
from .routing_helpers import chat_body
from .servers import ServerThread

_AUTH = {"authorization": f"Bearer {CLIENT_KEY}"}


@pytest.fixture(scope="module")
def served(upstream: MockUpstream, refused_url: str) -> Iterator[ServerThread]:
    settings = make_settings(
        upstream.url,  # type: ignore[attr-defined]
        refused_url,
        api_keys=[CLIENT_KEY],
        status_route="/router/status",
        groups={
            "coder": {"members": ["down/gpt-4o-mini", {"ref": "mock/ok", "rpm": 600, "tpm": 200000}, "mock2/ok"]},
        },
        breaker={"consecutive_failures": 2, "open_for": 60},
    )
    with ServerThread(ModelRouter(host_app(), settings=settings)) as server:
        with httpx2.Client(base_url=server.url, headers=_AUTH) as client:
            for _ in range(3):  # two failures trip down's breakers; the third skips it
                assert client.post("/v1/chat/completions", json=chat_body("group/coder")).status_code == 200
            assert client.post("/v1/chat/completions", json=chat_body("mock2/ok", stream=True)).status_code == 200
        yield server


def _phase(candidate: str) -> str:
    return f"document.querySelector('tr[data-candidate=\"{candidate}\"] .badge')?.dataset.phase"


def test_the_page_asks_for_credentials_and_shows_a_tripped_breaker_as_open(
    served: ServerThread, tmp_path: Path
) -> None:
    with Browser(need_chromium(), credentials=("ops", CLIENT_KEY)) as browser:
        browser.open(f"{served.url}/router/status?refresh=1")
        assert browser.challenges >= 1  # the browser was asked, and answered with the key
        assert browser.wait_for(_phase("down/gpt-4o-mini")) == "open"
        assert browser.evaluate(_phase("mock/ok")) == "closed"
        provider = "document.querySelector('tr[data-provider=\"down\"] .badge').dataset.phase"
        assert browser.evaluate(provider) == "open"
        half_opens = browser.evaluate(
            "document.querySelector('tr[data-candidate=\"down/gpt-4o-mini\"] .breaker').textContent"
        )
        assert "half-opens in" in half_opens
        assert "opened: failures" in half_opens  # why it opened, in words
        recent = browser.evaluate("document.getElementById('recent').textContent")
        assert "skipped circuit_open [failures]" in recent  # the skip's open cause
        budget = browser.evaluate("document.querySelector('tr[data-candidate=\"mock/ok\"]').textContent")
        assert "3 / 600" in budget
        rows = browser.evaluate("document.querySelectorAll('#recent tr[data-request]').length")
        assert rows == 4
        screenshot = browser.screenshot(tmp_path / "status-page.png")
    assert screenshot.startswith(b"\x89PNG\r\n\x1a\n") and len(screenshot) > 20_000
    wanted = os.environ.get("ASGI_ROUTER_SCREENSHOT")
    if wanted:  # the docs' picture, taken from this very page
        shutil.copyfile(tmp_path / "status-page.png", wanted)


def test_an_open_page_follows_new_requests_through_its_json(served: ServerThread) -> None:
    with Browser(need_chromium(), credentials=("ops", CLIENT_KEY)) as browser:
        browser.open(f"{served.url}/router/status?refresh=1")
        before = browser.evaluate("document.getElementById('updated').textContent")
        request_id = uuid.uuid4().hex
        with httpx2.Client(base_url=served.url, headers={**_AUTH, "x-request-id": request_id}) as client:
            assert client.post("/v1/chat/completions", json=chat_body("mock/ok")).status_code == 200
        # The tab re-reads the JSON twin with the credentials it was given once: no new dialog.
        challenges = browser.challenges
        row = f"document.querySelector('tr[data-request=\"{request_id}\"]')?.textContent"
        assert "mock/ok" in browser.wait_for(row, timeout=10)
        assert browser.evaluate("document.getElementById('stale').hidden") is True
        assert browser.challenges == challenges
        data = json.loads(browser.evaluate("document.getElementById('status-data').textContent"))
        assert data["generated_at"] > 0 and before


def test_the_page_shows_queues_sticky_groups_and_members_over_their_stated_limit() -> None:
    limits = {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "60s"}
    with FakeUpstream() as fake:
        fake.script("b", reply.ok(headers=limits))
        settings = RouterSettings(
            providers={"p1": fake.provider(), "p2": fake.provider()},
            groups={
                "s": {"strategy": "rotate", "members": ["p1/a", "p1/c"], "sticky": {"key": "session"}},
                "q": {"members": ["p2/b"], "queue": {"max_wait": 0.1}},
            },
            api_keys=[CLIENT_KEY],
            status_route="/router/status",
        )
        with ServerThread(ModelRouter(host_app(), settings=settings)) as server:
            with httpx2.Client(base_url=server.url, headers=_AUTH) as client:
                for _ in range(2):
                    answer = client.post(
                        "/v1/chat/completions", json=chat_body("group/s"), headers={"x-session-id": "c"}
                    )
                    assert answer.status_code == 200
                assert client.post("/v1/chat/completions", json=chat_body("group/q")).status_code == 200
                assert client.post("/v1/chat/completions", json=chat_body("group/q")).status_code == 429
            with Browser(need_chromium(), credentials=("ops", CLIENT_KEY)) as browser:
                browser.open(f"{server.url}/router/status")
                sticky = browser.wait_for("document.querySelector('tr[data-sticky=\"s\"]')?.textContent")
                queue = browser.evaluate("document.querySelector('tr[data-queue=\"q\"]').textContent")
                stated = browser.evaluate("document.querySelector('tr[data-stated=\"p2/b\"]').textContent")
                hidden = browser.evaluate("document.getElementById('capacity-section').hidden")
    assert "1 affinities" in sticky and "hit \u00d71" in sticky and "miss \u00d71" in sticky
    assert "0 waiting / 100" in queue and "timed out \u00d71" in queue
    assert "over its provider's stated limit" in stated and "resets in" in stated and "no requests left" in stated
    assert hidden is False


def test_the_page_shows_the_ledger_its_kind_url_and_lag(upstream: MockUpstream, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    settings = make_settings(
        upstream.url,  # type: ignore[attr-defined]
        api_keys=[CLIENT_KEY],
        status_route="/router/status",
        ledger_url=f"sqlite:///{ledger}",
    )
    with ServerThread(ModelRouter(host_app(), settings=settings)) as server:
        assert (
            httpx2.post(f"{server.url}/v1/chat/completions", json=chat_body("mock/ok"), headers=_AUTH).status_code
            == 200
        )
        with Browser(need_chromium(), credentials=("ops", CLIENT_KEY)) as browser:
            browser.open(f"{server.url}/router/status")
            shown = browser.wait_for(
                "document.getElementById('ledger').hidden ? '' : document.getElementById('ledger').textContent"
            )
    assert shown.startswith(f"ledger: sqlite sqlite:///{ledger} · lag ") and shown.endswith(" s"), shown
