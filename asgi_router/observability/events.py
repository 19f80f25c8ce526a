"""What happened to a request, as data: one :class:`AttemptEvent` per attempt.

Events are built from candidates, reasons, statuses and timings only, so they cannot carry an
API key. Each also carries the request's ``principal`` (who inbound auth admitted: an
``api_keys`` name or fingerprint, or whatever the host's ``authorize`` callable returned) so
that a sink can account per key.

The stdlib ``logging`` sink writes one structured line per request on the ``asgi_router``
logger; it is skipped entirely (no formatting) when that logger is not enabled for INFO, so it
costs nothing on a quiet production logger. The principal is not in the line (a host's
principal object may hold anything); the record rides along as ``extra={"asgi_router": ...}``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Final, Literal

from asgi_router.core.reasons import Reason

__all__ = [
    "AttemptEvent",
    "CacheOutcome",
    "CacheVerdict",
    "HedgeOutcome",
    "Outcome",
    "RequestRecord",
    "log_request",
    "logger",
    "principal_text",
]

logger = logging.getLogger("asgi_router")

#: ``resumed``: a committed stream that broke and was continued by another call (its reason
#: is the break's: ``stream_interrupted`` or ``timeout``).
Outcome = Literal["served", "failed", "skipped", "aborted", "resumed"]

#: A hedge that ``won`` (it decided the request), ``lost`` (another attempt did), ``failed``
#: (it ended without deciding), or was ``denied`` (due, but the group's hedge budget was spent).
HedgeOutcome = Literal["won", "lost", "failed", "denied"]

#: What a cached group's response cache made of a request: served from an entry (``hit``), from
#: an entry for a paraphrase (``semantic_hit``), not found (``miss``: answered upstream, and
#: stored when complete), or not looked up at the client's ``cache-control`` (``bypass``).
CacheVerdict = Literal["hit", "semantic_hit", "miss", "bypass"]


@dataclass(frozen=True, slots=True)
class CacheOutcome:
    """A cached group's request as its response cache saw it (the record's ``cache``)."""

    #: The group whose cache was asked (a configured name: a metric label).
    group: str
    outcome: CacheVerdict
    #: A hit's stored usage and cost: what serving it from the cache saved.
    saved_tokens: int = 0
    saved_usd: float = 0.0
    #: A hit's entry's age in seconds, and a semantic hit's cosine similarity.
    age: int | None = None
    similarity: float | None = None


@dataclass(frozen=True, init=False)
class AttemptEvent:
    """One candidate's attempt (or skip) within one request.

    Frozen: an event is what happened, and a sink may keep it; assigning a field raises
    :class:`dataclasses.FrozenInstanceError`. Every request builds at least one, so its
    ``__init__`` is written out and fills the fields directly rather than through the frozen
    dataclass's generated one (docs/performance.md); everything else (repr, equality, hashing,
    ``fields``, ``asdict``, ``replace``) is the dataclass's own. It takes every field, in order,
    with its default (a test checks it against :func:`dataclasses.fields`).
    """

    request_id: str
    #: 0-based position among the request's attempts and skips.
    index: int
    #: ``provider/model-id``.
    candidate: str
    outcome: Outcome
    reason: Reason
    status: int | None = None
    #: Seconds from sending to the end of this attempt (to the end of the relay if served).
    latency: float = 0.0
    #: Seconds from sending to the first body byte, when one arrived.
    ttfb: float | None = None
    #: USD this attempt cost (served attempts of models with catalog prices).
    cost_usd: float | None = None
    #: Who inbound auth admitted (``None`` when serving unauthenticated).
    principal: object = None
    #: A ``circuit_open`` skip: why that breaker opened (``failures`` or ``slow``).
    cause: str | None = None
    #: Upstream response headers not relayed because their value held a control byte.
    dropped_headers: int = 0

    def __init__(
        self,
        request_id: str,
        index: int,
        candidate: str,
        outcome: Outcome,
        reason: Reason,
        status: int | None = None,
        latency: float = 0.0,
        ttfb: float | None = None,
        cost_usd: float | None = None,
        principal: object = None,
        cause: str | None = None,
        dropped_headers: int = 0,
    ) -> None:
        fields = self.__dict__
        fields["request_id"] = request_id
        fields["index"] = index
        fields["candidate"] = candidate
        fields["outcome"] = outcome
        fields["reason"] = reason
        fields["status"] = status
        fields["latency"] = latency
        fields["ttfb"] = ttfb
        fields["cost_usd"] = cost_usd
        fields["principal"] = principal
        fields["cause"] = cause
        fields["dropped_headers"] = dropped_headers


@dataclass(slots=True)
class RequestRecord:
    """The per-request summary the logging sink writes as one line.

    A summary, not control state: what steers the request while it runs (the attempt in
    flight, the committed stream's lease, whether the client left) lives on the request's
    context in the middleware, which writes the answer's fields here once the request is over.
    Only the attempt events (and the hedge's fate) are added as they happen.
    """

    request_id: str
    ref: str
    stream: bool = False
    status: int = 0
    winner: str | None = None
    bytes_relayed: int = 0
    latency: float = 0.0
    events: list[AttemptEvent] = field(default_factory=list)
    #: The ``[[rules]]`` entry that chose the plan (``default`` when none did).
    route: str = "default"
    #: The plan's candidates in the order the strategy gave them.
    plan: tuple[str, ...] = ()
    #: Whether the group's canned reply was sent because every candidate failed.
    degraded: bool = False
    #: Tokens the served response used (from its ``usage``, else estimated) and their cost.
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost_usd: float | None = None
    #: Who inbound auth admitted (``None`` when serving unauthenticated or refused).
    principal: object = None
    #: When the request arrived, in Unix seconds (wall clock, for people and files).
    started_at: float = 0.0
    #: Whether ``prompt_tokens`` and ``completion_tokens`` are the upstream's own ``usage``
    #: (otherwise they are estimates).
    tokens_measured: bool = False
    #: What became of the hedge a hedging group started (``None``: no hedge was due).
    hedge: HedgeOutcome | None = None
    #: The request facts the configured rules read, kept only for a sink that records them
    #: (:class:`~asgi_router.observability.jsonl.JsonlSink`); ``None`` otherwise.
    facts: dict[str, object] | None = None
    #: Each break of the stream the router tried to continue: the candidate whose stream broke,
    #: and ``served`` (the answer was finished) or ``failed`` (the client got the in-band error).
    resumes: tuple[tuple[str, str], ...] = ()
    #: The caller as caller caps count it (``callers``/``sessions`` configured; else ``None``).
    caller: str | None = None
    #: What the caps made of the request: ``served``, ``downgraded`` or ``refused``.
    caller_outcome: Literal["served", "downgraded", "refused"] | None = None
    #: The cap that downgraded or refused it (the router's limit header), e.g. ``usd_per_day``.
    limit: str | None = None
    #: A sticky group's request that had a key: ``(group, outcome)``, outcome ``hit``, ``miss``
    #: or ``moved`` (sent in the router's sticky header).
    sticky: tuple[str, str] | None = None
    #: A request that joined its group's queue: ``(group, outcome, seconds waited)``, outcome
    #: ``served``, ``timed_out``, ``full`` or ``left``.
    queued: tuple[str, str, float] | None = None
    #: Of ``prompt_tokens``, those the provider read from its prompt cache (OpenAI's
    #: ``cached_tokens``, Anthropic's ``cache_read_input_tokens``) and wrote to it (Anthropic's
    #: ``cache_creation_input_tokens``); ``cost_usd`` prices each at its catalog rate.
    cached_prompt_tokens: int = 0
    cache_write_tokens: int = 0
    #: A cached group's request: what its response cache made of it (``None``: no cache asked).
    cache: CacheOutcome | None = None
    #: The virtual key that admitted the request (its id; ``None``: not a virtual key).
    key_id: str | None = None
    #: The request's session as caps count it: the digest of its caller and id, never the id
    #: (``None``: sessions are not capped, or it named none).
    session: str | None = None
    #: Each guardrail that ran: ``(name, outcome)``, outcome ``pass``, ``block``, ``mask``,
    #: ``flag`` or ``fail_over``, in the order they ran (the prompt's, then each answer's).
    guardrails: tuple[tuple[str, str], ...] = ()
    #: The stage each of ``guardrails`` ran at (``input`` or ``output``), in the same order.
    guardrail_stages: tuple[str, ...] = ()


def _attempt_text(event: AttemptEvent) -> str:
    status = f"({event.status})" if event.status is not None else ""
    cause = f"[{event.cause}]" if event.cause is not None else ""
    return f"{event.candidate}:{event.outcome}:{event.reason}{cause}{status}"


def _tokens_text(record: RequestRecord) -> str:
    """``prompt+completion``, marked ``~`` when they are estimates (a resumed stream's, or an
    upstream's that stated no usage), as ``tokens_measured`` says on the record; then the prompt
    tokens read from and written to the provider's prompt cache, when there were any."""
    if record.prompt_tokens is None:
        return "-"
    text = f"{'' if record.tokens_measured else '~'}{record.prompt_tokens}+{record.completion_tokens}"
    if record.cached_prompt_tokens or record.cache_write_tokens:  # the prompt cache's share of the prompt
        text += f",cached={record.cached_prompt_tokens},cache_write={record.cache_write_tokens}"
    return text


_SAFE_PRINCIPAL: Final = re.compile(r"[A-Za-z0-9_.:@\-]{1,64}")


def principal_text(principal: object) -> str:
    """The principal as a log token: a short safe name as is, anything else only by its type.

    ``authorize=`` may return any object (a user, a dict with a token): its text could carry a
    secret or a line break, so only a plain name is written out.
    """
    if principal is None:
        return "-"
    if isinstance(principal, str) and _SAFE_PRINCIPAL.fullmatch(principal):
        return principal
    return f"<{type(principal).__name__}>"


_LINE: Final = (
    "request_id=%s ref=%s stream=%s status=%d winner=%s attempts=[%s] latency_ms=%.1f ttfb_ms=%s bytes=%d"
    " route=%s plan=[%s] degraded=%s tokens=%s cost_usd=%s principal=%s"
)


def log_request(record: RequestRecord) -> None:
    """Write the request's one structured line, if INFO is enabled on ``asgi_router``."""
    if not logger.isEnabledFor(logging.INFO):
        return
    ttfb = next((e.ttfb for e in reversed(record.events) if e.ttfb is not None), None)
    line = _LINE
    args: tuple[object, ...] = (
        record.request_id,
        record.ref,
        "true" if record.stream else "false",
        record.status,
        record.winner or "-",
        " ".join(_attempt_text(e) for e in record.events),
        record.latency * 1000,
        f"{ttfb * 1000:.1f}" if ttfb is not None else "-",
        record.bytes_relayed,
        record.route,
        " ".join(record.plan),
        "true" if record.degraded else "false",
        _tokens_text(record),
        f"{record.cost_usd:.6f}" if record.cost_usd is not None else "-",
        principal_text(record.principal),
    )
    if record.guardrails:  # named only where a guardrail ran
        line += " guardrails=[%s]"
        args += (" ".join(f"{name}:{outcome}" for name, outcome in record.guardrails),)
    logger.info(line, *args, extra={"asgi_router": record})
