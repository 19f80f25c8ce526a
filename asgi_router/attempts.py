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
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import anyio

from .classify import Reason, UnrecognisedFailure, classify_exception, classify_status, parse_retry_after
from .errors import AttemptSummary, RouterError, exhausted_error
from .events import AttemptEvent, RequestRecord, logger
from .plan import Candidate, Plan
from .upstream import ProviderRuntime, Transport, UpstreamResponse

__all__ = ["AttemptLoop", "Committed", "Refused", "WireBody", "wire_targets"]

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
    ) -> None:
        self._transport = transport
        self._providers = providers
        self._max_response_bytes = max_response_bytes
        self._clock = clock

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
        wire = WireBody(payload)
        summaries: list[AttemptSummary] = []
        attempts = 0
        for candidate in plan.candidates:
            provider = self._providers.get(candidate.provider)
            if provider is None or not provider.configured:
                self._note(record, candidate, "skipped", _Failed("provider_not_configured"), 0.0, summaries)
                continue
            body = wire.for_model(candidate.model_id)
            if not wire_targets(body, candidate.model_id):  # pragma: no cover - defence in depth
                raise AssertionError(f"target guard: wire body does not name {candidate}")
            attempts += 1
            started = self._clock()
            record.in_flight = (str(candidate), started)
            result = await self._attempt(
                candidate,
                provider,
                provider.urls[route],
                headers_for(provider),
                body,
                stream,
                plan.failover_on,
                started,
                attempts,
            )
            record.in_flight = None
            if not isinstance(result, _Failed):
                if isinstance(result, Refused):
                    record.events.append(
                        AttemptEvent(
                            record.request_id,
                            len(record.events),
                            str(candidate),
                            "failed",
                            result.reason,
                            result.status,
                            self._clock() - started,
                            principal=record.principal,
                        )
                    )
                return result
            self._note(record, candidate, "failed", result, self._clock() - started, summaries)
            if result.fatal:
                return RouterError(502, "router_error", "\n".join(s.line() for s in summaries), tuple(summaries))
        return exhausted_error(summaries)

    @staticmethod
    def _note(
        record: RequestRecord,
        candidate: Candidate,
        outcome: Any,
        failure: _Failed,
        latency: float,
        summaries: list[AttemptSummary],
    ) -> None:
        name = str(candidate)
        summaries.append(AttemptSummary(name, failure.reason, failure.status, failure.retry_after))
        record.events.append(
            AttemptEvent(
                record.request_id,
                len(record.events),
                name,
                outcome,
                failure.reason,
                failure.status,
                latency,
                failure.ttfb,
                principal=record.principal,
            )
        )

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


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None
