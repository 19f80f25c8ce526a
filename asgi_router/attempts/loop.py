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
Every response that is not handed on is closed here, also on cancellation. An attempt's time
limits (first byte, ``idle``, ``total``) are kept by one cancel scope and its watchdog
(:func:`~asgi_router.core.deadlines.watchdog_for`), not a ``fail_after`` per read. What an attempt can
end in (:class:`Committed`, :class:`Refused`, :class:`Failed`) is in ``outcomes.py``.

Per request, a :class:`~asgi_router.attempts.steps.RequestAttempts` (its own module) holds
what the pass over the plan has done so far and does each step the same way whoever drives it:
the plain loop in :meth:`AttemptLoop.run`, or the hedging race (``hedging.py``). Its steps
(prepare: admit or skip; attempt: call, through :meth:`AttemptLoop._attempt` here; settle) are
described in that module.

Resilience (README.rst "Resilience"), in :meth:`AttemptLoop.run`: a candidate may be retried in
place ``plan.retries`` times when the reason is in ``retry_on`` (never for a client that says it
retries on its own, as the official SDKs do with ``x-stainless-retry-count``: its tries would
multiply ours), after the upstream's hint (``hints.py``) or a full-jitter backoff, within the
provider's retry budget; ``max_attempts`` and the request ``deadline`` bound the whole walk,
backoff included. If every candidate was skipped for an open breaker, the one that opened
longest ago is tried anyway: a plan is never failed without a try because of breakers alone. A
hedged group races instead of retrying in place (the race is its second chance); the budgets and
the all-open rule apply to it too.
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Final

import anyio

from asgi_router.attempts.bookkeeping import Bookkeeper
from asgi_router.attempts.hedging import race
from asgi_router.attempts.hints import retry_hint
from asgi_router.attempts.outcomes import Attempted, Committed, Failed, Ready, Refused
from asgi_router.attempts.steps import RequestAttempts
from asgi_router.core.candidate import Candidate
from asgi_router.core.classify import (
    UnrecognisedFailure,
    classify_exception,
    classify_status,
    refine_client_error,
    refine_rate_limited,
)
from asgi_router.core.deadlines import Watchdog, new_scope, watchdog_for
from asgi_router.core.errors import RouterError
from asgi_router.core.header_names import client_retries
from asgi_router.core.reasons import Reason
from asgi_router.core.skip import Skip
from asgi_router.inbound.body import InboundRequest
from asgi_router.observability.events import RequestRecord, logger
from asgi_router.resilience.gate import Gate
from asgi_router.resilience.retry import RetryPolicy
from asgi_router.routing.facts import EMPTY_FACTS, RequestFacts
from asgi_router.routing.plan import Plan
from asgi_router.transports.base import Transport, UpstreamResponse, close_response
from asgi_router.transports.provider import ProviderRuntime

__all__ = ["AttemptLoop", "read_to_end"]

# A failover response's body is read (so its connection can be reused) up to this size.
_FAILURE_BODY_CAP: Final = 64 * 1024
# Failures whose response may say how long to wait (Retry-After on a 503 is standard too).
_HINTED: Final[frozenset[Reason]] = frozenset({"rate_limited", "upstream_5xx"})


async def read_to_end(
    chunks: AsyncIterator[bytes],
    parts: list[bytes],
    limit: int,
    idle: float,
    deadline: float,
    clock: Callable[[], float],
    watchdog: Watchdog,
) -> bytes | None:
    """Append the remaining chunks to ``parts`` and join them; ``None`` past ``limit`` bytes.

    Each read must arrive within ``idle`` seconds and before ``deadline``: ``watchdog`` cancels
    its scope (the caller's) otherwise.
    """
    size = 0
    for part in parts:
        size += len(part)
    if size > limit:  # the first chunk alone may be over it
        return None
    while True:
        watchdog.arm(min(idle, deadline - clock()))
        try:
            chunk = await chunks.__anext__()  # no anext() wrapper per read
        except StopAsyncIteration:
            return parts[0] if len(parts) == 1 else b"".join(parts)
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
        *,
        bookkeeper: Bookkeeper,
        gate: Gate,
        policy: RetryPolicy,
        random: Callable[[], float] = random.random,
    ) -> None:
        self._transport = transport
        self._providers = providers
        self._max_response_bytes = max_response_bytes
        self._clock = clock
        self._book = bookkeeper
        self._gate = gate
        self._policy = policy
        self._random = random

    @property
    def native_cancel(self) -> bool:
        """Whether this transport's requests may be cancelled by a bare ``Task.cancel()``
        (see :func:`~asgi_router.core.deadlines.new_scope`); read per request, as tests swap transports."""
        return getattr(self._transport, "native_cancel", False) is True

    async def run(
        self,
        plan: Plan,
        request: InboundRequest,
        route: str,
        inbound: Sequence[tuple[bytes, bytes]],
        record: RequestRecord,
        facts: RequestFacts = EMPTY_FACTS,
    ) -> Committed | Refused | RouterError:
        """Try ``plan`` until a candidate commits, refuses, or every candidate has failed."""
        deadline = self._clock() + self._policy.deadline
        attempts = RequestAttempts(self, plan, request, route, inbound, record, facts, deadline)
        policy = plan.policy
        decided: Committed | Refused | RouterError | None = None
        if plan.hedged:
            assert policy is not None
            decided = await race(attempts, policy, self._book.stats, self._clock)
        elif plan.retries == 0 or client_retries(inbound):
            # No retries in place (every multi-member group by default, and every request from a
            # client that retries on its own: its tries times ours would multiply the load on a
            # failing upstream): each candidate is one prepare, call, settle, without
            # :meth:`_candidate`'s frame around the call.
            candidates = plan.candidates
            for index in range(len(candidates)):  # no tuple iterator held while the call is awaited
                ready = attempts.prepare(candidates[index])
                if ready is not None:
                    decided = attempts.settle(ready, await attempts.attempt(ready))
                if decided is not None or attempts.stopped:
                    break
        else:
            for candidate in plan.candidates:
                decided = await self._candidate(attempts, candidate, plan.retries)
                if decided is not None or attempts.stopped:
                    break
        if decided is None:
            oldest = attempts.oldest_open()
            if oldest is not None:
                # Every candidate was skipped for an open breaker: failing untried would make the
                # breakers the outage. Try the one that opened longest ago, as its probe.
                decided = await self._candidate(attempts, oldest, 0, force=True)
        return decided if decided is not None else attempts.exhausted()

    async def _candidate(
        self, attempts: RequestAttempts, candidate: Candidate, retries: int, *, force: bool = False
    ) -> Committed | Refused | RouterError | None:
        """Attempt ``candidate`` and retry it in place up to ``retries`` times; ``None``: move on."""
        ready = attempts.prepare(candidate, force=force)
        retry = 0
        token = False  # a retry token of the provider's budget, held until the retry has ended
        try:
            while ready is not None:
                result = await attempts.attempt(ready)
                if token:
                    token = False
                    self._gate.end_retry(candidate.provider)
                decided = attempts.settle(ready, result)
                if decided is not None or retry >= retries:
                    return decided
                wait = attempts.retry_wait(result, retry)
                if wait is None:
                    return None
                if not self._gate.begin_retry(candidate.provider):
                    attempts.skip(ready.key, Skip("budget_exhausted"))
                    return None
                token = True
                retry += 1
                await anyio.sleep(wait)  # cancelled at once if the client disconnects
                ready = attempts.prepare(candidate, retry=True)
            return None
        finally:
            if token:
                self._gate.end_retry(candidate.provider)

    async def _attempt(
        self,
        ready: Ready,
        url: str,
        headers: dict[str, str],
        stream: bool,
        failover_on: frozenset[Reason],
        attempts: int,
        commit_by: float,
        request: RequestAttempts,
    ) -> Attempted:
        """One call of ``ready`` (through :meth:`RequestAttempts.attempt`, which counted it)."""
        candidate, provider, lease, started = ready.candidate, ready.provider, ready.lease, ready.started
        timeouts = provider.timeouts
        clock = self._clock
        # Until commit, the request's deadline caps the attempt; the relay has the attempt's own.
        relay_deadline = started + timeouts.total
        deadline = min(relay_deadline, commit_by)
        # Until the first body byte, every read (a failure's body included) must end by this.
        first_byte_by = min(started + timeouts.first_byte, deadline)
        response: UpstreamResponse | None = None
        handed_off = False
        try:
            # One cancel scope per attempt, not one per read: its watchdog cancels it when a read
            # overruns (see watchdog.py). The client leaving or a lost hedge race cancels an
            # enclosing scope instead, which this one lets through.
            with new_scope(self.native_cancel) as scope:
                watchdog = watchdog_for(scope)  # the scope itself, when it is a TaskScope
                try:
                    watchdog.arm(first_byte_by - clock())
                    sending = self._transport.send(provider, url, headers, ready.body)
                    del headers  # the transport has what it needs: not held while the upstream thinks
                    response = await sending
                    lease.responded()
                    status = response.status
                    reason = classify_status(status)
                    if reason != "served":
                        return await self._unserved(
                            candidate, response, reason, failover_on, attempts, timeouts.idle, first_byte_by, watchdog
                        )
                    chunks = response.chunks
                    try:  # the first non-empty chunk (b"": none before the end), in this frame
                        first = await chunks.__anext__()
                        while not first:
                            first = await chunks.__anext__()
                    except StopAsyncIteration:
                        first = b""
                    ttfb = clock() - started
                    if not first:
                        return Failed("stream_interrupted", status, ttfb=ttfb)
                    if not stream:
                        limit = self._max_response_bytes
                        if response.drained:  # all of it came with the first chunk
                            whole: bytes | None = first if len(first) <= limit else None
                        else:
                            whole = await read_to_end(chunks, [first], limit, timeouts.idle, deadline, clock, watchdog)
                        if whole is None:
                            return Failed("upstream_5xx", status, ttfb=ttfb)
                        first = whole
                    handed_off = True
                    return Committed(candidate, response, first, provider, started, relay_deadline, ttfb, attempts)
                finally:
                    watchdog.close()
            # Only reached when the watchdog cancelled the scope: a read overran its time.
            return Failed("timeout", response.status if response else None)
        except Exception as exc:
            try:
                return Failed(classify_exception(exc), response.status if response else None)
            except UnrecognisedFailure:
                # The router's own failure (its client, or a bug), not the upstream's: not
                # retried, and counted against no breaker or statistic (classify.py).
                logger.exception("asgi_router: the router failed calling %s; not retried", candidate)
                return Failed("router_error", response.status if response else None, fatal=True)
        except BaseException:  # cancelled: the client left, or the attempt lost a hedge race
            request.aborted(ready)
            raise
        finally:
            if response is not None and (not handed_off or not stream):
                closing = close_response(response)  # closed even when cancelled: never leak it
                if closing is not None:
                    await closing

    async def _unserved(
        self,
        candidate: Candidate,
        response: UpstreamResponse,
        reason: Reason,
        failover_on: frozenset[Reason],
        attempts: int,
        idle: float,
        first_byte_by: float,
        watchdog: Watchdog,
    ) -> Failed | Refused:
        """A non-2xx answer: read its body (bounded, by the first-byte time) and fail over or refuse."""
        clock, status = self._clock, response.status
        if reason in failover_on:
            failure = await read_to_end(response.chunks, [], _FAILURE_BODY_CAP, idle, first_byte_by, clock, watchdog)
            reason, retry_after = _read_failure(reason, response.raw_headers, failure)
            return Failed(reason, status, retry_after)
        refusal = await read_to_end(response.chunks, [], self._max_response_bytes, idle, first_byte_by, clock, watchdog)
        if refusal is None:
            return Failed("upstream_5xx", status)
        if reason == "client_error":
            reason, words = _read_refusal(status, refusal)
            if reason in failover_on:
                return Failed(reason, status, words=words)
        return Refused(candidate, status, response.raw_headers, refusal, attempts, reason)


# Reading what a failure says (its body, its hint headers) only refines what its status already
# decided, so a bug there must not make the failure fatal (an exception out of an attempt that
# the tables do not know is a 502 ``router_error`` with no failover): it is logged, and the
# status alone decides.


def _read_failure(
    reason: Reason, headers: Sequence[tuple[bytes, bytes]], body: bytes | None
) -> tuple[Reason, float | None]:
    """A failed-over answer's refined reason and its retry hint; never raises."""
    try:
        if reason == "rate_limited":
            reason = refine_rate_limited(body)
        return reason, retry_hint(headers, body, rate_limited=reason == "rate_limited") if reason in _HINTED else None
    except Exception:
        logger.exception("asgi_router: could not read a %s answer's body or headers; its status decides", reason)
        return reason, None


def _read_refusal(status: int, body: bytes) -> tuple[Reason, str | None]:
    """A ``client_error``'s refined reason and the provider's words; never raises."""
    try:
        return refine_client_error(status, body)
    except Exception:
        logger.exception("asgi_router: could not read a %d answer's body; passed through as it is", status)
        return "client_error", None
