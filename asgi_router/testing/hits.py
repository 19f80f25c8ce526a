"""What a fake upstream received: one :class:`Hit` per request, and what became of it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Self

__all__ = ["Hit"]


@dataclass(eq=False)
class Hit:
    """One request the fake upstream received, updated while it is answered.

    ``model``, ``path``, ``headers`` (lower-case names), ``body`` (the parsed JSON, ``None`` if
    there was none) and ``stream`` say what arrived. ``status`` is the status the fake answered
    (``None`` while it has sent none); ``completed`` is true once the whole answer went out, and
    ``disconnected`` if the client went away first (a router giving up on a timeout, or
    cancelling the call because its own client left). A stream the fake broke on purpose is
    neither. :meth:`wait` waits until the fake is done with the request.
    """

    model: str
    path: str
    headers: dict[str, str]
    body: Any
    stream: bool
    method: str = "POST"
    #: The client's port: tells the connections of a pool apart.
    client_port: int = 0
    #: The query string, as it came (``""``: none).
    query: str = ""
    status: int | None = None
    completed: bool = False
    disconnected: bool = False
    _done: threading.Event = field(default_factory=threading.Event, init=False, repr=False)

    @property
    def request_id(self) -> str | None:
        """The request's ``x-request-id`` header (a router sends its own on every attempt)."""
        return self.headers.get("x-request-id")

    @property
    def done(self) -> bool:
        """Whether the fake has finished with this request (answered, broke it, or saw the
        client leave)."""
        return self._done.is_set()

    def wait(self, timeout: float = 5.0) -> Self:
        """Block until the fake has finished with this request; ``AssertionError`` after
        ``timeout`` seconds."""
        if not self._done.wait(timeout):
            raise AssertionError(f"the fake upstream did not finish {self.method} {self.path} ({self.model!r})")
        return self

    def finish(self) -> None:
        """Mark the request finished (the fake does, when it is done answering)."""
        self._done.set()
