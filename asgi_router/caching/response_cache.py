"""The response cache's two points in a request's phases: the lookup, and the store.

**Lookup**, after the plan phase and before the wait for capacity and the attempts: the plan
says which group runs the request, and so whether its cache is asked and under which ref (a
caller cap's ``downgrade_to`` and the rules have had their say). Input checks that mask a
request run before it, so the key is built from what would be sent. A hit is answered at once,
in the shape asked (``replay_shapes.py``): no upstream is called, no candidate admitted, nothing spent
(the caller's ``rpm`` counted it at admission; its USD and token caps are not charged), and
the router's attempts header says ``0``. A miss goes on to the attempts with the answer's bytes captured
as they are sent.

**Store**, once the answer is complete (after any output check): only a complete successful
answer (a 2xx, read whole into an entry by ``stored_answer.py``: a finish reason, a stream that
ended as its protocol ends one), never an error, a refusal passed through, a group's canned
reply or a stream the client left; a continued (``resume``) stream is stored whole, as the
client got it.

The client's ``cache-control`` decides whether the cache is used at all: ``no-cache`` skips
the lookup and stores the answer, ``no-store`` does neither; both say ``bypass``.
The router's cache TTL header (``N`` seconds, named in ``router_headers.py``) shortens how long
the answer is kept (never past the group's ``ttl``). An entry's time runs from the moment its
last byte went to the client, not from the store after it: a client that asks again at once,
or a second later, sees the age and expiry the TTL promised, however long the store took.

A store that fails (Redis away) is a miss and a store skipped, logged, never the client's
problem.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from starlette.types import Message, Send

from asgi_router.caching.cache_key import cache_key
from asgi_router.caching.memory_entries import EntryStore
from asgi_router.caching.replay_shapes import render
from asgi_router.caching.stored_answer import StoredAnswer, read_answer
from asgi_router.config.cache_settings import CacheSettings
from asgi_router.core.router_errors import RouterError
from asgi_router.observability.events import CacheOutcome, logger
from asgi_router.request.request_state import RequestState
from asgi_router.request.router_headers import CACHE_TTL, add_router_headers

#: The route kinds whose answers a group's cache keeps: chat completions and Anthropic Messages.
CACHED_ROUTES: Final = frozenset(("chat", "messages"))

if TYPE_CHECKING:  # numpy is the semantic extra's: imported only by a router that asks for it
    from asgi_router.caching.semantic_lookup import Probe, SemanticLookup

__all__ = ["CAPTURE_FACTOR", "Pending", "ResponseCache"]

#: How many times an entry's largest stored size the answer's bytes may take as they are
#: captured: an event stream says the same text in far more bytes than the entry keeps (an
#: event of JSON around each few characters), so its capture is bounded well above the entry.
CAPTURE_FACTOR: Final = 16


class Pending:
    """A request whose answer may be stored: its key and time to live, and its bytes as sent."""

    __slots__ = (
        "_clock",
        "_limit",
        "_send",
        "ended",
        "group",
        "key",
        "max_entry_bytes",
        "over",
        "parts",
        "probe",
        "settings",
        "size",
        "ttl",
    )

    def __init__(
        self, key: str, ttl: int, group: str, settings: CacheSettings, send: Send, clock: Callable[[], float]
    ) -> None:
        self.key = key
        self.ttl = ttl
        self.group = group
        self.settings = settings
        max_entry_bytes = self.max_entry_bytes = settings.max_entry_bytes
        #: What a semantic lookup learned, to index the answer by once it is stored.
        self.probe: Probe | None = None
        self._limit = max_entry_bytes * CAPTURE_FACTOR
        self._send = send
        self.parts: list[bytes] = []
        self.size = 0
        #: The answer outgrew what may be captured: it is not stored.
        self.over = False
        self._clock = clock
        #: When the answer's last byte went to the client (``clock``); ``None`` until it has.
        self.ended: float | None = None

    async def __call__(self, message: Message) -> None:
        """The request's ``send``: each body message kept (bounded) on its way to the client."""
        if message["type"] == "http.response.body" and not self.over:
            body = message.get("body", b"")
            self.size += len(body)
            if self.size > self._limit:
                self.over = True
                self.parts.clear()
            elif body:
                self.parts.append(body)
            if not message.get("more_body", False):
                self.ended = self._clock()
        await self._send(message)


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


class ResponseCache:
    """One router's response cache over its entry store; ``wall`` is the Unix clock (ages),
    ``clock`` the router's clock that times an entry's TTL from its answer's end."""

    __slots__ = ("_clock", "_semantic", "_store", "_wall")

    def __init__(
        self,
        store: EntryStore,
        wall: Callable[[], float] = time.time,
        semantic: SemanticLookup | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._wall = wall
        self._clock = clock
        #: The groups' semantic lookups (``None``: no group asks for one).
        self._semantic = semantic

    @property
    def store(self) -> EntryStore:
        return self._store

    async def lookup(
        self,
        state: RequestState,
        payload: Mapping[str, Any],
        stream: bool,
        group: str,
        rule: str,
        settings: CacheSettings,
    ) -> Pending | RouterError | bool:
        """Ask the cache for ``payload``, planned on ``group`` by ``rule``: ``True`` when it was
        answered from an entry, a :class:`Pending` (the request's ``send`` to use) when its answer
        is to be stored, ``False`` when it is neither, or the refusal of a malformed header."""
        if state.kind not in CACHED_ROUTES:  # the Responses API's answers are stored by its providers
            return False
        headers = state.scope["headers"]
        control = _header(headers, b"cache-control")
        words = {word.strip() for word in control.lower().split(b",")} if control is not None else ()
        if b"no-store" in words:
            state.cache = CacheOutcome(group, "bypass")
            return False
        ttl = settings.ttl
        asked = _header(headers, CACHE_TTL)
        if asked is not None:
            if not asked.isdigit() or len(asked) > 9:
                return RouterError(400, "invalid_cache_ttl", f"{CACHE_TTL.decode()} must be a whole number of seconds")
            ttl = min(ttl, int(asked))
        caller = None if settings.shared else _caller(state)
        protocol = "messages" if state.anthropic else "chat"
        ref = f"group/{group}#{rule}"
        key = cache_key(payload, protocol, ref, caller)
        probe: Probe | None = None
        if b"no-cache" in words:
            state.cache = CacheOutcome(group, "bypass")
            if settings.semantic is not None and self._semantic is not None:  # stored: indexed too
                probe = self._semantic.probe_for(payload, protocol, ref, caller)
        else:
            entry = await self._get(key)
            if entry is not None:
                await self._serve(state, entry, stream, payload, CacheOutcome(group, "hit"))
                return True
            if settings.semantic is not None and self._semantic is not None:
                found, probe = await self._semantic.find(
                    group, settings.semantic, payload, protocol, ref, caller, state.request_id
                )
                entry = await self._get(found[0]) if found is not None else None
                if found is not None and entry is not None:
                    outcome = CacheOutcome(group, "semantic_hit", similarity=found[1])
                    await self._serve(state, entry, stream, payload, outcome)
                    return True
            state.cache = CacheOutcome(group, "miss")
        if ttl <= 0:
            return False
        pending = Pending(key, ttl, group, settings, state.send, self._clock)
        pending.probe = probe
        return pending

    async def keep(self, pending: Pending, state: RequestState) -> None:
        """Store the answer ``pending`` captured, when it is complete and successful."""
        if pending.over or state.status // 100 != 2 or state.degraded or state.disconnected or state.winner is None:
            return
        answer = read_answer(b"".join(pending.parts), anthropic=state.anthropic, stream=state.stream)
        pending.parts = []
        if answer is None:
            return
        spend = state.spend
        cost = spend.cost_usd if spend is not None and spend.cost_usd is not None else 0.0
        since = 0.0 if pending.ended is None else max(0.0, self._clock() - pending.ended)
        ttl = pending.ttl - since  # the TTL runs from the answer's end (the module docstring)
        raw = replace(answer, candidate=state.winner, cost_usd=cost, stored_at=self._wall() - since).dumps()
        if len(raw) > pending.max_entry_bytes or ttl <= 0:
            return
        try:
            await self._store.put(pending.key, raw, ttl)
            semantic = pending.settings.semantic
            if semantic is not None and self._semantic is not None:
                probe = pending.probe
                if probe is not None:
                    await self._semantic.remember(pending.group, semantic, probe, pending.key, state.request_id)
        except Exception:
            logger.exception("storing request %s's answer in the response cache failed", state.request_id)

    async def _get(self, key: str) -> StoredAnswer | None:
        try:
            raw = await self._store.get(key)
        except Exception:  # a store away is a miss
            logger.warning("the response cache could not be read: a miss", exc_info=True)
            return None
        return StoredAnswer.loads(raw) if raw is not None else None

    async def _serve(
        self, state: RequestState, entry: StoredAnswer, stream: bool, payload: Mapping[str, Any], found: CacheOutcome
    ) -> None:
        options = payload.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        content_type, body = render(entry, anthropic=state.anthropic, stream=stream, include_usage=include_usage)
        age = max(0, int(self._wall() - entry.stored_at))
        state.cache = replace(found, saved_tokens=entry.tokens, saved_usd=entry.cost_usd, age=age)
        state.winner = entry.candidate or None
        state.status = 200
        headers = add_router_headers([content_type], state, state.winner, 0)
        headers.append((b"content-length", b"%d" % len(body)))
        await state.send_tracked({"type": "http.response.start", "status": 200, "headers": headers})
        await state.send({"type": "http.response.body", "body": body, "more_body": False})
        state.bytes_relayed = len(body)
        state.complete()


def _caller(state: RequestState) -> str:
    """Who the entry belongs to: the principal inbound auth admitted, as text, as caller caps
    name it (an object an ``authorize=`` returned without a text of its own is named by its
    identity: at worst two requests of one caller miss, never two callers share)."""
    principal = state.principal
    return principal if isinstance(principal, str) else str(principal)
