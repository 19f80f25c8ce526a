"""A sink that keeps what the router did with each request, for a test to wait for and check.

``ModelRouter(app, settings=..., sinks=[captured])``: each finished request arrives as a
:class:`~asgi_router.RequestRecord` (its attempts in ``events``). Records reach sinks after the
response, on the router's own schedule, so a test waits for the one it wants by request id (the
``x-request-id`` response header, or one the test sent itself).

The sink is synchronous and ``direct``: with a lifespan the router calls it from its sink worker
thread, without one (an app driven in-process, or mounted) on the request's own task, so it
captures in either case.
"""

from __future__ import annotations

import functools
import threading
import time

import anyio.to_thread

from asgi_router.observability.events import RequestRecord

__all__ = ["CapturedEvents"]


class CapturedEvents:
    """Keeps every :class:`~asgi_router.RequestRecord` the router hands it."""

    #: Called on the request's task when the router runs without a lifespan (see the module).
    direct = True

    def __init__(self) -> None:
        self._records: list[RequestRecord] = []
        self._arrived = threading.Condition()

    def __call__(self, record: RequestRecord) -> None:
        with self._arrived:
            self._records.append(record)
            self._arrived.notify_all()

    @property
    def records(self) -> list[RequestRecord]:
        """Every record so far, in the order they arrived (a copy)."""
        with self._arrived:
            return list(self._records)

    def clear(self) -> None:
        with self._arrived:
            self._records.clear()

    def wait(self, request_id: str, *, timeout: float = 5.0) -> RequestRecord:
        """The record of request ``request_id``, waiting up to ``timeout`` seconds for it.

        Blocks: for synchronous tests, or with the router on another thread (a served app).
        An async test whose router runs on its own loop awaits :meth:`wait_async`.
        """
        deadline = time.monotonic() + timeout
        with self._arrived:
            while True:
                found = [record for record in self._records if record.request_id == request_id]
                if found:
                    return found[-1]
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = ", ".join(record.request_id for record in self._records) or "none"
                    raise AssertionError(f"no record of request {request_id!r} within {timeout:g} s (captured: {seen})")
                self._arrived.wait(left)

    # The async twins take the same bound as the sync ones (ruff's ASYNC109 would rather leave it
    # to the caller's cancel scope): a test that forgot to bound its wait would hang, where this
    # one fails with the ids it did capture. A cancelled wait leaves its thread to run out alone.
    async def wait_async(self, request_id: str, *, timeout: float = 5.0) -> RequestRecord:  # noqa: ASYNC109
        """:meth:`wait` without blocking the event loop (the router may be running on it)."""
        wait = functools.partial(self.wait, request_id, timeout=timeout)
        return await anyio.to_thread.run_sync(wait, abandon_on_cancel=True)

    def attempts(self, request_id: str, *, timeout: float = 5.0) -> list[tuple[str, str, str]]:
        """``(candidate, outcome, reason)`` of each attempt of request ``request_id``, in order,
        once its record is in: ``[("openai/gpt-4o", "failed", "rate_limited"),
        ("backup/llama", "served", "served")]``."""
        return _attempts(self.wait(request_id, timeout=timeout))

    async def attempts_async(
        self,
        request_id: str,
        *,
        timeout: float = 5.0,  # noqa: ASYNC109
    ) -> list[tuple[str, str, str]]:
        """:meth:`attempts` without blocking the event loop."""
        return _attempts(await self.wait_async(request_id, timeout=timeout))


def _attempts(record: RequestRecord) -> list[tuple[str, str, str]]:
    return [(event.candidate, event.outcome, event.reason) for event in record.events]
