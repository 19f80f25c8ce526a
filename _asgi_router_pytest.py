"""asgi_router's pytest plugin: the ``fake_upstream`` and ``fake_anthropic_upstream`` fixtures.

pytest loads this module in every run of an environment where asgi-router is installed (the
``pytest11`` entry point), so it lives outside the ``asgi_router`` package and imports nothing
but pytest: importing the library (its HTTP clients, pydantic) or uvicorn would slow down every
test run, including ones that never use the fixture. The kit is imported when a test first asks
for the fixture.

For the session it also sets ``ASGI_ROUTER_DEFAULT_LEDGER_URL`` to ``memory://`` (unless the
environment sets it already): a router built in a test with ``admin_keys`` and no ``ledger_url``
keeps its keys and spend in memory, instead of in ``asgi_router.sqlite3`` in the directory pytest
runs in (a file one test run would leave for the next to read).

One fake upstream of each kind serves the whole session (started when a test first asks for
it), reset (scripts and hits forgotten) before each test that uses it. It runs on a thread of
its own, so sync tests and anyio tests use it alike.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

import pytest

if TYPE_CHECKING:
    from asgi_router.testing import FakeUpstream

__all__ = [
    "DEFAULT_LEDGER_VARIABLE",
    "fake_anthropic_upstream",
    "fake_upstream",
    "pytest_configure",
    "pytest_unconfigure",
]

#: ``asgi_router.config.ledger_settings.DEFAULT_LEDGER_VARIABLE``, written out: this module imports
#: nothing of the library (a test pins that the two agree).
DEFAULT_LEDGER_VARIABLE: Final = "ASGI_ROUTER_DEFAULT_LEDGER_URL"
#: Whether this session set it (and so removes it at the end).
_set_ledger_default = False


def pytest_configure(config: pytest.Config) -> None:
    """Tests' routers with ``admin_keys`` and no ``ledger_url`` keep their ledger in memory."""
    global _set_ledger_default
    if DEFAULT_LEDGER_VARIABLE not in os.environ:
        os.environ[DEFAULT_LEDGER_VARIABLE] = "memory://"
        _set_ledger_default = True


def pytest_unconfigure(config: pytest.Config) -> None:
    global _set_ledger_default
    if _set_ledger_default:
        os.environ.pop(DEFAULT_LEDGER_VARIABLE, None)
        _set_ledger_default = False


def _serve(kind: str) -> Iterator[FakeUpstream]:
    from asgi_router.testing import FakeUpstream

    with FakeUpstream(kind=kind) as upstream:
        yield upstream


@pytest.fixture(scope="session")
def _asgi_router_fake_upstream_server() -> Iterator[FakeUpstream]:
    yield from _serve("openai")


@pytest.fixture(scope="session")
def _asgi_router_fake_anthropic_server() -> Iterator[FakeUpstream]:
    yield from _serve("anthropic")


@pytest.fixture
def fake_upstream(_asgi_router_fake_upstream_server: FakeUpstream) -> FakeUpstream:
    """An OpenAI-compatible fake upstream on 127.0.0.1, with no scripts and no hits yet.

    ``fake_upstream.provider()`` is a provider entry pointing at it; ``fake_upstream.script(
    model_id, *replies)`` says what a model answers (``asgi_router.testing.reply``).
    """
    _asgi_router_fake_upstream_server.reset()
    return _asgi_router_fake_upstream_server


@pytest.fixture
def fake_anthropic_upstream(_asgi_router_fake_anthropic_server: FakeUpstream) -> FakeUpstream:
    """A fake of Anthropic's Messages API (``FakeUpstream(kind="anthropic")``) on 127.0.0.1,
    with no scripts and no hits yet; ``fake_anthropic_upstream.provider()`` is a provider entry
    of ``kind = "anthropic"`` pointing at it."""
    _asgi_router_fake_anthropic_server.reset()
    return _asgi_router_fake_anthropic_server
