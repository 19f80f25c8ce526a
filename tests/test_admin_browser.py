"""The admin page in a real headless Chromium: an operator types the admin key into the page,
creates a key, the openai SDK uses it, its spend appears in the page, the operator revokes it and
the SDK gets 401. Every value is shown as text (a key named like markup stays text)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from asgi_router import ModelRouter

from .browser import Browser, need_chromium
from .conftest import host_app, make_settings
from .mock_upstream import MockUpstream
from .servers import ServerThread

ADMIN_KEY = "admin-key-0123456789abcdef"
MARKUP = '<img src=x onerror="document.title=1">'


@pytest.fixture
def served(upstream: MockUpstream, tmp_path: Path) -> Iterator[ServerThread]:
    settings = make_settings(
        upstream.url,  # type: ignore[attr-defined]
        allow_unauthenticated=False,
        admin_keys=[ADMIN_KEY],
        ledger_url=f"sqlite:///{tmp_path}/ledger.db",
        ledger_flush_interval=0.1,
    )
    with ServerThread(ModelRouter(host_app(), settings=settings)) as server:
        yield server


def _set(browser: Browser, element: str, value: str) -> None:
    browser.evaluate(f"document.getElementById({json.dumps(element)}).value = {json.dumps(value)}")


def _click(browser: Browser, selector: str) -> None:
    browser.evaluate(f"document.querySelector({json.dumps(selector)}).click()")


def test_a_key_made_in_the_page_serves_the_sdk_shows_its_spend_and_once_revoked_gets_401(
    served: ServerThread,
) -> None:
    with Browser(need_chromium()) as browser:
        browser.open(f"{served.url}/admin/")
        _set(browser, "admin-key", ADMIN_KEY)
        _click(browser, "#login")
        browser.wait_for("!document.getElementById('main').hidden")
        _set(browser, "new-caller", "team-web")
        _set(browser, "new-name", MARKUP)
        _click(browser, "#create")
        secret = browser.wait_for("document.getElementById('secret').dataset.secret")
        key_id = browser.wait_for("document.querySelector('#keys tr')?.dataset.id")  # the list follows the secret
        row = f"#keys tr[data-id={json.dumps(key_id)}]"
        assert browser.evaluate(f"document.querySelector({json.dumps(row)}).cells[2].textContent") == MARKUP
        assert browser.evaluate("document.querySelectorAll('#keys img').length") == 0
        assert document_cookie(browser) == ""  # the admin key is never kept in a cookie

        with openai.OpenAI(base_url=f"{served.url}/v1", api_key=secret, max_retries=0) as sdk:
            sdk.chat.completions.create(model="mock/ok", messages=[{"role": "user", "content": "hi"}])
            spent = f"[...document.querySelectorAll('#spend-key tr')].some(r => r.cells[0].textContent === '{key_id}')"
            browser.wait_for(f"(document.getElementById('refresh').click(), {spent})")
            requests = (
                f"[...document.querySelectorAll('#spend-key tr')].find(r => r.cells[0].textContent === '{key_id}')"
            )
            assert browser.evaluate(f"{requests}.cells[1].textContent") == "1"
            assert browser.evaluate("document.querySelectorAll('#spend-day tr').length") == 1

            _click(browser, f"{row} .revoke")
            browser.wait_for(
                f"document.querySelector({json.dumps(row)})?.querySelector('.state')?.textContent === 'revoked'"
            )
            with pytest.raises(openai.AuthenticationError):
                sdk.chat.completions.create(model="mock/ok", messages=[{"role": "user", "content": "hi"}])


def document_cookie(browser: Browser) -> str:
    cookie: str = browser.evaluate("document.cookie")
    return cookie
