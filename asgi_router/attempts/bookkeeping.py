"""What happens around each attempt so that strategies have numbers to read.

Before an attempt, the decision point (``decisions.py``) asks three of its questions here: does
the candidate's catalog context window hold the estimated prompt plus ``max_tokens``
(:meth:`Bookkeeper.fits`; if not, it skips it as ``context_window``), is its rpm/tpm budget
in this plan's group spent (:meth:`Bookkeeper.over_budget`: the seconds until usage frees up,
the ``over_budget`` skip's Retry-After), and did its provider say in its rate-limit headers that
it is at its limit (:meth:`Bookkeeper.over_stated_limit`: ``over_budget`` too, until the stated
reset; ``rate_limits.py``). These are asked when the loop *reaches* the candidate, not when the
plan was ordered, so a budget that freed up in between is used.

Around the attempt it keeps :class:`~asgi_router.resilience.stats.RoutingStats` current: in-flight counts
(acquired at send, released exactly once however the attempt ends), time to first byte on
commit, and a failure as a TTFB equal to the provider's first-byte timeout, so that a member
which keeps failing sinks under ``latency`` instead of looking fast. Usage is counted as one
request and the estimated prompt tokens at send, and corrected with the real count once the
response has been sent (``usage.py``).

Only keys the configuration mentions (group members, alias and rule targets, catalog entries)
are tracked, so clients naming arbitrary ``provider/model-id`` values cannot grow the tables.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from asgi_router.attempts.rate_limits import MAX_RESET, RateLimits
from asgi_router.attempts.usage import estimated, find_usage
from asgi_router.config.ledger_settings import effective_ledger_url
from asgi_router.config.named import named_models
from asgi_router.config.settings import RouterSettings
from asgi_router.core.classify import NOT_PENALISED
from asgi_router.core.reasons import Reason
from asgi_router.request.spend import Spend, TokenCount
from asgi_router.resilience.stats import RoutingStats
from asgi_router.routing.catalog import Catalog
from asgi_router.routing.facts import RequestFacts
from asgi_router.routing.policy import GroupPolicy

__all__ = ["Bookkeeper"]


#: What a response whose tokens are not counted used, as far as the router knows (shared).
_NOTHING_COUNTED: Final = Spend(None, None)
#: A named tuple made from its fields, as its own ``__new__`` would: every counted response makes
#: two, on the request's path (docs/performance.md).
_made: Final = tuple.__new__


class Bookkeeper:
    """Admission queries and statistics upkeep around attempts; one per router."""

    def __init__(
        self,
        stats: RoutingStats,
        catalog: Catalog,
        tracked: Iterable[str],
        metered: Iterable[str],
        *,
        count_all: bool = False,
        estimate_all: bool = False,
        honoured: Iterable[str] = (),
        clock: Callable[[], float] = time.monotonic,
        longest_reset: float = MAX_RESET,
    ) -> None:
        self.stats = stats
        #: The providers whose rate-limit headers (and 429 waits) are read, and what they said.
        self._honoured = frozenset(honoured)
        self.rate_limits = RateLimits(clock, longest=longest_reset)
        self._catalog = catalog
        #: Count every served response's reported tokens (the metrics report them), not only
        #: where a budget or a price needs them (:meth:`needs_estimate`).
        self.counts_all = count_all
        #: Count (estimate where need be) every served response: caller caps charge each one.
        self._estimate_all = estimate_all
        listed = catalog.keys()
        #: Keys with a catalog entry (a context window to fit).
        self._listed = listed
        #: Keys whose in-flight count and TTFB are kept.
        self._tracked = frozenset(tracked) | listed
        #: Keys with an rpm/tpm budget somewhere: their usage is counted.
        self._metered = frozenset(metered)
        #: Keys whose every response is counted, estimated where it reports no usage: a budget
        #: or a price needs a number. Decided here, once, from the budgets and the catalog.
        self._priced = frozenset(key for key in listed if catalog.is_priced(key))
        self._estimated = self._metered | self._priced

    @classmethod
    def from_settings(
        cls, settings: RouterSettings, stats: RoutingStats, clock: Callable[[], float] = time.monotonic
    ) -> Bookkeeper:
        """Track every model the configuration names; meter those with an rpm/tpm budget; count
        every response's tokens when the metrics are served; estimate every response's when
        callers or sessions are capped (their caps count tokens and USD) or a ledger keeps spend; read the rate-limit
        headers of the providers that honour them."""
        metered = {
            member.ref
            for name in settings.groups
            for member in settings.flat_member_settings(name)
            if member.rpm is not None or member.tpm is not None
        }
        # A ledger keeps every admitted request's tokens and cost, as caps count them.
        kept = effective_ledger_url(settings.ledger_url, settings.admin_keys) is not None
        counted = settings.metrics_route is not None or kept
        capped = bool(settings.callers) or settings.sessions is not None or kept
        honoured = [name for name, provider in settings.providers.items() if provider.honour_rate_limit_headers]
        return cls(
            stats,
            Catalog(settings.catalog),
            named_models(settings),
            metered,
            count_all=counted,
            estimate_all=capped,
            honoured=honoured,
            clock=clock,
            longest_reset=settings.max_rate_limit_reset,
        )

    def fits(self, key: str, facts: RequestFacts) -> bool:
        """Whether ``key``'s catalog context window holds this request (an unlisted key does)."""
        return key not in self._listed or self._catalog.fits(key, facts.prompt_tokens, facts.max_tokens)

    def over_budget(self, key: str, policy: GroupPolicy | None, facts: RequestFacts) -> float | None:
        """``None`` while ``key`` is within its rpm/tpm budget in ``policy``'s group, else the
        seconds until its usage frees up."""
        limits = policy.limits.get(key) if policy is not None else None
        if limits is not None:
            tokens = facts.prompt_tokens if limits.tpm is not None else 0
            if not self.stats.within_budget(key, limits, tokens):
                return self.stats.usage_frees_in(key)
        return None

    def over_stated_limit(self, key: str, facts: RequestFacts) -> float | None:
        """``None`` unless ``key``'s provider said it is at its limit (no requests left, or fewer
        tokens than this request's estimate), else the seconds until the stated reset."""
        if not self.rate_limits.marks:  # no provider said a word: the usual case, one test
            return None
        return self.rate_limits.blocked(key, lambda: facts.prompt_tokens)

    def answered(self, provider: str, key: str, headers: Sequence[tuple[bytes, bytes]]) -> None:
        """An upstream answered ``key``'s attempt: read its rate-limit headers, if its provider
        honours them and it sent any."""
        if provider in self._honoured:
            self.rate_limits.observe(key, headers)

    def rate_limited(self, provider: str, key: str, retry_after: float | None) -> None:
        """``key`` answered 429 asking to wait ``retry_after`` seconds: over budget until then."""
        if retry_after is not None and provider in self._honoured:
            self.rate_limits.wait(key, retry_after)

    def started(self, key: str, facts: RequestFacts) -> None:
        if key in self._tracked:
            self.stats.acquire(key)
        if key in self._metered:
            self.stats.add_usage(key, 1, facts.prompt_tokens)

    def committed(self, key: str, ttfb: float) -> None:
        """A candidate's first byte arrived and it won (it stays in flight until :meth:`finished`)."""
        if key in self._tracked:
            self.stats.observe_latency(key, ttfb)

    def failed(self, key: str, facts: RequestFacts, reason: Reason, elapsed: float, penalty: float) -> None:
        """An attempt ended without commit: a failure, a refusal, a lost hedge or a disconnect."""
        if key in self._tracked:
            self.stats.release(key)
            if reason == "hedge_lost":
                self.stats.observe_latency(key, elapsed)  # a lower bound on its TTFB: still news
            elif reason not in NOT_PENALISED:
                self.stats.observe_latency(key, max(elapsed, penalty))
        if key in self._metered and reason != "client_disconnected":
            self.stats.add_usage(key, 0, -facts.prompt_tokens)  # no completion was generated

    def needs_estimate(self, key: str) -> bool:
        """Whether a response of ``key`` that reports no ``usage`` must still be counted (estimated):
        budgets and prices need a number; metrics and traces report only what upstreams said."""
        return self._estimate_all or key in self._estimated

    def finished(self, key: str, facts: RequestFacts, data: bytes | None, chunks: int | None = None) -> Spend:
        """A committed response was sent (or broke off): release it and count what it used.

        ``data`` is the whole body (non-streaming) or the stream's tail; ``chunks`` the number of
        chunks a stream had. ``None`` data (not kept: the caller keeps it where :attr:`counts_all`
        or :meth:`needs_estimate` say, or a trace wants the usage) counts nothing. Where no
        estimate is needed, only the upstream's own ``usage`` counts.
        """
        if key in self._tracked:
            self.stats.release(key)
        if data is None:
            return _NOTHING_COUNTED
        if not (self._estimate_all or key in self._estimated):
            # Counted to be reported (metrics, traces): usage or nothing (as needs_estimate says).
            usage = find_usage(data)  # a usage without its prompt (the tail lost it) is not reported
            if usage is None or usage[0] is None:
                return _NOTHING_COUNTED
            return Spend(TokenCount(usage[0], usage[1], True, usage[2], usage[3]), None)
        found = find_usage(data)  # as count_tokens, inline: every counted response
        if found is not None and found[0] is not None:
            tokens = _made(TokenCount, (found[0], found[1], True, found[2], found[3]))
        else:  # the prompt is estimated only where no usage states it
            tokens = estimated(found, data, facts.prompt_tokens, chunks)
        if key in self._metered:
            self.stats.add_usage(key, 0, tokens.total - facts.prompt_tokens)
        if key not in self._priced:  # unpriced (usual without a catalog): no cost to work out
            return _made(Spend, (tokens, None))
        cost = self._catalog.cost(key, tokens.prompt, tokens.completion, tokens.cache_read, tokens.cache_write)
        return Spend(tokens, cost)
