"""Scripted upstream transports, injected with ``ModelRouter(app, transport=...)``.

A test that must control exactly what an upstream answers, and when (a chunk held back, an
error raised by the client itself, a response that never ends), builds its router on one of
these instead of a real HTTP client: no socket, no pool, nothing to open or close.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from asgi_router.transports.provider import ProviderRuntime
from asgi_router.transports.transport import UpstreamResponse

__all__ = ["Answer", "FakeTransport", "ScriptedTransport"]

_COMPLETION = json.dumps(
    {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 0,
        "model": "scripted",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
    }
).encode()


class FakeTransport:
    """What every scripted transport shares; a subclass says what :meth:`send` answers.

    It holds no connection, so it is always quiet (the leak checks that read
    ``router.transport`` pass trivially: the test checks its own responses instead).
    """

    is_open = False

    def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    def is_quiet(self) -> bool:
        return True

    def connections(self) -> int:
        return 0

    async def send(self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes) -> UpstreamResponse:
        raise NotImplementedError


@dataclass(frozen=True)
class Answer:
    """One scripted upstream answer: a status, headers and a whole body; with ``hang``, no answer
    at all (the send waits until it is cancelled); with ``stall``, the status and headers and then
    no body byte ever."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = _COMPLETION
    hang: bool = False
    stall: bool = False

    def __post_init__(self) -> None:
        self.headers.setdefault("content-type", "application/json")

    @classmethod
    def error(cls, status: int, message: str = "scripted failure", **headers: str) -> Answer:
        """An OpenAI-shaped error answer."""
        body = json.dumps({"error": {"message": message, "type": "server_error", "code": None}}).encode()
        return cls(status, {"content-type": "application/json", **headers}, body)


class _Answered:
    """A whole answer as an :class:`UpstreamResponse`: its body in one chunk."""

    def __init__(self, answer: Answer) -> None:
        self.status = answer.status
        self.raw_headers = [(name.encode(), value.encode()) for name, value in answer.headers.items()]
        self.drained = False
        self._body = answer.body
        self._stall = answer.stall
        self.chunks = self._read()

    async def _read(self) -> AsyncIterator[bytes]:
        if self._stall:
            await asyncio.Event().wait()
        self.drained = True
        yield self._body

    async def aclose(self) -> None:
        pass


class ScriptedTransport(FakeTransport):
    """Answers each send with the next scripted :class:`Answer`, the last one for good, and keeps
    the URL of every send. No socket and no thread: it runs on a fake-clock loop
    (:class:`tests.doubles.FakeClockLoop`), where a router's waits take no real time."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers) or [Answer()]
        self.sent: list[str] = []

    async def send(self, provider: ProviderRuntime, url: str, headers: dict[str, str], body: bytes) -> UpstreamResponse:
        self.sent.append(url)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if answer.hang:
            await asyncio.Event().wait()
        return _Answered(answer)
