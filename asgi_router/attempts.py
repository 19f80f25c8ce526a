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
hit the same wall. Every response that is not handed on is closed here, also on cancellation.

Resilience (docs/resilience.rst): each attempt is admitted by the :class:`~asgi_router.gate.Gate`
(breakers, ``max_concurrent``; a refusal is a ``skipped`` event) and holds a lease until its
outcome is known. A candidate may be retried in place ``plan.retries`` times when the reason is
in ``retry_on``, after the upstream's hint or a full-jitter backoff, within the provider's
retry budget; ``max_attempts`` and the request ``deadline`` bound the whole walk, backoff
included. If every candidate was skipped for an open breaker, the one that opened longest ago
is tried anyway: a plan is never failed without a try because of breakers alone.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio

from .classify import Reason, UnrecognisedFailure, classify_exception, classify_status
from .errors import AttemptSummary, RouterError, exhausted_error
from .events import AttemptEvent, Outcome, RequestRecord, logger
from .gate import Gate, Lease, Skip
from .hints import retry_hint
from .plan import Candidate, Plan
from .retry import RetryPolicy, retry_wait
from .upstream import ProviderRuntime, Transport, UpstreamResponse

__all__ = ["AttemptLoop", "Committed", "Refused", "WireBody", "wire_targets"]

# A failover response's body is read (so its connection can be reused) up to this size.
_FAILURE_BODY_CAP: Final = 64 * 1024
# Failures whose response may say how long to wait (Retry-After on a 503 is standard too).
_HINTED: Final[frozenset[Reason]] = frozenset({"rate_limited", "upstream_5xx"})


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
    #: A streamed attempt's lease, finished with the relay's reason (late failures count).
    lease: Lease | None = None


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


class _Walk:
    """One request's way through its plan: what was tried, what is left of its budgets."""

    __slots__ = (
        "attempts",
        "deadline",
        "exhausted",
        "failover_on",
        "headers_for",
        "open_skips",
        "record",
        "route",
        "stream",
        "summaries",
        "wire",
    )

    def __init__(
        self,
        record: RequestRecord,
        wire: WireBody,
        stream: bool,
        route: str,
        headers_for: Callable[[ProviderRuntime], dict[str, str]],
        failover_on: frozenset[Reason],
        deadline: float,
    ) -> None:
        self.record = record
        self.wire = wire
        self.stream = stream
        self.route = route
        self.headers_for = headers_for
        self.failover_on = failover_on
        self.deadline = deadline
        self.summaries: list[AttemptSummary] = []
        self.attempts = 0
        #: Set once ``max_attempts`` or the deadline stops the walk.
        self.exhausted = False
        #: Candidates skipped for an open breaker, with when it opened.
        self.open_skips: list[tuple[float, Candidate]] = []

    def note(self, candidate: Candidate, outcome: Outcome, failure: _Failed, latency: float) -> None:
        name = str(candidate)
        self.summaries.append(AttemptSummary(name, failure.reason, failure.status, failure.retry_after))
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
            )
        )

    def skip(self, candidate: Candidate, reason: Reason) -> None:
        self.note(candidate, "skipped", _Failed(reason), 0.0)


class AttemptLoop:
    """Runs plans against a :class:`Transport`; one instance per router, no per-request state."""

    def __init__(
        self,
        transport: Transport,
        providers: Mapping[str, ProviderRuntime],
        max_response_bytes: int,
        clock: Callable[[], float] = time.monotonic,
        *,
        gate: Gate,
        policy: RetryPolicy,
        random: Callable[[], float] = random.random,
    ) -> None:
        self._transport = transport
        self._providers = providers
        self._max_response_bytes = max_response_bytes
        self._clock = clock
        self._gate = gate
        self._policy = policy
        self._random = random

    async def run(
        self,
        plan: Plan,
        payload: dict[str, Any],
        stream: bool,
        route: str,
        headers_for: Callable[[ProviderRuntime], dict[str, str]],
        record: RequestRecord,
    ) -> Committed | Refused | RouterError:
        """Try ``plan`` until a candidate commits, refuses, or every candidate has failed."""
        deadline = self._clock() + self._policy.deadline
        walk = _Walk(record, WireBody(payload), stream, route, headers_for, plan.failover_on, deadline)
        for candidate in plan.candidates:
            result = await self._candidate(walk, candidate, plan.retries)
            if result is not None:
                return result
            if walk.exhausted:
                break
        if walk.attempts == 0 and walk.open_skips and not walk.exhausted:
            # Every candidate was skipped for an open breaker: failing untried would make the
            # breakers the outage. Try the one that opened longest ago, as its probe.
            _, oldest = min(walk.open_skips, key=lambda skipped: skipped[0])
            result = await self._candidate(walk, oldest, 0, force=True)
            if result is not None:
                return result
        return exhausted_error(walk.summaries)

    async def _candidate(
        self, walk: _Walk, candidate: Candidate, retries: int, *, force: bool = False
    ) -> Committed | Refused | RouterError | None:
        """Attempt ``candidate`` (and retry it in place); ``None``: move on to the next one."""
        provider = self._providers.get(candidate.provider)
        if provider is None or not provider.configured:
            walk.skip(candidate, "provider_not_configured")
            return None
        body = walk.wire.for_model(candidate.model_id)
        if not wire_targets(body, candidate.model_id):  # pragma: no cover - defence in depth
            raise AssertionError(f"target guard: wire body does not name {candidate}")
        url, headers = provider.urls[walk.route], walk.headers_for(provider)
        retry = 0
        retry_token = False
        try:
            while True:
                if walk.attempts >= self._policy.max_attempts or self._clock() >= walk.deadline:
                    walk.skip(candidate, "budget_exhausted")
                    walk.exhausted = True
                    return None
                lease = self._gate.enter(candidate, force=force)
                if isinstance(lease, Skip):
                    walk.skip(candidate, lease.reason)
                    if lease.opened_at is not None and retry == 0:
                        walk.open_skips.append((lease.opened_at, candidate))
                    return None
                walk.attempts += 1
                result = await self._leased(walk, lease, candidate, provider, url, headers, body)
                if retry_token:
                    retry_token = False
                    self._gate.end_retry(candidate.provider)
                if not isinstance(result, _Failed):
                    return result
                if result.fatal:
                    return RouterError(
                        502, "router_error", "\n".join(s.line() for s in walk.summaries), tuple(walk.summaries)
                    )
                if retry >= retries or result.reason not in self._policy.retry_on:
                    return None
                wait = retry_wait(
                    result.retry_after,
                    retry,
                    backoff=self._policy.backoff,
                    max_retry_wait=self._policy.max_retry_wait,
                    remaining=walk.deadline - self._clock(),
                    random=self._random,
                )
                if wait is None:
                    return None
                if not self._gate.begin_retry(candidate.provider):
                    walk.skip(candidate, "budget_exhausted")
                    return None
                retry_token = True
                retry += 1
                await anyio.sleep(wait)  # cancelled at once if the client disconnects
        finally:
            if retry_token:
                self._gate.end_retry(candidate.provider)

    async def _leased(
        self,
        walk: _Walk,
        lease: Lease,
        candidate: Candidate,
        provider: ProviderRuntime,
        url: str,
        headers: dict[str, str],
        body: bytes,
    ) -> Committed | Refused | _Failed:
        """One attempt under ``lease``, which is finished here unless a stream takes it on."""
        record = walk.record
        started = self._clock()
        record.in_flight = (str(candidate), started)
        try:
            result = await self._attempt(
                candidate,
                provider,
                url,
                headers,
                body,
                walk.stream,
                walk.failover_on,
                started,
                walk.attempts,
                walk.deadline,
                lease,
            )
        except BaseException:  # cancelled: the client left mid-attempt
            lease.finish("client_disconnected")
            raise
        record.in_flight = None
        if isinstance(result, Committed):
            if walk.stream:
                result.lease = lease  # finished by the relay's end (ModelRouter._note_served)
            else:
                lease.finish("served")
            return result
        lease.finish(result.reason)
        if isinstance(result, Refused):
            walk.record.events.append(
                AttemptEvent(
                    record.request_id,
                    len(record.events),
                    str(candidate),
                    "failed",
                    result.reason,
                    result.status,
                    self._clock() - started,
                )
            )
        else:
            walk.note(candidate, "failed", result, self._clock() - started)
        return result

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
        commit_by: float,
        lease: Lease,
    ) -> Committed | Refused | _Failed:
        timeouts = provider.timeouts
        # Until commit, the request's deadline caps the attempt; the relay has the attempt's own.
        relay_deadline = started + timeouts.total
        deadline = min(relay_deadline, commit_by)
        response: UpstreamResponse | None = None
        handed_off = False
        try:
            with anyio.fail_after(max(0.0, min(timeouts.first_byte, deadline - started))):
                response = await self._transport.send(provider, url, headers, body)
                lease.responded()
                status = response.status
                reason = classify_status(status)
                if reason != "served":
                    if reason in failover_on:
                        failure = await read_to_end(
                            response.chunks, [], _FAILURE_BODY_CAP, timeouts.idle, deadline, self._clock
                        )
                        retry_after = None
                        if reason in _HINTED:
                            limited = reason == "rate_limited"
                            retry_after = retry_hint(response.headers, failure, rate_limited=limited)
                        return _Failed(reason, status, retry_after)
                    refusal = await read_to_end(
                        response.chunks, [], self._max_response_bytes, timeouts.idle, deadline, self._clock
                    )
                    if refusal is None:
                        return _Failed("upstream_5xx", status)
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
            return Committed(candidate, response, first, provider, started, relay_deadline, ttfb, attempts)
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
