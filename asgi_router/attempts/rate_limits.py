"""What providers say about their own limits, and the members they put over budget until a reset.

OpenAI sends ``x-ratelimit-remaining-requests`` / ``-tokens`` with ``x-ratelimit-reset-requests``
/ ``-tokens`` (a duration: ``1s``, ``6m0s``, ``20ms``); Anthropic sends
``anthropic-ratelimit-requests-remaining`` / ``-reset`` and the same for ``tokens`` (the reset an
RFC 3339 time). Read from every upstream answer of a provider with
``honour_rate_limit_headers`` (success, refusal or 429), they let the router route *ahead* of a
429 instead of after it: a member whose remaining requests reached 0 is over budget until the
requests reset, one whose remaining tokens cannot cover the request's estimate until the tokens
reset. A 429's own wait hint (``Retry-After`` and the like) marks the member the same way.

A reset longer than the router's ``max_rate_limit_reset`` is cut to it (one absurd header must
not bench a member for years). An over-budget member is skipped without a call, with the
existing skip reason ``over_budget`` and its reset as the Retry-After: it counts on no breaker,
and a group's ``queue`` waits for it.
With ``state_url`` a mark that blocks a member is shared with the fleet (``fleet/shared_rate_limits.py``).
Headers are only parsed when one is present: an answer that carries none costs a scan of its
header names. The table is bounded (clients may name any model of a configured provider); an
entry past its resets is dropped when next read.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Final

from asgi_router.attempts.hints import parse_duration

__all__ = ["MAX_MARKED", "MAX_RESET", "RateLimits", "read_rate_limits"]

#: Members whose limits are remembered at once; past it the least recently marked is forgotten.
MAX_MARKED: Final = 4096
#: The longest reset believed when no setting says otherwise (``max_rate_limit_reset``'s default).
MAX_RESET: Final = 300.0

# (kind, field) per header name: kind "requests" or "tokens", field "remaining" or "reset".
_HEADERS: Final[dict[bytes, tuple[str, str]]] = {
    b"x-ratelimit-remaining-requests": ("requests", "remaining"),
    b"x-ratelimit-remaining-tokens": ("tokens", "remaining"),
    b"x-ratelimit-reset-requests": ("requests", "reset"),
    b"x-ratelimit-reset-tokens": ("tokens", "reset"),
    b"anthropic-ratelimit-requests-remaining": ("requests", "remaining"),
    b"anthropic-ratelimit-requests-reset": ("requests", "reset"),
    b"anthropic-ratelimit-tokens-remaining": ("tokens", "remaining"),
    b"anthropic-ratelimit-tokens-reset": ("tokens", "reset"),
}
_PREFIXES: Final = (b"x-ratelimit-", b"anthropic-ratelimit-")
_FIRST_BYTES: Final = frozenset({b"x", b"X", b"a", b"A"})


def _seconds(value: str, now: datetime) -> float | None:
    """A reset as seconds from now: a duration (``6m0s``), seconds, epoch seconds or RFC 3339."""
    seconds = parse_duration(value, now=now)
    if seconds is not None:
        return seconds
    try:
        when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())


def read_rate_limits(
    headers: Iterable[tuple[bytes, bytes]], now: datetime | Callable[[], datetime]
) -> dict[str, tuple[int | None, float | None]] | None:
    """Per kind (``requests``, ``tokens``): ``(remaining, seconds to reset)`` as the headers say,
    or ``None`` when none is present. A value that does not parse is left out; never raises.

    ``now`` may be a wall clock, read only when a reset is to be parsed: most answers carry no
    rate-limit header, and reading the time would be their only cost.
    """
    found: dict[str, tuple[int | None, float | None]] | None = None
    for name, value in headers:
        if name[:1] not in _FIRST_BYTES:  # most headers end here, before a lower-cased copy
            continue
        name = name.lower()
        if not name.startswith(_PREFIXES):
            continue
        known = _HEADERS.get(name)
        if known is None:
            continue
        kind, part = known
        text = value.decode("latin-1").strip()
        if found is None:
            found = {}
        remaining, reset = found.get(kind, (None, None))
        if part == "remaining":
            remaining = int(text) if text.isdigit() and len(text) < 19 else remaining
        else:
            if not isinstance(now, datetime):
                now = now()
            reset = _seconds(text, now)
        found[kind] = (remaining, reset)
    return found


class _Marks:
    __slots__ = ("requests_until", "tokens", "tokens_until")

    def __init__(self) -> None:
        self.requests_until = 0.0
        self.tokens_until = 0.0
        self.tokens = 0


class RateLimits:
    """Members over a provider's stated limits, until when; one per router, one event loop."""

    __slots__ = ("_clock", "_publish", "_wall", "longest", "marks")

    def __init__(
        self, clock: Callable[[], float], wall: Callable[[], datetime] | None = None, longest: float = MAX_RESET
    ) -> None:
        self._clock = clock
        #: The longest reset believed, in seconds (``max_rate_limit_reset``): a longer one is cut to it.
        self.longest = longest
        self._wall = wall if wall is not None else (lambda: datetime.now(UTC))
        #: The members marked, by ``provider/model-id``: empty (false) while no provider said a word.
        self.marks: OrderedDict[str, _Marks] = OrderedDict()
        #: Tells the fleet of a mark that blocks a member (with ``state_url``; see :meth:`share`).
        self._publish: Callable[[str, float, int, float], None] | None = None

    def share(self, state: object) -> None:
        """With a fleet's shared ``state``: publish the marks that block a member, adopt the fleet's."""
        if not getattr(state, "shared", False):
            return
        from asgi_router.fleet.shared_state import SharedState  # redis is optional: only when shared

        if isinstance(state, SharedState):
            state.rate_limits.adopt = self.adopt
            state.rate_limits.longest = self.longest  # a mark past it is not believed from the fleet either
            self._publish = state.rate_limits.publish

    def adopt(self, key: str, requests_for: float, tokens: int, tokens_for: float) -> None:
        """Another process marked ``key``: its requests blocked for ``requests_for`` seconds, and
        ``tokens`` left for ``tokens_for`` seconds."""
        now = self._clock()
        marks = self.marks.get(key) or _Marks()
        if requests_for > 0:
            marks.requests_until = max(marks.requests_until, now + requests_for)
        if tokens_for > 0:
            marks.tokens, marks.tokens_until = tokens, now + tokens_for
        if marks.requests_until > now or marks.tokens_until > now:
            self._remember(key, marks)

    def blocked(self, key: str, tokens: Callable[[], int]) -> float | None:
        """Seconds until ``key`` may be called again, or ``None`` if it may be now.

        ``tokens`` is the request's estimate, asked only when a token limit is in force.
        """
        marks = self.marks.get(key)
        if marks is None:
            return None
        now = self._clock()
        if marks.requests_until > now:
            return marks.requests_until - now
        if marks.tokens_until > now:
            if marks.tokens < tokens():
                return marks.tokens_until - now
            return None
        del self.marks[key]  # every reset has passed
        return None

    def in_force(self) -> list[tuple[str, str, float, int | None]]:
        """The marks still in force, for the status page: ``(member, "requests" or "tokens",
        seconds until the reset, tokens left)``; ``requests``: no call until the reset, ``tokens``:
        none larger than the tokens left."""
        now = self._clock()
        found: list[tuple[str, str, float, int | None]] = []
        for key, marks in self.marks.items():
            if marks.requests_until > now:
                found.append((key, "requests", marks.requests_until - now, None))
            elif marks.tokens_until > now:
                found.append((key, "tokens", marks.tokens_until - now, marks.tokens))
        return found

    def observe(self, key: str, headers: Iterable[tuple[bytes, bytes]]) -> None:
        """Read an answer's rate-limit headers (when it has any) and mark ``key`` accordingly."""
        limits = read_rate_limits(headers, self._wall)
        if limits is None:
            return
        now = self._clock()
        marks = self.marks.get(key) or _Marks()
        longest = self.longest
        requests = limits.get("requests")
        if requests is not None and requests[0] is not None:  # the answer speaks of requests
            remaining, reset = requests
            marks.requests_until = now + min(reset, longest) if remaining == 0 and reset is not None else 0.0
        tokens = limits.get("tokens")
        if tokens is not None and tokens[0] is not None:
            marks.tokens, reset = tokens[0], tokens[1]
            marks.tokens_until = now + min(reset, longest) if reset is not None else 0.0
        if marks.requests_until > now or marks.tokens_until > now:
            self._remember(key, marks)
            self._tell(key, marks, now)
        else:
            self.marks.pop(key, None)  # the provider says there is room

    def wait(self, key: str, seconds: float) -> None:
        """A 429 asked to wait ``seconds``: ``key`` is over budget until then."""
        if seconds <= 0:
            return
        marks = self.marks.get(key) or _Marks()
        now = self._clock()
        marks.requests_until = max(marks.requests_until, now + min(seconds, self.longest))
        self._remember(key, marks)
        self._tell(key, marks, now)

    def _tell(self, key: str, marks: _Marks, now: float) -> None:
        """Publish a mark that blocks ``key`` outright (requests, or tokens, at none left): a
        remaining token count blocks only requests larger than it, too fine to broadcast."""
        if self._publish is None:
            return
        requests_for = max(0.0, marks.requests_until - now)
        tokens_for = max(0.0, marks.tokens_until - now) if marks.tokens == 0 else 0.0
        if requests_for or tokens_for:
            self._publish(key, requests_for, 0, tokens_for)

    def _remember(self, key: str, marks: _Marks) -> None:
        table = self.marks
        table[key] = marks
        table.move_to_end(key)
        if len(table) > MAX_MARKED:
            table.popitem(last=False)
