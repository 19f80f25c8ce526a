"""A tap that watches every test for leaked secrets: logs, router responses, router exceptions.

Installed for the whole session by ``conftest.py``; checked after every test, so a leak fails
the test that caused it. It looks at:

* every log record any logger emits (message, exception text, stack, and the ``extra``
  attributes, which carry the router's ``RequestRecord`` and its events), with the router's
  and the HTTP client's loggers turned up to DEBUG so that everything they can say is said;
* every response the router sends: all headers, whole bodies of error responses (status >= 400)
  and any body chunk that carries an ``"error"`` object (a mid-stream error event);
* the text of any exception that escapes the router;
* every finished request the router publishes to its event sinks (``sinks.py``): the
  :class:`~asgi_router.observability.events.RequestRecord` with all its attempt events, as a sink would get
  it. The tap sits on :meth:`EventBus.publish` rather than in a sink's queue, so that records
  are checked before the test ends, also those of routers running without a lifespan (whose
  sinks never run).

A secret leaks if it, or any prefix of it longer than 4 characters, appears: every such prefix
starts with the secret's first 5 characters, so that is the one fragment searched for. A 2xx
body is the upstream's own content (the mock's ``echo`` scenario returns the headers it got, by
design) and is not the router's to scrub.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Final

from starlette.types import Message, Receive, Scope, Send

from asgi_router import ModelRouter, RequestRecord
from asgi_router.observability.sinks import EventBus

__all__ = ["LOUD_LOGGERS", "LeakTap", "quiet"]

#: Loggers turned up to DEBUG while the tap listens: the router's own, and the HTTP stack's.
LOUD_LOGGERS: Final = ("asgi_router", "httpx2", "httpcore2", "aiohttp")

# LogRecord attributes that are not ``extra``: everything else was attached by the caller.
_STANDARD_ATTRS: Final = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class LeakTap(logging.Handler):
    """Collects every place a secret fragment showed up; ``leaks`` is empty when all is well."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__(level=logging.DEBUG)
        self.fragments = tuple(secret[:5] for secret in secrets)
        self.fragments_b = tuple(fragment.encode() for fragment in self.fragments)
        self.leaks: list[str] = []
        self.records_seen = 0
        self.responses_seen = 0
        self.requests_seen = 0
        self._lock = threading.Lock()

    # --- what counts as a leak ------------------------------------------------------------

    def check_text(self, where: str, text: str) -> None:
        for fragment in self.fragments:
            if fragment in text:
                with self._lock:
                    self.leaks.append(f"{where}: {fragment!r}... in {text[:300]!r}")

    def check_bytes(self, where: str, data: bytes) -> None:
        for fragment in self.fragments_b:
            if fragment in data:
                with self._lock:
                    self.leaks.append(f"{where}: {fragment!r}... in {data[:300]!r}")

    def take(self) -> list[str]:
        """The leaks seen since the last call, and forget them."""
        with self._lock:
            leaks, self.leaks = self.leaks, []
        return leaks

    # --- logging ------------------------------------------------------------------------

    def emit(self, record: logging.LogRecord) -> None:
        self.records_seen += 1
        try:
            parts = [record.getMessage()]
        except Exception:  # a malformed record still has its raw parts
            parts = [str(record.msg), repr(record.args)]
        if record.exc_info:
            parts.append("".join(traceback.format_exception(*record.exc_info)))
        if record.exc_text:
            parts.append(record.exc_text)
        if record.stack_info:
            parts.append(record.stack_info)
        parts.extend(repr(value) for key, value in vars(record).items() if key not in _STANDARD_ATTRS)
        self.check_text(f"log record {record.name}", "\n".join(parts))

    @contextmanager
    def listening(self) -> Iterator[None]:
        """Attach to the root logger with the loud loggers at DEBUG; restore on exit."""
        saved = {name: logging.getLogger(name).level for name in LOUD_LOGGERS}
        root = logging.getLogger()
        root.addHandler(self)
        for name in LOUD_LOGGERS:
            logging.getLogger(name).setLevel(logging.DEBUG)
        try:
            yield
        finally:
            root.removeHandler(self)
            for name, level in saved.items():
                logging.getLogger(name).setLevel(level)

    # --- the router's responses and exceptions ------------------------------------------

    def wrap(self, original: Any) -> Any:
        """``ModelRouter.__call__`` with every response message and escaping exception checked."""
        tap = self

        async def tapped(router: ModelRouter, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await original(router, scope, receive, send)
                return
            status = 0

            async def checked_send(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                    tap.responses_seen += 1
                    for name, value in message.get("headers", []):
                        tap.check_bytes("response header", bytes(name) + b": " + bytes(value))
                elif message["type"] == "http.response.body":
                    body = bytes(message.get("body", b""))
                    if status >= 400 or b'"error"' in body:
                        tap.check_bytes(f"{status} response body", body)
                await send(message)

            try:
                await original(router, scope, receive, checked_send)
            except BaseException as exc:
                tap.check_text("exception from the router", "".join(traceback.format_exception(exc)))
                raise

        return tapped

    # --- event sinks --------------------------------------------------------------------

    def __call__(self, record: RequestRecord) -> None:
        """A sink: check a finished request's record and every attempt event in it."""
        self.requests_seen += 1
        self.check_text(f"published record of {record.request_id}", repr(record))

    def wrap_publish(self, original: Any) -> Any:
        """``EventBus.publish`` that hands each record to this tap first, as to a sink."""
        tap = self

        def publish(bus: EventBus, record: RequestRecord) -> None:
            tap(record)
            original(bus, record)

        return publish


@contextmanager
def quiet(*names: str) -> Iterator[None]:
    """Loggers ``names`` at WARNING for a while (load tests: pytest keeps every record in memory)."""
    saved = {name: logging.getLogger(name).level for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
