"""Scripted upstream transports, injected with ``ModelRouter(app, transport=...)``.

A test that must control exactly what an upstream answers, and when (a chunk held back, an
error raised by the client itself, a response that never ends), builds its router on one of
these instead of a real HTTP client: no socket, no pool, nothing to open or close.
"""

from __future__ import annotations

from asgi_router.transports.provider import ProviderRuntime
from asgi_router.transports.transport import UpstreamResponse

__all__ = ["FakeTransport"]


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
