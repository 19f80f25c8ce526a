"""asgi_router's pytest plugin: the ``fake_upstream`` fixture.

pytest loads this module in every run of an environment where asgi-router is installed (the
``pytest11`` entry point), so it lives outside the ``asgi_router`` package and imports nothing
but pytest: importing the library (its HTTP clients, pydantic) or uvicorn would slow down every
test run, including ones that never use the fixture. The kit is imported when a test first asks
for the fixture.

One fake upstream serves the whole session, reset (scripts and hits forgotten) before each test
that uses it. It runs on a thread of its own, so sync tests and anyio tests use it alike.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from asgi_router.testing import FakeUpstream

__all__ = ["fake_upstream"]


@pytest.fixture(scope="session")
def _asgi_router_fake_upstream_server() -> Iterator[FakeUpstream]:
    from asgi_router.testing import FakeUpstream

    with FakeUpstream() as upstream:
        yield upstream


@pytest.fixture
def fake_upstream(_asgi_router_fake_upstream_server: FakeUpstream) -> FakeUpstream:
    """An OpenAI-compatible fake upstream on 127.0.0.1, with no scripts and no hits yet.

    ``fake_upstream.provider()`` is a provider entry pointing at it; ``fake_upstream.script(
    model_id, *replies)`` says what a model answers (``asgi_router.testing.reply``).
    """
    _asgi_router_fake_upstream_server.reset()
    return _asgi_router_fake_upstream_server
