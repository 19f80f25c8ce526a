"""Relaying a stream that may be continued after a break: whole events, then one stream.

Used instead of :func:`~asgi_router.responses.relay.relay_stream` when (and only when) the plan
has a candidate whose ``resume`` is not ``"none"`` and the request can be continued at all
(chat completions, ``n`` of 1, no ``logprobs``). The same relay runs, given a
:class:`~asgi_router.responses.relay.Continuer`: it cuts the stream into whole events
(:class:`~asgi_router.responses.whole_events.WholeEvents`), so that when the upstream breaks the
client never has half an event and a continuation's events can follow on an event boundary, and
reports each break here.

When the stream breaks (``stream_interrupted``) or stalls (the ``idle`` timeout; not ``total``)
before its end, the events sent so far are read
(:func:`~asgi_router.protocols.continuation.said_so_far`, or
:func:`~asgi_router.protocols.continuation_messages.said_in_messages` on ``/v1/messages``);
plain text is asked to be continued (:class:`~asgi_router.responses.resuming.StreamResumer`),
and the first candidate that commits is relayed on, its events rewritten into the same stream
(:class:`~asgi_router.protocols.continuation.Splice`): one ``id``, one ``created``, one finish,
one usage, one ``data: [DONE]`` (on ``/v1/messages``, one message). Whether a break may be
continued at all is one question (:func:`_continuable`); past ``max_resumes``, or when nothing
can continue, the client gets the in-band error the byte-exact relay writes, naming the break
(never a refused continuation's 400).
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import Send

from asgi_router.attempts.outcomes import Committed
from asgi_router.attempts.usage import Tail
from asgi_router.core.reasons import Reason
from asgi_router.protocols.continuation import Said
from asgi_router.request.request_state import RequestState
from asgi_router.responses.relay import RelayResult, relay_stream
from asgi_router.responses.resuming import StreamResumer
from asgi_router.responses.whole_events import Spliced

__all__ = ["relay_resumable"]


def _continuable(resumer: StreamResumer, reason: Reason, stalled_past_total: bool, said: bytes) -> Said | None:
    """The text said so far, when a break of ``reason`` may be asked to be continued (the
    attempts' verdict: a break or a stall, not one past the attempt's ``total``, resumes left)
    and the answer so far is plain text."""
    if not resumer.may_continue(reason, stalled_past_total):
        return None
    text = resumer.said(said)
    return text if isinstance(text, Said) else None


class _Continuing:
    """The relay's :class:`~asgi_router.responses.relay.Continuer` for one request: its
    :class:`~asgi_router.responses.resuming.StreamResumer` asked at each break."""

    __slots__ = ("bounds", "resumer")

    def __init__(self, resumer: StreamResumer) -> None:
        self.resumer = resumer
        self.bounds = resumer.bounds

    async def after_break(
        self, broken: Committed, reason: Reason, stalled_past_total: bool, said: bytes, silence: float = 0.0
    ) -> tuple[Committed, Spliced] | None:
        text = _continuable(self.resumer, reason, stalled_past_total, said)
        if text is None:
            return None
        continued = await self.resumer.resume(broken, reason, text.text, silence)
        if continued is None:
            return None
        return continued.committed, self.resumer.splice(text, continued.skip)

    def ended(self, served: bool) -> None:
        if served:
            self.resumer.served()
        else:
            self.resumer.failed()


async def relay_resumable(
    send: Send,
    committed: Committed,
    headers: list[tuple[bytes, bytes]],
    clock: Callable[[], float],
    resumer: StreamResumer,
    error_event: Callable[[str, Reason, str], bytes],
    tail: Tail | None,
    progress: RequestState,
) -> tuple[RelayResult, Committed]:
    """Relay ``committed`` whole event by whole event, continuing it after a break; the result
    and the call that ended the stream (``committed`` itself when it was never continued).
    ``progress`` as :func:`~asgi_router.responses.relay.relay_stream`'s."""
    relaying = relay_stream(send, committed, headers, clock, tail, progress, error_event, _Continuing(resumer))
    del headers  # the relay's own: not held here for the stream's life
    return await relaying, resumer.current
