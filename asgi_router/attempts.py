"""The attempt loop: try a plan's candidates in order until one commits (DESIGN.md §4 and §5).

For each candidate: splice its model id into the wire body and check it there (target guard),
send, classify, and either move on or stop. Nothing has been sent to the client while this
runs, which is what makes failover safe.

Commit rules:

* streaming: a 2xx *and* its first non-empty body chunk within ``first_byte``: a 200 that then
  says nothing is a timeout, and one that ends empty is ``stream_interrupted``; both fail over.
* non-streaming: a 2xx whose whole body (at most ``max_response_bytes``) was read; a body that
  breaks or stalls (``idle``) is a failure like any other, still before the first client byte.

A status whose reason the plan does not fail over on (by default only ``client_error``) stops
the loop and is passed through untouched: the request itself is wrong, and the next model would
hit the same wall. The one 400 that fails over is an upstream saying the prompt exceeded *its*
context window (``classify.refine_client_error``): another model's window may be larger.
Every response that is not handed on is closed here, also on cancellation.

Per request, a :class:`RequestAttempts` holds what the pass over the plan has done so far (wire
body, summaries, attempt count) and does each step the same way whoever drives it: the plain
loop in :meth:`AttemptLoop.run`, or the hedging race (``hedging.py``) for groups that hedge.
Around every attempt the :class:`~asgi_router.bookkeeping.Bookkeeper` may skip a candidate
(``context_window``, ``over_budget``) and keeps the statistics strategies read.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio

from .bookkeeping import Bookkeeper
from .catalog import Catalog
from .classify import (
    Reason,
    UnrecognisedFailure,
    classify_exception,
    classify_status,
    parse_retry_after,
    refine_client_error,
)
from .errors import AttemptSummary, RouterError, exhausted_error
from .events import AttemptEvent, Outcome, RequestRecord, logger
from .facts import EMPTY_FACTS, RequestFacts
from .hedging import race
from .plan import Candidate, Plan
from .stats import InMemoryStats
from .upstream import ProviderRuntime, Transport, UpstreamResponse

__all__ = ["AttemptLoop", "Attempted", "Committed", "Ready", "Refused", "RequestAttempts", "WireBody", "wire_targets"]

# A failover response's body is read (so its connection can be reused) up to this size.
_FAILURE_BODY_CAP: Final = 64 * 1024


class WireBody:
    """The request body, serialised once per request, with ``model`` spliced in per candidate.

    ``model`` is removed from the payload and the rest serialised a single time; each candidate
    then costs one concatenation instead of one serialisation. ``model`` is always the first
    member of the wire object, which is also what lets :func:`wire_targets` check it cheaply.
    """

    __slots__ = ("_rest",)

    def __init__(self, payload: Mapping[str, Any]) -> None:
        rest = {key: value for key, value in payload.items() if key != "model"}
        try:
            encoded = json.dumps(rest, separators=(",", ":"), ensure_ascii=False).encode()
        except UnicodeEncodeError:  # lone surrogates from \\ud800-style escapes: keep them escaped
            encoded = json.dumps(rest, separators=(",", ":")).encode()
        self._rest = encoded[1:]  # drop "{": either b"}" or b'"key":...}'

    def for_model(self, model_id: str) -> bytes:
        head = b'{"model":"' + model_id.encode() + b'"'
        return head + (b"}" if self._rest == b"}" else b"," + self._rest)


def wire_targets(wire: bytes, model_id: str) -> bool:
    """Target guard: does the wire body's ``model`` equal ``model_id``?

    Model ids are restricted to characters that need no JSON escaping, so the first member
    ``{"model":"<id>"`` can be compared as bytes; ``model`` appears once at top level.
    """
    expected = b'{"model":"' + model_id.encode() + b'"'
    end = len(expected)
    return wire.startswith(expected) and wire[end : end + 1] in (b",", b"}")


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


@dataclass(slots=True)
class Refused:
    """A candidate's fatal answer (e.g. 400), to be passed through untouched."""

    candidate: Candidate
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    attempts: int
    reason: Reason


@dataclass(slots=True)
class _Failed:
    reason: Reason
    status: int | None = None
    retry_after: float | None = None
    ttfb: float | None = None
    #: An unrecognised failure: never retried (the loop stops with a 502).
    fatal: bool = False
    #: Not contacted (no key, context too small, over budget).
    skipped: bool = False


#: What one attempt can end in.
Attempted = Committed | Refused | _Failed


@dataclass(slots=True, eq=False)
class Ready:
    """A candidate that passed admission, with what its attempt needs."""

    candidate: Candidate
    #: ``provider/model-id`` (the statistics key).
    key: str
    provider: ProviderRuntime
    body: bytes
    started: float = 0.0
    #: What a cancellation of this attempt means: the client left, or it lost a hedge race.
    cancel_reason: Reason = "client_disconnected"


async def _first_chunk(chunks: AsyncIterator[bytes]) -> bytes:
    async for chunk in chunks:
        if chunk:
            return chunk
    return b""


async def read_to_end(
    chunks: AsyncIterator[bytes],
    parts: list[bytes],
    limit: int,
    idle: float,
    deadline: float,
    clock: Callable[[], float],
) -> bytes | None:
    """Append the remaining chunks to ``parts`` and join them; ``None`` past ``limit`` bytes.

    Each read must arrive within ``idle`` seconds and before ``deadline`` (TimeoutError).
    """
    size = sum(len(part) for part in parts)
    while True:
        with anyio.fail_after(max(0.0, min(idle, deadline - clock()))):
            chunk = await anext(chunks, None)
        if chunk is None:
            return b"".join(parts)
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)


class AttemptLoop:
    """Runs plans against a :class:`Transport`; one instance per router, no per-request state."""

    def __init__(
        self,
        transport: Transport,
        providers: Mapping[str, ProviderRuntime],
        max_response_bytes: int,
        clock: Callable[[], float] = time.monotonic,
        bookkeeper: Bookkeeper | None = None,
    ) -> None:
        self._transport = transport
        self._providers = providers
        self._max_response_bytes = max_response_bytes
        self._clock = clock
        self._book = bookkeeper if bookkeeper is not None else Bookkeeper(InMemoryStats(clock), Catalog({}), (), ())

    async def run(
        self,
        plan: Plan,
        payload: dict[str, Any],
        stream: bool,
        route: str,
        headers_for: Callable[[ProviderRuntime], dict[str, str]],
        record: RequestRecord,
        facts: RequestFacts = EMPTY_FACTS,
    ) -> Committed | Refused | RouterError:
        """Try ``plan`` until a candidate commits, refuses, or every candidate has failed."""
        attempts = RequestAttempts(self, plan, payload, stream, route, headers_for, record, facts)
        policy = plan.policy
        if policy is not None and policy.hedge_after is not None and len(plan.candidates) > 1:
            return await race(attempts, policy, self._book.stats, self._clock)
        for candidate in plan.candidates:
            ready = attempts.prepare(candidate)
            if ready is None:
                continue
            decided = attempts.settle(ready, await attempts.attempt(ready))
            if decided is not None:
                return decided
        return attempts.exhausted()

    async def _attempt(
        self,
        candidate: Candidate,
        provider: ProviderRuntime,
        url: str,
        headers: dict[str, str],
        body: bytes,
        stream: bool,
        failover_on: frozenset[Reason],
        started: float,
        attempts: int,
    ) -> Committed | Refused | _Failed:
        timeouts = provider.timeouts
        deadline = started + timeouts.total
        response: UpstreamResponse | None = None
        handed_off = False
        try:
            with anyio.fail_after(min(timeouts.first_byte, timeouts.total)):
                response = await self._transport.send(provider, url, headers, body)
                status = response.status
                reason = classify_status(status)
                if reason != "served":
                    if reason in failover_on:
                        retry_after = None
                        if reason == "rate_limited":
                            retry_after = parse_retry_after(_header(response.headers, b"retry-after"))
                        await read_to_end(response.chunks, [], _FAILURE_BODY_CAP, timeouts.idle, deadline, self._clock)
                        return _Failed(reason, status, retry_after)
                    refusal = await read_to_end(
                        response.chunks, [], self._max_response_bytes, timeouts.idle, deadline, self._clock
                    )
                    if refusal is None:
                        return _Failed("upstream_5xx", status)
                    if reason == "client_error":
                        reason = refine_client_error(status, refusal)
                        if reason in failover_on:
                            return _Failed(reason, status)
                    return Refused(candidate, status, response.headers, refusal, attempts, reason)
                first = await _first_chunk(response.chunks)
            ttfb = self._clock() - started
            if not first:
                return _Failed("stream_interrupted", status, ttfb=ttfb)
            if not stream:
                whole = await read_to_end(
                    response.chunks, [first], self._max_response_bytes, timeouts.idle, deadline, self._clock
                )
                if whole is None:
                    return _Failed("upstream_5xx", status, ttfb=ttfb)
                first = whole
            handed_off = True
            return Committed(candidate, response, first, provider, started, deadline, ttfb, attempts)
        except Exception as exc:
            try:
                return _Failed(classify_exception(exc), response.status if response else None)
            except UnrecognisedFailure:
                logger.exception("asgi_router: unrecognised failure calling %s; not retried", candidate)
                return _Failed("upstream_5xx", response.status if response else None, fatal=True)
        finally:
            if response is not None and (not handed_off or not stream):
                with anyio.CancelScope(shield=True):
                    await response.aclose()


class RequestAttempts:
    """One request's pass over its plan: each step of trying one candidate, and what came of it.

    Steps: :meth:`prepare` (skip or get :class:`Ready`), :meth:`attempt` (call it),
    :meth:`settle` (event it; say whether the pass is decided). The hedging race adds
    :meth:`discard` for attempts it gives up on.
    """

    __slots__ = (
        "_headers_for",
        "_loop",
        "_route",
        "_stream",
        "_summaries",
        "_wire",
        "attempts",
        "facts",
        "plan",
        "record",
    )

    def __init__(
        self,
        loop: AttemptLoop,
        plan: Plan,
        payload: Mapping[str, Any],
        stream: bool,
        route: str,
        headers_for: Callable[[ProviderRuntime], dict[str, str]],
        record: RequestRecord,
        facts: RequestFacts,
    ) -> None:
        self._loop = loop
        self.plan = plan
        self._wire = WireBody(payload)
        self._stream = stream
        self._route = route
        self._headers_for = headers_for
        self.record = record
        self.facts = facts
        self._summaries: list[AttemptSummary] = []
        #: Attempts started so far (skips are not attempts).
        self.attempts = 0

    def prepare(self, candidate: Candidate) -> Ready | None:
        """The candidate ready to call, or ``None`` when it is skipped (the skip is evented)."""
        provider = self._loop._providers.get(candidate.provider)
        if provider is None or not provider.configured:
            self._note(str(candidate), "skipped", _Failed("provider_not_configured", skipped=True), 0.0)
            return None
        key = str(candidate)
        skip = self._loop._book.admit(key, self.plan.policy, self.facts)
        if skip is not None:
            self._note(key, "skipped", _Failed(skip.reason, retry_after=skip.retry_after, skipped=True), 0.0)
            return None
        body = self._wire.for_model(candidate.model_id)
        if not wire_targets(body, candidate.model_id):  # pragma: no cover - defence in depth
            raise AssertionError(f"target guard: wire body does not name {candidate}")
        return Ready(candidate, key, provider, body)

    async def attempt(self, ready: Ready) -> Attempted:
        """Call ``ready``'s upstream; on cancellation, account for it and re-raise."""
        loop = self._loop
        self.attempts += 1
        ready.started = loop._clock()
        self.record.in_flight = (ready.key, ready.started)
        loop._book.started(ready.key, self.facts)
        try:
            result = await loop._attempt(
                ready.candidate,
                ready.provider,
                ready.provider.urls[self._route],
                self._headers_for(ready.provider),
                ready.body,
                self._stream,
                self.plan.failover_on,
                ready.started,
                self.attempts,
            )
        except BaseException:
            elapsed = loop._clock() - ready.started
            loop._book.failed(ready.key, self.facts, ready.cancel_reason, elapsed, 0.0)
            raise
        if self.record.in_flight is not None and self.record.in_flight[0] == ready.key:
            self.record.in_flight = None
        return result

    def settle(self, ready: Ready, result: Attempted) -> Committed | Refused | RouterError | None:
        """Event and account for ``result``; the pass's outcome, or ``None`` to go on."""
        loop = self._loop
        elapsed = loop._clock() - ready.started
        if isinstance(result, Committed):
            result.attempts = self.attempts
            loop._book.committed(ready.key, result.ttfb)
            return result
        if isinstance(result, Refused):
            result.attempts = self.attempts
            loop._book.failed(ready.key, self.facts, result.reason, elapsed, 0.0)
            self.record.events.append(
                AttemptEvent(
                    self.record.request_id,
                    len(self.record.events),
                    ready.key,
                    "failed",
                    result.reason,
                    result.status,
                    elapsed,
                    principal=self.record.principal,
                )
            )
            return result
        loop._book.failed(ready.key, self.facts, result.reason, elapsed, ready.provider.timeouts.first_byte)
        self._note(ready.key, "failed", result, elapsed)
        if result.fatal:
            lines = "\n".join(summary.line() for summary in self._summaries)
            return RouterError(502, "router_error", lines, tuple(self._summaries))
        return None

    async def discard(self, ready: Ready, result: Attempted | None, reason: Reason) -> None:
        """Event an attempt the hedging race gave up on: it lost (``hedge_lost``) or the client left.

        ``result`` is one that finished anyway after the race was decided (e.g. it committed a
        moment after the winner): it is accounted here and a committed response released, as the
        cancelled ones (``result`` None) were by :meth:`attempt`'s own clean-up.
        """
        elapsed = self._loop._clock() - ready.started
        if result is not None:
            self._loop._book.failed(ready.key, self.facts, reason, elapsed, 0.0)
            if isinstance(result, Committed):
                with anyio.CancelScope(shield=True):
                    await result.response.aclose()
        self._note(ready.key, "aborted", _Failed(reason), elapsed, summary=False)

    def exhausted(self) -> RouterError:
        return exhausted_error(self._summaries)

    def _note(self, name: str, outcome: Outcome, failure: _Failed, latency: float, *, summary: bool = True) -> None:
        if summary:
            self._summaries.append(
                AttemptSummary(name, failure.reason, failure.status, failure.retry_after, failure.skipped)
            )
        self.record.events.append(
            AttemptEvent(
                self.record.request_id,
                len(self.record.events),
                name,
                outcome,
                failure.reason,
                failure.status,
                latency,
                failure.ttfb,
                principal=self.record.principal,
            )
        )


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None
