"""One request's state: what the request is and what has happened to it so far.

The middleware makes one :class:`RequestState` per request and drops it with the request; every
phase (admit, read, plan, wait for capacity, attempts, answer) reads and writes this one object,
and nothing of the request lives on the middleware. It holds the request's identity (id, path,
protocol, who was admitted, what ``model`` it asked for), what planning made of it (the rule,
the plan's candidates, the sticky and queue outcomes, the caller caps' verdict), every attempt's
event as it ends, control state (the attempt in flight, whether the client left, whether the
response started), and what the answer came to (status, winner, bytes, spend).

The published :class:`~asgi_router.observability.events.RequestRecord` is written once, from
this object, when the request is over (:meth:`RequestState.close`): no other code builds or
writes a record. The router's response headers are built from it too
(``router_headers.py``). It is also the party the disconnect listener tells when the client
leaves (:class:`~asgi_router.inbound.disconnect.ListeningScope`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from starlette.types import Message, Receive, Scope, Send

from asgi_router.core.deadlines import Deadline
from asgi_router.core.reasons import Reason
from asgi_router.core.route_paths import RouteKind
from asgi_router.observability.events import AttemptEvent, CacheOutcome, HedgeOutcome, Outcome, RequestRecord
from asgi_router.protocols.stream_end import ends_stream
from asgi_router.request.spend import Spend

if TYPE_CHECKING:  # opentelemetry is optional: only a traced request holds one
    from asgi_router.guardrails.guardrail_run import GuardSet, Ran
    from asgi_router.observability.tracing import RequestTrace

__all__ = ["RequestState", "Stuck"]


class Stuck:
    """A sticky group's request that has a key: its group, its key, and the member the key had
    when its plan was made (``None``: none, or one no longer in the plan)."""

    __slots__ = ("group", "key", "member")

    def __init__(self, group: str, key: str, member: str | None) -> None:
        self.group = group
        self.key = key
        self.member = member


class RequestState:
    """One request from arrival to its record: what it is, what happened so far, what it came to."""

    __slots__ = (
        "admitted",
        "anthropic",
        "bytes_relayed",
        "cache",
        "caller",
        "caller_outcome",
        "chunks_relayed",
        "degraded",
        "disconnected",
        "downgrade_to",
        "events",
        "facts",
        "finished",
        "guardrails",
        "guards",
        "hedge",
        "in_flight",
        "key_charge",
        "key_groups",
        "key_id",
        "kind",
        "last_sent",
        "limit",
        "path",
        "plan",
        "principal",
        "queued",
        "receive",
        "ref",
        "request_id",
        "response_started",
        "resumes",
        "rule",
        "scope",
        "send",
        "session",
        "spend",
        "started_at",
        "status",
        "sticky",
        "stream",
        "stuck",
        "trace",
        "winner",
    )

    def __init__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        request_id: str,
        path: str = "",
        kind: RouteKind = "chat",
        started_at: float = 0.0,
    ) -> None:
        self.scope = scope
        #: The URL path asked for, below ``root_path`` (``inbound/mounting.py``).
        self.path = path
        #: The protocol the path speaks (``core/route_paths.py``).
        self.kind = kind
        #: The path speaks Anthropic's Messages API: errors in its shape.
        self.anthropic = kind == "messages"
        self.receive = receive
        self.send = send
        self.request_id = request_id
        #: When the request arrived, in Unix seconds (wall clock, for people and files).
        self.started_at = started_at
        #: Who inbound auth admitted (the attempt events carry it).
        self.principal: object = None
        #: Inbound auth admitted it (its spend is kept in the ledger, if there is one).
        self.admitted = False
        #: The virtual key that admitted it (its id), when one did, and the refs that key may
        #: ask for (``None``: every ref).
        self.key_id: str | None = None
        self.key_groups: tuple[str, ...] | None = None
        #: Charges what the request used to the key's own caps, once known (``None``: the key
        #: has none, or no key).
        self.key_charge: Callable[[int, float], None] | None = None
        #: The digest of its session, when sessions are capped and it names one.
        self.session: str | None = None
        #: The ``model`` asked for, once it is safe to log (``-`` until then).
        self.ref = "-"
        self.stream = False
        #: The ``[[rules]]`` entry that chose the plan, once one was resolved (``None``: not yet).
        self.rule: str | None = None
        #: The plan's candidates in the order the strategy gave them.
        self.plan: tuple[str, ...] = ()
        #: The request facts the rules read, kept only when a sink records them.
        self.facts: dict[str, object] | None = None
        #: What the caller caps made of it: the caller, ``served``/``downgraded``/``refused``, and
        #: the cap that downgraded or refused it.
        self.caller: str | None = None
        self.caller_outcome: Literal["served", "downgraded", "refused"] | None = None
        self.limit: str | None = None
        #: The ref a caller cap downgraded the request to (``None``: served as asked).
        self.downgrade_to: str | None = None
        #: A sticky group's keyed request: its key and the member it had, once planned; then how
        #: it stuck, ``(group, hit | miss | moved)``, once answered.
        self.stuck: Stuck | None = None
        self.sticky: tuple[str, str] | None = None
        #: A request that joined its group's queue: ``(group, outcome, seconds waited)``.
        self.queued: tuple[str, str, float] | None = None
        #: What became of the hedge a hedging group started.
        self.hedge: HedgeOutcome | None = None
        #: Each break of the stream the router tried to continue, and how that ended.
        self.resumes: tuple[tuple[str, str], ...] = ()
        #: Every attempt's (and skip's) event, in the order they ended.
        self.events: list[AttemptEvent] = []
        self.response_started = False
        self.finished = False
        self.disconnected = False
        #: The candidate being tried or relayed right now, and since when: if the client leaves
        #: meanwhile, :meth:`close` events it as ``aborted``.
        self.in_flight: tuple[str, float] | None = None
        #: The request's trace, when a tracer provider is set.
        self.trace: RequestTrace | None = None
        #: What the answer came to.
        self.status = 0
        self.winner: str | None = None
        self.bytes_relayed = 0
        #: Chunks a relay sent, kept current should it be cancelled (an estimate counts them).
        self.chunks_relayed = 0
        #: The last chunk the relay sent (kept current by it): whether it ends the stream is
        #: asked only when the client leaves.
        self.last_sent = b""
        self.degraded = False
        self.spend: Spend | None = None
        #: What a cached group's response cache made of the request (``None``: none was asked).
        self.cache: CacheOutcome | None = None
        #: The guardrails this request runs (``None``: none), once planned.
        self.guards: GuardSet | None = None
        #: Each guardrail's run so far: ``(name, stage, outcome)`` (``None``: none ran).
        self.guardrails: list[Ran] | None = None

    def event(
        self,
        candidate: str,
        outcome: Outcome,
        reason: Reason,
        status: int | None = None,
        latency: float = 0.0,
        ttfb: float | None = None,
        cost_usd: float | None = None,
        cause: str | None = None,
    ) -> int:
        """Add an attempt's (or skip's) event; its index among the request's events."""
        events = self.events
        at = len(events)
        events.append(
            AttemptEvent(
                self.request_id, at, candidate, outcome, reason, status, latency, ttfb, cost_usd, self.principal, cause
            )
        )
        return at

    def guarded(self, ran: list[Ran]) -> None:
        """Add guardrails' runs (the record's ``guardrails``)."""
        if self.guardrails is None:
            self.guardrails = []
        self.guardrails += ran

    def dropped(self, candidate: str, headers: int) -> None:
        """``candidate``'s latest event also says ``headers`` of its response were not relayed."""
        events = self.events
        for at in range(len(events) - 1, -1, -1):
            if events[at].candidate == candidate:
                events[at] = replace(events[at], dropped_headers=headers)
                return

    def attempts(self) -> int:
        """How many candidates were tried (skips not counted)."""
        return sum(1 for e in self.events if e.outcome != "skipped")

    def complete(self) -> None:
        """The whole response has been handed to the server: a disconnect from now on is not an
        abort (uvicorn's ``receive`` reports one as soon as a response is complete), so the
        listener must not cancel what is left (closing the upstream response)."""
        self.finished = True

    async def send_tracked(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.response_started = True
        await self.send(message)

    def client_left(self, scope: Deadline) -> None:
        """The client disconnected: cancel ``scope`` unless the response is already complete, or
        its stream's last event has been sent (the client has the whole answer: what is left is
        the upstream's end, not the client's)."""
        if not self.finished and not ends_stream(self.last_sent):
            self.disconnected = True
            scope.cancel()

    def close(self, now: float, latency: float) -> RequestRecord:
        """The request is over: the record, written once from what the request came to.

        A client that left makes the status 499 and the attempt or relay that was in flight an
        ``aborted`` event (``now`` is the monotonic clock).
        """
        if self.disconnected:
            self.status = 499
            if self.in_flight is not None:
                candidate, since = self.in_flight
                self.event(candidate, "aborted", "client_disconnected", None, now - since)
        self.in_flight = None
        spend = self.spend
        tokens = spend.tokens if spend is not None else None
        ran = self.guardrails
        # Every field in its order, positionally: a record per request, and keyword arguments
        # made building it several times dearer (docs/performance.md).
        return RequestRecord(
            self.request_id,
            self.ref,
            self.stream,
            self.status,
            self.winner,
            self.bytes_relayed,
            latency,
            self.events,
            self.rule if self.rule is not None else "default",  # route
            self.plan,
            self.degraded,
            tokens.prompt if tokens is not None else None,  # prompt_tokens
            tokens.completion if tokens is not None else None,  # completion_tokens
            spend.cost_usd if spend is not None else None,  # cost_usd
            self.principal,
            self.started_at,
            tokens.measured if tokens is not None else False,  # tokens_measured
            self.hedge,
            self.facts,
            self.resumes,
            self.caller,
            self.caller_outcome,
            self.limit,
            self.sticky,
            self.queued,
            tokens.cache_read if tokens is not None else 0,  # cached_prompt_tokens
            tokens.cache_write if tokens is not None else 0,  # cache_write_tokens
            self.cache,
            self.key_id,
            self.session,
            tuple((name, outcome) for name, _, outcome in ran) if ran else (),  # guardrails
            tuple(stage for _, stage, _ in ran) if ran else (),  # guardrail_stages
        )
