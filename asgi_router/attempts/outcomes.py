"""What one attempt can end in, and what an admitted candidate carries into its attempt.

Plain records, shared by the attempt loop (``loop.py``), the hedging race (``hedging.py``),
the relay and the middleware: :class:`Committed` (a winner, nothing sent yet), :class:`Refused`
(a fatal answer to pass through), :class:`Failed` (move on, maybe retry), and :class:`Ready`
(a candidate past admission, holding its gate lease). A committed stream that may be continued
after a break carries what continues it (:class:`Continues`, made by the attempt loop in
``continuing.py``): the answer phase's relay reports a break to it, and the attempts decide
whether and where the stream goes on; the relay only appends what the continuation sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from asgi_router.core.candidate import Candidate
from asgi_router.core.reasons import Reason
from asgi_router.core.router_errors import RouterError
from asgi_router.protocols.chat_to_responses import ResponsesStream
from asgi_router.protocols.from_anthropic import StreamTranslation
from asgi_router.resilience.gate import Lease
from asgi_router.transports.provider import ProviderRuntime, RouteTarget
from asgi_router.transports.transport import UpstreamResponse

__all__ = ["Attempted", "Committed", "Continuation", "Continues", "Failed", "Ready", "Refused"]


@dataclass(slots=True)
class Committed:
    """A candidate that won: nothing has been sent to the client yet."""

    candidate: Candidate
    response: UpstreamResponse
    #: The first chunk (streaming) or the whole body (non-streaming).
    body: bytes
    provider: ProviderRuntime
    started: float
    #: When the attempt's ``total`` budget runs out (monotonic seconds).
    deadline: float
    ttfb: float
    attempts: int
    #: A streamed attempt's lease, finished with the relay's reason (late failures count).
    lease: Lease | None = None
    #: A translated stream's translation, fed every chunk the relay reads (``body`` is its
    #: first output); ``None``: the bytes are relayed as they are.
    translation: StreamTranslation | ResponsesStream | None = None
    #: The chunks ``body`` was read in before commit, when more than one (role-only deltas and
    #: keep-alives held for the first real event): the relay sends each as it came.
    parts: tuple[bytes, ...] | None = None
    #: A stream whose plan can continue it after a break: what continues it (``None``: nothing).
    continues: Continues | None = None
    #: The id a Responses answer gave its response (``resp_...``; ``None``: none seen).
    response_id: str | None = None
    #: An output guardrail refused this answer: the client gets this error instead.
    refusal: RouterError | None = None


@dataclass(slots=True)
class Continuation:
    """A continuation that committed, and the whitespace its prefill lost (said again by it)."""

    committed: Committed
    skip: str


class Continues(Protocol):
    """What continues one request's committed stream after a break: the attempt loop's
    (``continuing.py``), handed to the answer phase on the :class:`Committed` it relays."""

    #: The largest unfinished event a relay may hold for it (``max_event_bytes``), and the most
    #: bytes of events it keeps to read back what was said (``max_response_bytes``).
    bounds: tuple[int, int]

    def may_continue(self, reason: Reason, total: bool) -> bool:
        """Whether a break for ``reason`` may be continued at all (``total``: the attempt's
        ``total`` ran out): the request's retry state's verdict."""

    async def __call__(
        self, broken: Committed, reason: Reason, text: str, total: bool = False, silence: float = 0.0
    ) -> Continuation | None:
        """The call that continues ``text`` after ``broken`` broke for ``reason`` (accounted and
        evented), ``silence`` seconds after its last byte, or ``None``: the client gets the
        in-band error."""

    def take_broken(self) -> tuple[str, ...]:
        """The candidates (keys) whose stream broke since the last call, each once: the request's
        retry state keeps them."""


@dataclass(slots=True)
class Refused:
    """A candidate's fatal answer (e.g. 400), to be passed through untouched."""

    candidate: Candidate
    status: int
    headers: Sequence[tuple[bytes, bytes]]
    body: bytes
    attempts: int
    reason: Reason


@dataclass(slots=True)
class Failed:
    """An attempt that did not commit (or a candidate that was not called): the loop goes on."""

    reason: Reason
    status: int | None = None
    retry_after: float | None = None
    ttfb: float | None = None
    #: The router's own failure (``router_error``): never retried (the loop stops with a 500).
    fatal: bool = False
    #: Not contacted (no key, context too small, over budget, breaker open, saturated, ...).
    skipped: bool = False
    #: The provider's own error message, one printable line (a context-window 400 keeps it:
    #: see :func:`~asgi_router.core.router_errors.exhausted_error`).
    words: str | None = None


#: What one attempt can end in.
Attempted = Committed | Refused | Failed


@dataclass(slots=True, eq=False)
class Ready:
    """A candidate that passed admission, with what its attempt needs."""

    candidate: Candidate
    #: ``provider/model-id`` (the statistics key).
    key: str
    provider: ProviderRuntime
    #: Where the request goes for this route, and whether it is translated.
    target: RouteTarget
    body: bytes
    #: The gate's admission: finished exactly once with how the attempt ended.
    lease: Lease
    started: float = 0.0
    #: What a cancellation of this attempt means: the client left, or it lost a hedge race.
    cancel_reason: Reason = "client_disconnected"
