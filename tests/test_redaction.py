"""The redaction check itself: the leak tap (tests/redaction.py) sees what it claims, and flags leaks.

The tap listens during *every* test of the suite (``conftest.no_secret_leaks``): each log
record, router response and router exception is checked for the configured keys and any prefix
of them longer than 4 characters, and a leak fails the test that produced it. These tests show
that the tap is wired in and would catch a leak, and that the router's logger scrubs a key that
reaches it through an exception message.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx2
import pytest
from asgi_lifespan import LifespanManager

from asgi_router import ModelRouter, RequestRecord, RouterSettings
from asgi_router.observability.sinks import EventBus
from asgi_router.transports.provider import ProviderRuntime

from .conftest import API_KEY, CLIENT_KEY, host_app
from .fakes import FakeTransport
from .redaction import LeakTap

pytestmark = pytest.mark.anyio


def test_tap_flags_a_five_character_prefix_in_any_logger_and_not_four(leak_tap: LeakTap) -> None:
    logging.getLogger("some.other.library").warning("token starts %s", API_KEY[:4])
    assert leak_tap.take() == []
    logging.getLogger("some.other.library").warning("token starts %s", API_KEY[:5])
    leaks = leak_tap.take()
    assert len(leaks) == 1 and "some.other.library" in leaks[0]


def test_tap_flags_a_key_in_a_log_records_extra_and_traceback(leak_tap: LeakTap) -> None:
    class Holder:
        def __repr__(self) -> str:
            return f"Holder({CLIENT_KEY})"

    logging.getLogger("elsewhere").warning("event", extra={"payload": Holder()})
    try:
        raise RuntimeError(f"bad key {API_KEY}")
    except RuntimeError:
        logging.getLogger("elsewhere").exception("failed")
    assert len(leak_tap.take()) == 2


async def _run(app: Any, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        pass

    async def fake_router_call(router: Any, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    await app.wrap(fake_router_call)(None, {"type": "http"}, receive, send)


async def test_tap_flags_keys_in_error_bodies_and_headers_but_not_in_upstream_success_bodies(
    leak_tap: LeakTap,
) -> None:
    await _run(leak_tap, 502, [], f'{{"error": "{API_KEY}"}}'.encode())
    assert len(leak_tap.take()) == 1
    await _run(leak_tap, 200, [(b"x-debug", API_KEY.encode())], b"{}")
    assert len(leak_tap.take()) == 1
    await _run(leak_tap, 200, [], f'data: {{"error": {{"message": "{API_KEY}"}}}}\n\n'.encode())
    assert len(leak_tap.take()) == 1
    await _run(leak_tap, 200, [], f'{{"headers": {{"authorization": "Bearer {API_KEY}"}}}}'.encode())
    assert leak_tap.take() == []  # an upstream's own 2xx content (the mock's echo scenario)


async def test_tap_is_wired_into_every_router_and_every_logger(leak_tap: LeakTap, settings: RouterSettings) -> None:
    records, responses, requests = leak_tap.records_seen, leak_tap.responses_seen, leak_tap.requests_seen
    async with (
        LifespanManager(ModelRouter(host_app(), settings=settings)) as manager,
        httpx2.AsyncClient(transport=httpx2.ASGITransport(app=manager.app), base_url="http://r") as client,
    ):
        await client.post("/v1/chat/completions", json={"model": "mock/ok", "messages": []})
    assert leak_tap.responses_seen == responses + 1
    assert leak_tap.records_seen >= records + 3  # the request line and the HTTP stack's debug lines
    assert leak_tap.requests_seen == requests + 1  # the record published to the event sinks


def test_tap_flags_a_key_in_a_record_published_to_the_sinks(leak_tap: LeakTap) -> None:
    record = RequestRecord("r-1", "mock/ok", principal=f"key {API_KEY[:8]}")
    EventBus([], 1).publish(record)
    assert len(leak_tap.take()) == 1
    EventBus([], 1).publish(RequestRecord("r-2", "mock/ok", principal="team-a"))
    assert leak_tap.take() == []


async def test_transport_exception_carrying_the_key_is_logged_scrubbed_and_never_sent(
    leak_tap: LeakTap, settings: RouterSettings, caplog: pytest.LogCaptureFixture
) -> None:
    class Leaky(FakeTransport):
        """A transport whose error message includes the request's headers (a plausible bug)."""

        async def send(self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes) -> Any:
            raise ValueError(f"cannot send {headers}")

    caplog.set_level(logging.ERROR, logger="asgi_router")
    router = ModelRouter(host_app(), settings=settings, transport=Leaky())
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=router), base_url="http://r") as client:
        response = await client.post("/v1/chat/completions", json={"model": "mock/ok", "messages": []})
    assert response.status_code == 500  # the router's own failure (router_error)
    assert [record.exc_text for record in caplog.records if record.exc_text]  # the traceback was logged...
    assert API_KEY not in caplog.text and "[redacted]" in caplog.text  # ...with the key scrubbed
    assert leak_tap.take() == []
